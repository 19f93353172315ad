#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages) and builds specula.
#   scripts/setup.sh [BUILD_DIR [extra cmake args...]]
# Idempotent: installs only missing packages, reconfigures and rebuilds incrementally.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libsentencepiece-dev nlohmann-json3-dev libcli11-dev
          catch2 libbenchmark-dev libopenblas-dev libtomlplusplus-dev python3 python3-matplotlib)
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
