#!/usr/bin/env bash
# The CUDA backend's proof on a GPU machine, in two calls of under 5 minutes each (so that both fit
# in 15 minutes of device time with room to rerun one):
#   scripts/gpu-check.sh tests [BUNDLE.tar.gz | BUILD_DIR]
#     the [gpu] tests, then compute-sanitizer memcheck over the `cuda kernels:*` test cases
#     (GPU_CHECK_SANITIZE_FILTER, a Catch2 test spec, narrows or widens them) and racecheck over
#     our kernels in those cases but the matrix products' (GPU_CHECK_RACECHECK_FILTER,
#     GPU_CHECK_RACECHECK_KERNELS);
#   scripts/gpu-check.sh speculation [BUNDLE.tar.gz | BUILD_DIR]
#     configs/gpu-speedup.toml through the experiment runner (plain against chains, trees and
#     n-grams on the CUDA backend, greedy): every greedy request must emit plain decoding's
#     tokens; a table of tok/s and speedups;
#   scripts/gpu-check.sh bench [BUNDLE.tar.gz | BUILD_DIR]
#     a random TinyLlama-1.1B-shape checkpoint, then bench_cuda one row at a time, each under its
#     own timeout within the call's budget (copy bandwidth, decode tokens/s at batch 1/8/16/32 for
#     the three bundled models and the 1.1B shape, prefill tokens/s), and one table last of the
#     rows that finished, also when the budget or a signal cuts the run short.
# Each first proves the binaries run there (ldd, the carried libraries found through LD_LIBRARY_PATH).
#   BUNDLE: made here by scripts/gpu-bundle.sh (default ./gpu-bundle.tar.gz, carried);
#   BUILD_DIR: a build folder with tests/specula_tests, cli/specula, bench/bench_cuda;
#   neither: builds build-gpu here for sm_90 (needs the project's -dev packages there).
# Nothing passes without having run: each of these fails the check: a [gpu] test case that
# skipped, a test run with no assertion, a test case missing from the report, a sanitizer run
# without its summary or with errors, a benchmark row that skipped, failed, timed out, wrote no
# rows or was not reached.
# Logs go to $OUT/MODE (the device tool's folder; at most 7 files a call) or ./gpu-check-out/MODE.
# Exit status: 0 all passed, 1 a step failed or did no work, 2 no GPU or the binaries cannot run;
# the last line says which steps failed and why.
# scripts/gpu-check.sh verdict KIND ARGS...: the verdicts alone, on recorded outputs, with no GPU
# (tests/check_gpu_check.sh); KIND ARGS: tests XML EXPECTED_CASES RC |
# sanitizer TOOL LOG XML EXPECTED_CASES RC | bench ROWS_DIR [MERGED_JSON] |
# speculation RESULTS_JSONL EXPECTED_JOBS RC.
set -uo pipefail
t0=$(date +%s)
: "${GPU_CHECK_TESTS_S:=150}"      # the [gpu] tests' timeout
: "${GPU_CHECK_SANITIZER_S:=45}"   # each compute-sanitizer run's timeout
: "${GPU_CHECK_BENCH_S:=240}"      # the bench call's budget, from its start
: "${GPU_CHECK_ROW_S:=60}"         # one benchmark row's timeout
: "${GPU_CHECK_ROW_MIN_S:=10}"     # a row starts only with this much of the budget left
: "${GPU_CHECK_SPECULATION_S:=150}" # the speculation config's timeout
: "${GPU_CHECK_CKPT:=/tmp/specula-tinyllama-1.1b}"  # the random 1.1B checkpoint's folder
: "${GPU_CHECK_SANITIZE_FILTER:=cuda kernels:*}"
: "${GPU_CHECK_RACECHECK_FILTER:=\"$GPU_CHECK_SANITIZE_FILTER\"~\"cuda kernels: the matrix*\"}"
: "${GPU_CHECK_RACECHECK_KERNELS=specula}"  # racecheck's kernels: mangled names holding this (empty: all)
say() { echo "gpu-check: $*"; }
die() { echo "gpu-check: error: $*" >&2; exit 2; }
elapsed() { echo $(( $(date +%s) - t0 )); }

# The verdicts. Each prints its details, then one line "STEP: passed: ..." or "STEP: FAILED: ...";
# exit status 0 passed, 1 failed, 3 failed with every test case skipped (the runtime sees no GPU).
read -r -d '' verdict_py <<'PY'
import json, os, re, statistics, sys
import xml.etree.ElementTree as ET

def rc_text(rc):
    return {124: "timed out", 137: "killed (timed out)"}.get(rc, f"exit status {rc}")

def catch2(path, expected, rc):
    """(state, summary, details) for a Catch2 XML report; state 0 ran, 1 failed, 3 all skipped."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        why = f"; {rc_text(rc)}" if rc else ""
        return 1, f"no complete Catch2 report ({type(e).__name__}{why})", []
    details, skipped, failed = [], [], []
    cases = root.findall(".//TestCase")
    for c in cases:
        name = c.get("name", "?")
        res = c.find("OverallResult")
        notes = [" ".join((e.text or "").split()) for e in c.iter() if e.tag in ("Warning", "Info", "Skip")]
        skip = next((n for n in notes if n.startswith("skipped")), None)
        if skip is None and res is not None and int(res.get("skips", "0") or 0) > 0:
            skip = next((n for n in notes), "skipped")
        secs = res.get("durationInSeconds") if res is not None else None
        took = f"{float(secs):7.1f} s" if secs else "      ? s"
        if res is None or res.get("success") != "true":
            bad = []
            for e in c.iter():
                if e.tag == "Expression" and e.get("success") == "false":
                    orig = " ".join((e.findtext("Original") or "").split())
                    exp = " ".join((e.findtext("Expanded") or "").split())
                    bad.append(f"{e.get('filename', '?')}:{e.get('line', '?')}: {orig} with {exp}")
                elif e.tag in ("Exception", "FatalErrorCondition"):
                    bad.append(f"{e.get('filename', '?')}:{e.get('line', '?')}: {e.tag}: {' '.join((e.text or '').split())}")
            failed.append(name)
            details.append(f"  FAILED  {took}  {name}")
            details += [f"            {b}" for b in bad[:3]]
        elif skip is not None:
            skip = re.sub(r"^skipped:?\s*", "", skip) or "no reason given"
            skipped.append((name, skip))
            details.append(f"  SKIPPED {took}  {name}: {skip}")
        else:
            details.append(f"  ran     {took}  {name}")
    totals = root.find("OverallResults")
    assertions = int(totals.get("successes", "0")) if totals is not None else 0
    n = len(cases)
    problems = []
    if n == 0:
        problems.append("no test case ran")
    elif n < expected:
        problems.append(f"{n} of {expected} test cases reported")
    if skipped:
        problems.append(f"{len(skipped)} of {n} test cases skipped: {skipped[0][1]}")
    if failed:
        problems.append(f"{len(failed)} of {n} test cases failed ({failed[0]})")
    if n and not skipped and not failed and assertions == 0:
        problems.append("no assertion ran")
    if rc and not failed:
        problems.append(rc_text(rc))
    if problems:
        state = 3 if skipped and len(skipped) == n else 1
        return state, "; ".join(problems), details
    return 0, f"{n} test cases ran, {assertions} assertions passed", details

def tests(xml, expected, rc):
    state, summary, details = catch2(xml, int(expected), int(rc))
    print("\n".join(details))
    print(f"[gpu] tests: {'passed' if state == 0 else 'FAILED'}: {summary}")
    return state

def sanitizer(tool, log, xml, expected, rc):
    rc = int(rc)
    try:
        text = open(log, errors="replace").read()
    except OSError:
        text = ""
    state, summary, details = catch2(xml, int(expected), 0)
    errors, warnings, seen = 0, 0, False
    for m in re.finditer(r"^========= ERROR SUMMARY: (\d+) errors?", text, re.M):
        seen, errors = True, errors + int(m.group(1))
    for m in re.finditer(r"^========= RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text, re.M):
        seen, errors, warnings = True, errors + int(m.group(1)), warnings + int(m.group(2))
    tool_errors = [l[10:].strip() for l in text.splitlines()
                   if l.startswith("========= Error:") and "Race reported" not in l]
    reported = [l for l in text.splitlines() if l.startswith("========= ") and re.match(
        r"========= (Invalid |Error: Race|Warning: Race|Program hit|Uninitialized|Barrier|Leaked)", l)]
    print("\n".join(details))
    print("\n".join(f"  {l}" for l in reported[:10]))
    problems = []
    if errors:
        problems.append(f"{errors} errors reported ({reported[0][10:].strip() if reported else 'see the log'})")
    if tool_errors:
        problems.append(f"the tool: {tool_errors[0]}")
    if not seen:
        problems.append(f"no summary line from {tool}" + (f" ({rc_text(rc)})" if rc else ""))
    elif rc and not errors:
        problems.append(rc_text(rc))
    if state:
        problems.append(f"the test cases under it: {summary}")
    if problems:
        print(f"{tool}: FAILED: {'; '.join(problems)}")
        return 1
    warn = f", {warnings} warnings" if warnings else ""
    print(f"{tool}: passed: 0 errors{warn}; {summary}")
    return 0

def short(name):
    return re.split(r"/(min_time|iterations|repeats|real_time)", name)[0]

def bench(d, merged=None):
    try:
        expected = [l.strip() for l in open(os.path.join(d, "expected.txt")) if l.strip()]
    except OSError:
        expected = []
    rows = {}
    try:
        for line in open(os.path.join(d, "rows.tsv")):
            i, name, rc, secs = line.rstrip("\n").split("\t")
            rows[int(i)] = (name, int(rc), int(secs))
    except OSError:
        pass
    try:
        stopped = open(os.path.join(d, "stopped")).read().strip()
    except OSError:
        stopped = "the run stopped before it"
    bad, not_run, done, context, finished = [], [], [], None, 0
    for i, name in enumerate(expected):
        if i not in rows:
            not_run.append(short(name))
            continue
        _, rc, secs = rows[i]
        try:
            doc = json.load(open(os.path.join(d, f"row-{i}.json")))
            runs, context = doc.get("benchmarks", []), context or doc.get("context")
        except (OSError, ValueError):
            runs = []
        errs = [r for r in runs if r.get("error_occurred")]
        if errs:
            bad.append(f"{short(name)}: skipped ({errs[0].get('error_message', '')})")
        elif rc:
            bad.append(f"{short(name)}: {rc_text(rc)} after {secs} s")
        elif not runs:
            bad.append(f"{short(name)}: no rows")
        else:
            done += runs
            finished += 1
    if merged:
        with open(merged, "w") as f:
            json.dump({"context": context or {}, "benchmarks": done}, f, indent=1)
    bw = next((r.get("bytes_per_s") for r in done if r["name"].startswith("BM_CopyBandwidth")), None)
    per = {}
    for r in done:
        if r.get("run_type") == "aggregate" or "tokens_per_s" not in r:
            continue
        per.setdefault(short(r["run_name"]), []).append(r)
    print()
    print(f"device-to-device copy: {bw / 1e9:.0f} GB/s (read + write)" if bw else "device-to-device copy: not measured")
    print(f"{'benchmark':<44} {'tokens/s':>10} {'floor tok/s':>12} {'of floor':>9} {'reps':>5}")
    for name, rs in per.items():
        tps = statistics.median(r["tokens_per_s"] for r in rs)
        floor = rs[0].get("floor_tokens_per_s")
        frac = f"{tps / floor:8.1%}" if floor else ""
        print(f"{name:<44} {tps:>10.0f} {floor or 0:>12.0f} {frac:>9} {len(rs):>5}")
    if not_run:
        bad.append(f"{len(not_run)} rows not run ({stopped}): {', '.join(not_run)}")
    for p in bad:
        print(f"  {p}")
    if not expected:
        print("bench: FAILED: no benchmark rows listed")
        return 1
    if bad:
        print(f"bench: FAILED: {finished} of {len(expected)} rows finished; {bad[0]}")
        return 1
    print(f"bench: passed: {finished} of {len(expected)} rows finished")
    return 0

def speculation(path, expected, rc):
    """Greedy speculative runs emit plain decoding's tokens; the table of tok/s and speedups."""
    rc, expected = int(rc), int(expected)
    jobs = []
    try:
        for line in open(path):
            if line.strip():
                jobs.append(json.loads(line))
    except (OSError, ValueError) as e:
        jobs = jobs if isinstance(e, ValueError) else []
    plain, rates, baseline_of = {}, {}, {}
    for j in jobs:
        rates.setdefault(j["run"], []).append(j["stats"]["throughput_tokens_per_s"])
        baseline_of[j["run"]] = (j["label"], j["baseline"])
        if j["baseline"] == "":
            for r in j["requests"]:
                plain.setdefault((j["run"], r["prompt_id"]), r["ids"])
    compared, differ = 0, []
    for j in jobs:
        if j["baseline"] == "" or j["settings"]["sampling"]["strategy"] != "greedy":
            continue
        for r in j["requests"]:
            want = plain.get((j["baseline"], r["prompt_id"]))
            if want is None:
                continue
            compared += 1
            if r["ids"] != want:
                differ.append(f'{j["label"]}, {r["prompt_id"]}')
    print(f"{'run':<56} {'tok/s':>9} {'speedup':>8}")
    for run, v in rates.items():
        label, base = baseline_of[run]
        tps = statistics.median(v)
        ratio = f"{tps / statistics.median(rates[base]):7.2f}x" if base in rates else ""
        print(f"{label:<56} {tps:>9.0f} {ratio:>8}")
    problems = []
    if len(jobs) < expected:
        problems.append(f"{len(jobs)} of {expected} jobs ran" + (f" ({rc_text(rc)})" if rc else ""))
    elif rc:
        problems.append(rc_text(rc))
    if not compared:
        problems.append("no greedy request had a plain run to compare with")
    if differ:
        problems.append(f"{len(differ)} of {compared} greedy requests differ from plain decoding ({differ[0]})")
    if problems:
        print(f"speculation: FAILED: {'; '.join(problems)}")
        return 1
    print(f"speculation: passed: {len(jobs)} jobs ran; {compared} greedy requests equal plain decoding's tokens")
    return 0

kind, args = sys.argv[1], sys.argv[2:]
sys.exit({"tests": tests, "sanitizer": sanitizer, "bench": bench, "speculation": speculation}[kind](*args))
PY
verdict() { python3 -c "$verdict_py" "$@"; }

mode=${1:-}
case "$mode" in
  verdict)
    case "${2:-}" in tests|sanitizer|bench|speculation) shift; verdict "$@"; exit $? ;; esac
    die "usage: scripts/gpu-check.sh verdict tests|sanitizer|bench|speculation ARGS..." ;;
  tests|bench|speculation) ;;
  *) die "usage: scripts/gpu-check.sh tests|bench|speculation [BUNDLE.tar.gz | BUILD_DIR]" ;;
esac
# A path given relative to where the script was called from.
src=${2:-gpu-bundle.tar.gz}
case "$src" in /*) ;; *) [ -e "$src" ] && src=$(cd "$(dirname "$src")" && pwd)/$(basename "$src") ;; esac
cd "$(dirname "$0")/.." || exit 2
repo=$PWD
out=${OUT:-$repo/gpu-check-out}/$mode
mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 0. A GPU, as the machine reports it.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  die "no GPU on this machine (nvidia-smi -L fails or is missing); nothing to check"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv |
  tee "$out/card.csv"

# 1. The binaries: a carried bundle, a carried build, or a build here.
bundle=""
if [ -f "$src" ]; then
  bundle=/tmp/specula-gpu-bundle
  rm -rf "$bundle" && mkdir -p "$bundle" && tar -xf "$src" -C "$bundle" || die "cannot unpack $src"
  tests=$bundle/bin/specula_tests specula=$bundle/bin/specula bench=$bundle/bin/bench_cuda
  libdir=$bundle/lib baked=$(cat "$bundle/source_dir") module=$bundle/lib/libspecula_cuda.so
elif [ -d "$src" ] && [ -x "$src/tests/specula_tests" ]; then
  src=$(cd "$src" && pwd)
  tests=$src/tests/specula_tests specula=$src/cli/specula bench=$src/bench/bench_cuda
  libdir=$src/lib baked=$(grep '^CMAKE_HOME_DIRECTORY:' "$src/CMakeCache.txt" | cut -d= -f2)
  module=$src/engine/cuda/libspecula_cuda.so
else
  say "no bundle or build at '$src': building build-gpu for sm_90 here"
  { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    cmake --build build-gpu -j"$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target specula_tests specula bench_cuda; } > "$out/build.log" 2>&1 ||
    die "the build failed (tail of $out/build.log):$(echo; tail -20 "$out/build.log")"
  tests=$repo/build-gpu/tests/specula_tests specula=$repo/build-gpu/cli/specula bench=$repo/build-gpu/bench/bench_cuda
  libdir=$repo/build-gpu/lib baked=$repo module=$repo/build-gpu/engine/cuda/libspecula_cuda.so
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

# Each step's verdict: its details printed, its last line kept for the closing line.
status=0 passed=() failed=()
record() {  # record VERDICT_FILE STATUS
  cat "$1"
  local line
  line=$(tail -1 "$1")
  if [ "$2" -eq 0 ]; then passed+=("$line"); else failed+=("$line"); status=1; fi
}
joined() { local IFS=$'\x1f'; echo "$*" | sed $'s/\x1f/; /g'; }
finish() {
  if [ $status -eq 0 ]; then
    say "$mode: passed in $(elapsed) s: $(joined "${passed[@]}")"
  else
    say "$mode: FAILED in $(elapsed) s: $(joined "${failed[@]}")"
  fi
  exit $status
}

if [ "$mode" = tests ]; then
  # 2. The [gpu] tests.
  n_gpu=$("$tests" --list-test-names-only "[gpu]" | grep -c .)
  timeout -k 10 "$GPU_CHECK_TESTS_S" "$tests" "[gpu]" -r xml -d yes -o "$out/gpu-tests.xml" > "$out/gpu-tests.log" 2>&1
  verdict tests "$out/gpu-tests.xml" "$n_gpu" $? > "$tmp/v"
  tests_state=$?
  record "$tmp/v" $tests_state
  say "[gpu] tests done ($(elapsed) s)"

  # 3. compute-sanitizer over the small kernel cases: the bundle's, else the machine's.
  san=""
  for c in "${bundle:-/nonexistent}/compute-sanitizer/compute-sanitizer" "$(command -v compute-sanitizer || true)" \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer \
           /opt/nvidia/*/compute-sanitizer/compute-sanitizer; do
    [ -n "$c" ] && [ -x "$c" ] && { san=$c; break; }
  done
  for tool in memcheck racecheck; do
    if [ $tests_state -eq 3 ]; then
      echo "$tool: FAILED: not run (every [gpu] test case skipped)" > "$tmp/v"
      record "$tmp/v" 1
      continue
    elif [ -z "$san" ]; then
      echo "$tool: FAILED: not run (compute-sanitizer is in neither the bundle, PATH nor /usr/local/cuda*)" > "$tmp/v"
      record "$tmp/v" 1
      continue
    fi
    # racecheck checks our kernels only, over the kernel cases but the matrix products': the
    # libraries' kernels (cuBLASLt's wgmma and bulk copies) order shared memory by means racecheck
    # does not model, the matrix case runs them, and our kernels there use no shared memory.
    spec=$GPU_CHECK_SANITIZE_FILTER only=()
    if [ "$tool" = racecheck ]; then
      spec=$GPU_CHECK_RACECHECK_FILTER
      [ -n "$GPU_CHECK_RACECHECK_KERNELS" ] && only=(--kernel-name "kns=$GPU_CHECK_RACECHECK_KERNELS")
    fi
    n_kernels=$("$tests" --list-test-names-only "$spec" | grep -c .)
    say "$tool: $san ${only[*]} over '$spec' ($n_kernels test cases)"
    timeout -k 10 "$GPU_CHECK_SANITIZER_S" "$san" --tool "$tool" "${only[@]}" --error-exitcode 1 \
      "$tests" "$spec" -r xml -d yes -o "$out/$tool.xml" > "$out/$tool.log" 2>&1
    verdict sanitizer "$tool" "$out/$tool.log" "$out/$tool.xml" "$n_kernels" $? > "$tmp/v"
    record "$tmp/v" $?
    say "$tool done ($(elapsed) s)"
  done
  finish
fi

if [ "$mode" = speculation ]; then
  # 2. The speculation config through the experiment runner, greedy outputs against plain's.
  config=configs/gpu-speedup.toml
  jobs=$("$specula" run "$config" --out "$tmp/spec" --dry-run 2>&1 | sed -n 's/^jobs: \([0-9]*\),.*/\1/p')
  timeout -k 10 "$GPU_CHECK_SPECULATION_S" "$specula" run "$config" --out "$tmp/spec" --quiet > "$out/speculation.log" 2>&1
  rc=$?
  cp "$tmp/spec/results.jsonl" "$tmp/spec/summary.md" "$out/" 2>/dev/null
  verdict speculation "$out/results.jsonl" "${jobs:-0}" $rc > "$tmp/v"
  record "$tmp/v" $?
  finish
fi

# 2. The benchmark rows, listed for every model, the 1.1B checkpoint's included.
rows=$tmp/rows
mkdir -p "$rows"
ckpt=$GPU_CHECK_CKPT
export SPECULA_CUDA_BENCH_MODELS="models/target-16m,models/draft-4m,models/draft-1m,$ckpt"
"$bench" --benchmark_list_tests=true > "$rows/expected.txt" 2> "$out/bench.log" ||
  { echo "bench: FAILED: bench_cuda cannot list its rows ($(tail -1 "$out/bench.log"))" > "$tmp/v"; record "$tmp/v" 1; finish; }
: > "$rows/rows.tsv"
table() {  # the table of the rows that finished and the bench verdict
  verdict bench "$rows" "$out/bench.json" > "$tmp/v"
  record "$tmp/v" $?
}
row_pid=""
on_signal() {
  [ -n "$row_pid" ] && kill -TERM "$row_pid" 2>/dev/null && wait "$row_pid"
  echo "a signal stopped the run" > "$rows/stopped"
  say "stopped by a signal: the rows that finished"
  table
  finish
}
trap on_signal TERM INT HUP
run_row() {  # run_row INDEX NAME: one row in its own process under its own timeout
  local left limit start rc filter
  left=$(( t0 + GPU_CHECK_BENCH_S - $(date +%s) ))
  if [ $left -lt "$GPU_CHECK_ROW_MIN_S" ]; then
    echo "the call's budget of $GPU_CHECK_BENCH_S s was spent" > "$rows/stopped"
    return 1
  fi
  limit=$(( left < GPU_CHECK_ROW_S ? left : GPU_CHECK_ROW_S ))
  filter="^$(printf '%s' "$2" | sed 's/[].[^$*+?(){}|\\]/\\&/g')\$"
  start=$(date +%s)
  # In the background: a trapped signal ends `wait` at once, not when the row ends.
  timeout -k 5 "$limit" "$bench" --benchmark_filter="$filter" --benchmark_out="$rows/row-$1.json" \
    --benchmark_out_format=json < /dev/null >> "$out/bench.log" 2>&1 &
  row_pid=$!
  wait $row_pid
  rc=$?
  row_pid=""
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$rc" "$(( $(date +%s) - start ))" >> "$rows/rows.tsv"
  short=${2%%/min_time*}
  say "row $(( $1 + 1 ))/$(grep -c . "$rows/expected.txt") ${short%%/iterations*}: rc $rc ($(( $(date +%s) - start )) s, $(elapsed) s in all)"
  # bench.json holds the rows so far, so that a run killed outright still leaves them.
  verdict bench "$rows" "$out/bench.json" > /dev/null
  return 0
}

# 3. The copy bandwidth first: a runtime that sees no GPU stops the call here.
[ "$(head -1 "$rows/expected.txt")" = "BM_CopyBandwidth/iterations:1/real_time" ] ||
  { echo "bench: FAILED: bench_cuda's first row is not BM_CopyBandwidth" > "$tmp/v"; record "$tmp/v" 1; finish; }
run_row 0 "$(head -1 "$rows/expected.txt")"
if grep -q '"error_occurred": true' "$rows/row-0.json" 2>/dev/null || [ ! -s "$rows/row-0.json" ]; then
  echo "the copy bandwidth row did not run" > "$rows/stopped"
  table
  finish
fi

# 4. A random TinyLlama-1.1B-shape checkpoint.
if [ ! -f "$ckpt/config.json" ]; then
  rm -rf "$ckpt"
  timeout 90 "$specula" make-checkpoint --shape tinyllama-1.1b --out "$ckpt" > "$out/checkpoint.log" 2>&1 ||
    { echo "checkpoint: FAILED: make-checkpoint: $(tail -1 "$out/checkpoint.log")" > "$tmp/v"; record "$tmp/v" 1; }
fi
say "checkpoint step done ($(elapsed) s)"

# 5. The other rows, then the table.
i=1
tail -n +2 "$rows/expected.txt" > "$tmp/rest.txt"
while read -r name <&3; do
  run_row $i "$name" || break
  i=$(( i + 1 ))
done 3< "$tmp/rest.txt"
table
finish
