#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages; for a full build also the npm packages of
# tests/reference), builds specula and, for a full build, writes the tokenizer reference the
# tests read (BUILD_DIR/tokenizer-reference).
#   scripts/setup.sh [--target TARGET] [BUILD_DIR [extra cmake args...]]
# --target builds only that CMake target (e.g. specula, the command-line program) instead of
# everything (tests and benchmarks included). Idempotent: installs only missing packages,
# reconfigures and rebuilds incrementally. apt's own progress is shown as it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

target=()
if [ "${1:-}" = "--target" ]; then
  [ $# -ge 2 ] || { echo "setup: --target needs a target name" >&2; exit 2; }
  target=(--target "$2")
  shift 2
fi

packages=(build-essential cmake ninja-build pkg-config libsentencepiece-dev nlohmann-json3-dev libcli11-dev
          catch2 libbenchmark-dev libopenblas-dev libtomlplusplus-dev python3 python3-matplotlib
          libpcre2-dev libutf8proc-dev libboost-context-dev python3-dev pybind11-dev python3-pytest
          libcpp-httplib-dev)
# node and npm run the tokenizer reference of the tests (tests/reference) and the OpenAI client
# that tests `specula serve` (tests/server); any node >= 18 will do.
if [ ${#target[@]} -eq 0 ] && ! { command -v node && command -v npm; } >/dev/null; then packages+=(nodejs npm); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: apt-get update (package lists)"
  $sudo apt-get update
  echo "setup: installing ${missing[*]} (a few minutes on a fresh machine)"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
fi

# nvcc is optional; CUDA's usual location is added so a toolkit install is found.
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"

build_dir="${1:-build}"
shift || true
echo "setup: configuring $build_dir"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
echo "setup: building ${target[1]:-everything} in $build_dir"
# The cores, whatever OMP_NUM_THREADS says (GNU nproc reports that instead when it is set,
# and the test command sets it to 1).
cmake --build "$build_dir" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" "${target[@]}"
[ ${#target[@]} -eq 0 ] || exit 0  # a single target needs no test reference

# The real tokenizer files and the reference implementations (tests/reference/package-lock.json),
# then their encodings and chat renderings, regenerated when the script or the lock changes.
if [ ! -d tests/reference/node_modules ]; then
  echo "setup: npm ci in tests/reference (tokenizer reference implementations)"
  (cd tests/reference && npm ci --no-audit --no-fund --loglevel=error)
fi
# The official OpenAI client the server test drives (tests/server/package-lock.json).
if [ ! -d tests/server/node_modules ]; then
  echo "setup: npm ci in tests/server (the OpenAI client of the server test)"
  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)
fi
reference="$build_dir/tokenizer-reference/tokenizer-reference.json"
if [ ! -f "$reference" ] || [ tests/reference/make_reference.mjs -nt "$reference" ] ||
   [ tests/reference/package-lock.json -nt "$reference" ]; then
  echo "setup: writing the tokenizer reference in $build_dir/tokenizer-reference"
  node tests/reference/make_reference.mjs "$build_dir/tokenizer-reference"
fi
