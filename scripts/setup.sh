#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages; the npm packages of tests/reference), builds
# specula and writes the tokenizer reference the tests read (BUILD_DIR/tokenizer-reference).
#   scripts/setup.sh [BUILD_DIR [extra cmake args...]]
# Idempotent: installs only missing packages, reconfigures and rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libsentencepiece-dev nlohmann-json3-dev libcli11-dev
          catch2 libbenchmark-dev libopenblas-dev libtomlplusplus-dev python3 python3-matplotlib
          libpcre2-dev libutf8proc-dev)
# node and npm run the tokenizer reference (tests/reference); any node >= 18 will do.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# nvcc is optional; CUDA's usual location is added so a toolkit install is found.
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"

build_dir="${1:-build}"
shift || true
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"

# The real tokenizer files and the reference implementations (tests/reference/package-lock.json),
# then their encodings and chat renderings, regenerated when the script or the lock changes.
if [ ! -d tests/reference/node_modules ]; then
  (cd tests/reference && npm ci --no-audit --no-fund --loglevel=error)
fi
reference="$build_dir/tokenizer-reference/tokenizer-reference.json"
if [ ! -f "$reference" ] || [ tests/reference/make_reference.mjs -nt "$reference" ] ||
   [ tests/reference/package-lock.json -nt "$reference" ]; then
  node tests/reference/make_reference.mjs "$build_dir/tokenizer-reference"
fi
