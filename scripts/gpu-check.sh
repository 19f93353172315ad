#!/usr/bin/env bash
# The CUDA backend's proof on a GPU machine, in under 8 minutes (so that it can run twice in
# 15 minutes of device time): proves the binaries run there (ldd, the carried libraries found
# through LD_LIBRARY_PATH), runs the [gpu] tests, makes a random TinyLlama-1.1B-shape
# checkpoint, runs bench_cuda (copy bandwidth, decode tokens/s at batch 1/8/16/32 for the three
# bundled models and the 1.1B shape, prefill tokens/s) and prints one table last.
# usage: scripts/gpu-check.sh [BUNDLE.tar.xz | BUILD_DIR]
#   BUNDLE: made here by scripts/gpu-bundle.sh (default ./gpu-bundle.tar.xz, carried);
#   BUILD_DIR: a build folder with tests/specula_tests, cli/specula, bench/bench_cuda;
#   neither: builds build-gpu here for sm_90 (needs the project's -dev packages there).
# Logs and bench.json go to $OUT (the device tool's folder) or ./gpu-check-out.
# Exit status: 0 all passed, 1 a test or step failed, 2 no GPU or the binaries cannot run.
set -uo pipefail
t0=$(date +%s)
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
out=${OUT:-$repo/gpu-check-out}
mkdir -p "$out"
say() { echo "gpu-check: $*"; }
die() { echo "gpu-check: error: $*" >&2; exit 2; }
elapsed() { echo $(( $(date +%s) - t0 )); }

# 0. A GPU, as the machine reports it.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  die "no GPU on this machine (nvidia-smi -L fails or is missing); nothing to check"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv |
  tee "$out/card.csv"

# 1. The binaries: a carried bundle, a carried build, or a build here.
src=${1:-gpu-bundle.tar.xz}
if [ -f "$src" ]; then
  bin=/tmp/specula-gpu-bundle
  rm -rf "$bin" && mkdir -p "$bin" && tar -xJf "$src" -C "$bin" || die "cannot unpack $src"
  tests=$bin/bin/specula_tests specula=$bin/bin/specula bench=$bin/bin/bench_cuda
  libdir=$bin/lib baked=$(cat "$bin/source_dir") module=$bin/lib/libspecula_cuda.so
elif [ -d "$src" ] && [ -x "$src/tests/specula_tests" ]; then
  tests=$src/tests/specula_tests specula=$src/cli/specula bench=$src/bench/bench_cuda
  libdir=$src/lib baked=$(grep '^CMAKE_HOME_DIRECTORY:' "$src/CMakeCache.txt" | cut -d= -f2)
  module=$(cd "$src" && pwd)/engine/cuda/libspecula_cuda.so
else
  say "no bundle or build at '$src': building build-gpu for sm_90 here"
  { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build build-gpu -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target specula_tests specula bench_cuda; } > "$out/build.log" 2>&1 ||
    die "the build failed (tail of $out/build.log):$(echo; tail -20 "$out/build.log")"
  tests=build-gpu/tests/specula_tests specula=build-gpu/cli/specula bench=build-gpu/bench/bench_cuda
  libdir=build-gpu/lib baked=$repo module=$repo/build-gpu/engine/cuda/libspecula_cuda.so
fi
# cuBLASLt and the CUDA runtime from the machine's toolkit (or PyTorch's wheels) when not carried.
cuda_dirs=$(for f in /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda*/targets/x86_64-linux/lib/libcublasLt.so.13 \
                  /usr/lib/x86_64-linux-gnu/libcublasLt.so.13 /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libcublasLt.so.13 \
                  /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublasLt.so.13; do
              [ -e "$f" ] && dirname "$f"; done | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$libdir:${cuda_dirs}${LD_LIBRARY_PATH:-}"
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# The binaries load the CUDA backend's module from here (engine/cuda/cuda_loader.cpp).
export SPECULA_CUDA_MODULE="$module"
say "SPECULA_CUDA_MODULE=$SPECULA_CUDA_MODULE"
for b in "$tests" "$specula" "$bench" "$module"; do
  [ -x "$b" ] || die "$b is missing"
  missing=$(ldd "$b" 2>&1 | grep -E 'not found|version .* not found' || true)
  [ -z "$missing" ] || die "$b cannot run here:$(echo; echo "$missing")"
done
"$specula" --help >/dev/null 2>&1 || die "$specula does not start (glibc or libstdc++ older than the build's?)"
# The test and bench binaries read models and data under the source path compiled into them.
if [ "$baked" != "$repo" ] && [ ! -e "$baked/models" ]; then
  mkdir -p "$(dirname "$baked")" && ln -sfn "$repo" "$baked" || die "cannot link $baked to $repo"
  say "linked $baked -> $repo (the source path compiled in)"
fi
say "binaries run ($(elapsed) s)"

# 2. The [gpu] tests.
status=0
timeout 210 "$tests" "[gpu]" --durations yes > "$out/gpu-tests.log" 2>&1
tests_rc=$?
tail -25 "$out/gpu-tests.log"
[ $tests_rc -eq 0 ] || status=1
tests_line=$(grep -E '^(All tests passed|test cases:)' "$out/gpu-tests.log" | tail -1)
[ $tests_rc -eq 124 ] && tests_line="timed out after 210 s"
say "[gpu] tests: rc $tests_rc ($(elapsed) s)"

# 3. A random TinyLlama-1.1B-shape checkpoint.
ckpt=/tmp/specula-tinyllama-1.1b
if [ ! -f "$ckpt/config.json" ]; then
  rm -rf "$ckpt"
  timeout 90 "$specula" make-checkpoint --shape tinyllama-1.1b --out "$ckpt" > "$out/checkpoint.log" 2>&1 ||
    { say "make-checkpoint failed: $(tail -3 "$out/checkpoint.log")"; status=1; }
fi
models="models/target-16m,models/draft-4m,models/draft-1m"
[ -f "$ckpt/config.json" ] && models="$models,$ckpt"
say "checkpoint ready ($(elapsed) s)"

# 4. The benchmarks (within what is left of 8 minutes, less the table).
left=$(( 460 - $(elapsed) ))
[ $left -lt 30 ] && left=30
SPECULA_CUDA_BENCH_MODELS=$models timeout "$left" "$bench" --benchmark_format=console \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json > "$out/bench.log" 2>&1
bench_rc=$?
[ $bench_rc -eq 0 ] || { status=1; tail -15 "$out/bench.log"; }
say "bench_cuda: rc $bench_rc ($(elapsed) s)"

# 5. One table, last.
python3 - "$out/bench.json" "$tests_line" "$(elapsed)" "$(head -2 "$out/card.csv" | tail -1)" <<'PY'
import json, sys, statistics
path, tests_line, seconds, card = sys.argv[1:5]
try:
    runs = json.load(open(path))["benchmarks"]
except Exception as e:
    runs = []
    print(f"(no benchmark results: {e})")
bw = next((r.get("bytes_per_s") for r in runs if r["name"].startswith("BM_CopyBandwidth")), None)
per = {}
for r in runs:
    if r.get("run_type") == "aggregate" or "tokens_per_s" not in r:
        continue
    per.setdefault(r["run_name"], []).append(r)
print()
print(f"card: {card}")
print(f"device-to-device copy: {bw / 1e9:.0f} GB/s (read + write)" if bw else "device-to-device copy: not measured")
print(f"{'benchmark':<44} {'tokens/s':>10} {'floor tok/s':>12} {'of floor':>9} {'reps':>5}")
for name, rs in per.items():
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    floor = rs[0].get("floor_tokens_per_s")
    frac = f"{tps / floor:8.1%}" if floor else ""
    name = name.split("/min_time")[0]
    print(f"{name:<44} {tps:>10.0f} {floor or 0:>12.0f} {frac:>9} {len(rs):>5}")
print(f"[gpu] tests: {tests_line or 'no summary line'}")
print(f"gpu-check: {seconds} s")
PY
exit $status
