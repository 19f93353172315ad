#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a bare GPU machine into one archive:
#   bin/specula_tests, bin/specula, bin/bench_cuda (stripped), lib/libspecula_cuda.so (the CUDA
#   backend's module, which the binaries load by the path in SPECULA_CUDA_MODULE), lib/ (every
#   shared library ldd resolves for them and the module outside glibc and the CUDA toolkit's
#   large libraries, which the GPU machine has), source_dir (the source path the test and bench
#   binaries have compiled in: gpu-check.sh links it to the checkout it runs in),
#   compute-sanitizer/ (the CUDA toolkit's folder of that name, docs and headers left out, when
#   this machine has one: $CUDA_HOME, /usr/local/cuda*, or the compute-sanitizer on PATH;
#   without it gpu-check.sh uses the GPU machine's).
# The archive is gzip-compressed: a bare GPU machine may lack xz.
# usage: scripts/gpu-bundle.sh BUILD_DIR [ARCHIVE]   (ARCHIVE defaults to gpu-bundle.tar.gz)
# Build first, for Hopper:  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release
#   -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu --target specula_tests specula bench_cuda
set -euo pipefail
build=${1:?usage: scripts/gpu-bundle.sh BUILD_DIR [ARCHIVE]}
archive=${2:-gpu-bundle.tar.gz}
bins=("$build/tests/specula_tests" "$build/cli/specula" "$build/bench/bench_cuda")
module="$build/engine/cuda/libspecula_cuda.so"
for b in "${bins[@]}" "$module"; do
  [ -x "$b" ] || { echo "gpu-bundle: error: $b is missing; build specula_tests, specula and bench_cuda in $build" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "${bins[@]}"; do
  cp "$b" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$(basename "$b")"
done
cp "$module" "$stage/lib/"
strip --strip-unneeded "$stage/lib/libspecula_cuda.so"
# glibc's own libraries must match the machine's loader; the CUDA driver comes with the machine.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libcublas|libcublasLt)'
for b in "${bins[@]}" "$module"; do
  ldd "$b" | awk '/=> \//{print $1" "$3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$stage/lib/$name"
done
grep '^CMAKE_HOME_DIRECTORY:' "$build/CMakeCache.txt" | cut -d= -f2 > "$stage/source_dir"
# compute-sanitizer's folder holds the tool and the libraries it injects (toolkit bin/ holds a
# launcher only).
san_dir=""
on_path=$(dirname "$(readlink -f "$(command -v compute-sanitizer || echo /nonexistent)")")
for d in ${CUDA_HOME:+"$CUDA_HOME/compute-sanitizer"} /usr/local/cuda/compute-sanitizer /usr/local/cuda*/compute-sanitizer \
         "$on_path" "$on_path/../compute-sanitizer"; do
  [ -f "$d/compute-sanitizer" ] && [ -x "$d/compute-sanitizer" ] && compgen -G "$d/*.so*" > /dev/null && { san_dir=$(cd "$d" && pwd); break; }
done
parts=(bin lib source_dir)
if [ -n "$san_dir" ]; then
  mkdir -p "$stage/compute-sanitizer"
  tar -C "$san_dir" --exclude=./docs --exclude=./include -cf - . | tar -C "$stage/compute-sanitizer" -xf -
  parts+=(compute-sanitizer)
  echo "gpu-bundle: compute-sanitizer from $san_dir ($(du -sh "$stage/compute-sanitizer" | cut -f1))"
else
  echo "gpu-bundle: no compute-sanitizer here (CUDA_HOME, /usr/local/cuda*, PATH): not carried; gpu-check.sh uses the GPU machine's"
fi
tar -czf "$archive" -C "$stage" "${parts[@]}"
echo "gpu-bundle: $archive ($(du -h "$archive" | cut -f1)): $(ls "$stage/lib" | tr '\n' ' ')"
echo "gpu-bundle: source dir compiled in: $(cat "$stage/source_dir")"
