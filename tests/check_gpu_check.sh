#!/usr/bin/env bash
# scripts/gpu-check.sh without a GPU: its verdicts on recorded outputs (tests/data/gpu-check/:
# catch2-no-gpu.xml and bench-no-gpu/row-0.json are real runs without a GPU, speculation-results.jsonl
# two CPU runs' results cut to the fields read, the rest are written in the same formats), then both calls end to end over stand-in binaries and compute-sanitizer
# (passing, with a skipped test case, with sanitizer errors, with a benchmark row past its
# timeout, with the budget spent, stopped by a signal), then, when BUILD_DIR holds the CUDA
# module, both calls over the real binaries, which must fail with the reason.
# usage: tests/check_gpu_check.sh SOURCE_DIR [BUILD_DIR]
set -uo pipefail
src=$(cd "${1:?usage: tests/check_gpu_check.sh SOURCE_DIR [BUILD_DIR]}" && pwd)
build=${2:-}
check=$src/scripts/gpu-check.sh
data=$src/tests/data/gpu-check
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 checks=0

# expect NAME STATUS PATTERN COMMAND...: COMMAND exits STATUS and its last line matches PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 3
  "$@" > "$work/last.txt" 2>&1
  local got=$? line
  line=$(tail -1 "$work/last.txt")
  checks=$((checks + 1))
  if [ "$got" -ne "$want" ] || ! grep -qE -- "$pattern" <<< "$line"; then
    fails=$((fails + 1))
    echo "FAIL $name: exit $got (want $want), last line: $line (want /$pattern/)"
    sed 's/^/    /' "$work/last.txt" | tail -40
  else
    echo "ok   $name: $line"
  fi
}

# 1. The verdicts on recorded outputs.
v() { "$check" verdict "$@"; }
expect "tests, none skipped" 0 '^\[gpu\] tests: passed: 7 test cases ran' v tests "$data/catch2-passed.xml" 7 0
expect "tests, all skipped" 3 '^\[gpu\] tests: FAILED: 7 of 7 test cases skipped: no GPU' v tests "$data/catch2-no-gpu.xml" 7 0
expect "tests, one skipped, one failed" 1 'FAILED: 1 of 7 test cases skipped.*1 of 7 test cases failed' \
  v tests "$data/catch2-failed.xml" 7 1
expect "tests, fewer than listed" 1 'FAILED: 7 of 9 test cases reported' v tests "$data/catch2-passed.xml" 9 0
sed 's/successes="1543"/successes="0"/' "$data/catch2-passed.xml" > "$work/silent.xml"
expect "tests, no assertion" 1 'FAILED: no assertion ran' v tests "$work/silent.xml" 7 0
head -c 900 "$data/catch2-passed.xml" > "$work/cut.xml"
expect "tests, report cut off" 1 'FAILED: no complete Catch2 report .*timed out' v tests "$work/cut.xml" 7 124
expect "tests, no report" 1 'FAILED: no complete Catch2 report' v tests "$work/missing.xml" 7 0
expect "memcheck, clean" 0 '^memcheck: passed: 0 errors' v sanitizer memcheck "$data/memcheck-clean.log" "$data/catch2-passed.xml" 7 0
expect "memcheck, an error" 1 '^memcheck: FAILED: 1 errors reported \(Invalid __global__ write' \
  v sanitizer memcheck "$data/memcheck-errors.log" "$data/catch2-passed.xml" 7 1
expect "racecheck, clean" 0 '^racecheck: passed: 0 errors' v sanitizer racecheck "$data/racecheck-clean.log" "$data/catch2-passed.xml" 7 0
expect "racecheck, a race" 1 '^racecheck: FAILED: 1 errors reported \(Error: Race reported' \
  v sanitizer racecheck "$data/racecheck-errors.log" "$data/catch2-passed.xml" 7 1
head -1 "$data/memcheck-clean.log" > "$work/nosummary.log"
expect "memcheck, no summary" 1 'FAILED: no summary line from memcheck \(timed out\)' \
  v sanitizer memcheck "$work/nosummary.log" "$work/cut.xml" 7 124
expect "memcheck, tests skipped under it" 1 'FAILED: the test cases under it: 7 of 7 test cases skipped' \
  v sanitizer memcheck "$data/memcheck-clean.log" "$data/catch2-no-gpu.xml" 7 0
expect "bench, every row" 0 '^bench: passed: 3 of 3 rows finished' v bench "$data/bench-passed"
expect "bench, no GPU" 1 '^bench: FAILED: 0 of 3 rows finished; BM_CopyBandwidth: skipped \(no GPU' v bench "$data/bench-no-gpu"
cp -r "$data/bench-passed" "$work/cut" && sed -i '$d' "$work/cut/rows.tsv" && echo "the call's budget of 240 s was spent" > "$work/cut/stopped"
expect "bench, budget spent" 1 'FAILED: 2 of 3 rows finished; 1 rows not run \(the call.s budget of 240 s was spent\): BM_Prefill/draft-1m' \
  v bench "$work/cut"
sed -i '2s/\t0\t3$/\t124\t60/' "$work/cut/rows.tsv" && rm "$work/cut/row-1.json"
expect "bench, a row timed out" 1 'FAILED: 1 of 3 rows finished; BM_Decode/draft-1m/8: timed out after 60 s' v bench "$work/cut"
spec=$data/speculation-results.jsonl
expect "speculation, greedy equal" 0 '^speculation: passed: 2 jobs ran; 2 greedy requests equal plain' v speculation "$spec" 2 0
expect "speculation, jobs missing" 1 '^speculation: FAILED: 2 of 3 jobs ran \(timed out\)' v speculation "$spec" 3 124
sed '2s/"ids": \[260, /"ids": [261, /' "$spec" > "$work/spec.jsonl"
expect "speculation, a token differs" 1 'FAILED: 1 of 2 greedy requests differ from plain decoding \(draft-1m' \
  v speculation "$work/spec.jsonl" 2 0

# 2. Both calls end to end over stand-ins: a build folder of scripts that write what the real
# binaries write, compute-sanitizer and nvidia-smi on PATH.
fake=$work/build fakebin=$work/bin
mkdir -p "$fake/tests" "$fake/cli" "$fake/bench" "$fake/engine/cuda" "$fakebin"
echo "CMAKE_HOME_DIRECTORY:INTERNAL=$src" > "$fake/CMakeCache.txt"
printf '#!/bin/sh\n' > "$fake/engine/cuda/libspecula_cuda.so"
cat > "$fakebin/nvidia-smi" <<'EOF'
#!/bin/sh
[ "$1" = -L ] && { echo "GPU 0: stand-in"; exit 0; }
echo "name, memory.total [MiB]"; echo "stand-in, 1 MiB"
EOF
# specula_tests: the recorded report of the [gpu] test cases that the spec names
# (FAKE_SKIP=1: as without a GPU).
cat > "$fake/tests/specula_tests" <<EOF
#!/usr/bin/env python3
import os, re, sys
args = sys.argv[1:]
spec = args[1] if args[0] == "--list-test-names-only" else args[0]
src = "$data/catch2-no-gpu.xml" if os.environ.get("FAKE_SKIP") else "$data/catch2-passed.xml"
text = open(src).read()
cases = re.findall(r'    <TestCase name="([^"]*)".*?</TestCase>\n', text, re.S)
def pattern(p):  # a name, or a prefix ending in *, quoted or not
    p = p.strip('"')
    return (lambda n: n.startswith(p[:-1])) if p.endswith("*") else (lambda n: n == p)
include, _, exclude = spec.partition("~")
inc, exc = pattern(include), pattern(exclude) if exclude else (lambda n: False)
keep = lambda n: spec == "[gpu]" or (inc(n) and not exc(n))
if args[0] == "--list-test-names-only":
    print("\n".join(n for n in cases if keep(n)))
    sys.exit(0)
for m in re.finditer(r'    <TestCase name="([^"]*)".*?</TestCase>\n', text, re.S):
    if not keep(m.group(1)):
        text = text.replace(m.group(0), "")
open(args[args.index("-o") + 1], "w").write(text)
EOF
cat > "$fake/cli/specula" <<'EOF'
#!/bin/sh
# make-checkpoint --shape S --out DIR
[ "$1" = make-checkpoint ] && { mkdir -p "$5" && echo '{}' > "$5/config.json"; }
exit 0
EOF
# bench_cuda: lists rows named as bench_cuda names them (batches 1 and 8 alone); a row whose name
# holds $FAKE_SLOW sleeps.
cat > "$fake/bench/bench_cuda" <<'EOF'
#!/bin/sh
names="BM_CopyBandwidth/iterations:1/real_time"
IFS=,
for d in $SPECULA_CUDA_BENCH_MODELS; do
  m=${d##*/}
  names="$names
BM_Decode/$m/1/min_time:0.500/repeats:3/real_time
BM_Decode/$m/8/min_time:0.500/repeats:3/real_time
BM_Prefill/$m/min_time:0.500/repeats:3/real_time"
done
unset IFS
[ "$1" = --benchmark_list_tests=true ] && { echo "$names"; exit 0; }
n=$(echo "$names" | grep -E "${1#--benchmark_filter=}")
case "$n" in
  "") runs="" ;;
  *Copy*) runs="{\"name\": \"$n\", \"run_name\": \"$n\", \"run_type\": \"iteration\", \"iterations\": 1, \"bytes_per_s\": 8e12}" ;;
  *) r="{\"name\": \"$n\", \"run_name\": \"$n\", \"run_type\": \"iteration\", \"iterations\": 10, \"tokens_per_s\": 1000, \"floor_tokens_per_s\": 4000}"
     runs="$r, $r, $r" ;;
esac
case "$n" in *"${FAKE_SLOW:-@}"*) echo "slow row started"; exec sleep 30 ;; esac
echo "{\"context\": {}, \"benchmarks\": [$runs]}" > "${2#--benchmark_out=}"
EOF
# compute-sanitizer: runs the program, then its summary (FAKE_SANITIZER_ERRORS: that many errors).
cat > "$fakebin/compute-sanitizer" <<'EOF'
#!/bin/sh
tool=memcheck
while [ $# -gt 0 ]; do
  case "$1" in
    --tool) tool=$2; shift 2 ;;
    --kernel-name) echo "========= checking kernels $2"; shift 2 ;;
    --error-exitcode) shift 2 ;;
    *) break ;;
  esac
done
echo "========= COMPUTE-SANITIZER"
"$@"; rc=$?
n=${FAKE_SANITIZER_ERRORS:-0}
[ "$n" -gt 0 ] && echo "========= Invalid __global__ read of size 4 bytes" && rc=1
if [ "$tool" = racecheck ]; then echo "========= RACECHECK SUMMARY: $n hazards displayed ($n errors, 0 warnings)"
else echo "========= ERROR SUMMARY: $n errors"; fi
exit $rc
EOF
chmod +x "$fake/tests/specula_tests" "$fake/cli/specula" "$fake/bench/bench_cuda" "$fake/engine/cuda/libspecula_cuda.so" "$fakebin"/*
run() { env PATH="$fakebin:$PATH" OUT="$work/out" GPU_CHECK_CKPT="$work/ckpt" "$@"; }
expect "tests call, passing" 0 '^gpu-check: tests: passed in [0-9]+ s: \[gpu\] tests: passed: 7 test cases ran.*memcheck: passed: 0 errors; 4 test cases.*racecheck: passed: 0 errors; 3 test cases' \
  run "$check" tests "$fake"
expect "racecheck watches our kernels only" 0 '^========= checking kernels kns=specula$' \
  grep "checking kernels" "$work/out/tests/racecheck.log"
expect "tests call, skipped" 1 '^gpu-check: tests: FAILED in [0-9]+ s: \[gpu\] tests: FAILED: 7 of 7 test cases skipped.*memcheck: FAILED: not run' \
  run FAKE_SKIP=1 "$check" tests "$fake"
expect "tests call, sanitizer errors" 1 '^gpu-check: tests: FAILED .*memcheck: FAILED: 1 errors reported.*racecheck: FAILED: 1 errors' \
  run FAKE_SANITIZER_ERRORS=1 "$check" tests "$fake"
expect "bench call, passing" 0 '^gpu-check: bench: passed in [0-9]+ s: bench: passed: 13 of 13 rows finished' \
  run "$check" bench "$fake"
grep -q '^BM_Decode/ckpt/8  ' "$work/last.txt" || { fails=$((fails + 1)); echo "FAIL bench call, passing: no table row for BM_Decode/ckpt/32"; }
expect "bench call, a row past its timeout" 1 'FAILED: 12 of 13 rows finished; BM_Decode/draft-4m/8: timed out after 2 s' \
  run FAKE_SLOW=draft-4m/8/ GPU_CHECK_ROW_S=2 "$check" bench "$fake"
# The slow row takes what is left of the budget: the rows after it are not run.
expect "bench call, budget spent" 1 'FAILED: [0-9]+ of 13 rows finished' \
  run FAKE_SLOW=target-16m/8/ GPU_CHECK_BENCH_S=8 GPU_CHECK_ROW_MIN_S=1 "$check" bench "$fake"
grep -q '^BM_Decode/target-16m/1  ' "$work/last.txt" && grep -q "rows not run (the call's budget of 8 s was spent)" "$work/last.txt" ||
  { fails=$((fails + 1)); echo "FAIL bench call, budget spent: no table of the rows that finished, or no rows not run"; }
# A signal during a row: the table of the rows that finished, at once.
rm -rf "$work/out"
env PATH="$fakebin:$PATH" OUT="$work/out" GPU_CHECK_CKPT="$work/ckpt" FAKE_SLOW=draft-1m/1/ "$check" bench "$fake" > "$work/signal.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q 'slow row started' "$work/out/bench/bench.log" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
wait $pid
got=$?
checks=$((checks + 1))
if [ $got -ne 1 ] || ! grep -q 'stopped by a signal' "$work/signal.txt" || ! grep -q '^BM_Prefill/draft-4m  ' "$work/signal.txt" ||
   ! tail -1 "$work/signal.txt" | grep -q 'rows not run (a signal stopped the run)'; then
  fails=$((fails + 1))
  echo "FAIL bench call, signal: exit $got"; sed 's/^/    /' "$work/signal.txt" | tail -30
else
  echo "ok   bench call, signal: $(tail -1 "$work/signal.txt")"
fi

# 3. The real binaries where the runtime sees no GPU.
if [ -n "$build" ] && [ -x "$build/engine/cuda/libspecula_cuda.so" ] && [ -x "$build/bench/bench_cuda" ]; then
  nvbin=$work/nv
  mkdir -p "$nvbin" && cp "$fakebin/nvidia-smi" "$nvbin/"
  real() { env PATH="$nvbin:$PATH" CUDA_VISIBLE_DEVICES= OUT="$work/out-real" GPU_CHECK_CKPT="$work/ckpt-real" "$@"; }
  expect "real tests call, no GPU" 1 '^gpu-check: tests: FAILED .*test cases skipped: no GPU' real "$check" tests "$build"
  expect "real bench call, no GPU" 1 '^gpu-check: bench: FAILED .*BM_CopyBandwidth: skipped \(no GPU' real "$check" bench "$build"
else
  echo "(no CUDA module in '${build:-}': the real binaries' calls not checked)"
fi

echo "$((checks - fails)) passed, $fails failed"
[ $fails -eq 0 ]
