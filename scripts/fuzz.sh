#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (BUILD_DIR, default build-fuzz) and runs
# each for SECONDS (default 30), or for RUNS executions when RUNS is set, over a corpus
# seeded from the project's own files (models' config.json and safetensors headers, the shard
# index, configs/*.toml, configs/prompts/dev.jsonl, fuzz/seeds/). A crash, a leak or an
# exception other than SpeculaError fails the run. Skips, with a message and status 0, when
# clang or its libFuzzer is not installed.
#   scripts/fuzz.sh [SECONDS [BUILD_DIR]]     RUNS=1000000 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
build_dir="${2:-build-fuzz}"
clang="$(command -v clang++ || command -v clang++-14 || true)"
if [ -z "$clang" ] || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, long) { return 0; }' |
    "$clang" -x c++ -fsanitize=fuzzer - -o /tmp/specula-fuzz-probe.$$ 2>/dev/null; then
  echo "fuzz: skipped: clang with libFuzzer (-fsanitize=fuzzer) is not installed"
  exit 0
fi
rm -f /tmp/specula-fuzz-probe.$$
# -O1 with line tables: libFuzzer's usual flags, and half the compile time of -O2 -g.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clang" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSPECULA_FUZZ=ON -DSPECULA_ENABLE_CUDA=OFF -DSPECULA_BUILD_BENCH=OFF >/dev/null
targets=(safetensors_header model_config shard_index toml_config prompts_file results_file)
cmake --build "$build_dir" -j "${FUZZ_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}" --target "${targets[@]/#/fuzz_}"

# Seed corpora, from the repository's files.
corpus="$build_dir/fuzz-corpus"
mkdir -p "${targets[@]/#/$corpus/}"
python3 - "$corpus" <<'PY'
import glob, os, struct, sys
corpus = sys.argv[1]
def put(target, name, data):
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data)
for path in glob.glob("models/*/*.safetensors"):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = f.read(n)
    # The header with the first 64 data bytes: the tensors' offsets run past them, as fuzzed files do.
    with open(path, "rb") as f:
        put("safetensors_header", path.replace("/", "_"), f.read(8 + n + 64))
for path in glob.glob("models/*/*config.json"):
    put("model_config", path.replace("/", "_"), open(path, "rb").read())
for path in glob.glob("models/*/*.index.json"):
    put("shard_index", path.replace("/", "_"), open(path, "rb").read())
for path in glob.glob("configs/*.toml"):
    put("toml_config", os.path.basename(path), open(path, "rb").read())
lines = open("configs/prompts/dev.jsonl", "rb").read().splitlines(keepends=True)
put("prompts_file", "dev-head.jsonl", b"".join(lines[:4]))
for path in glob.glob("fuzz/seeds/*.jsonl"):
    put("results_file", os.path.basename(path), open(path, "rb").read())
PY

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for t in "${targets[@]}"; do
  limit=(-max_total_time="$seconds")
  [ -n "${RUNS:-}" ] && limit=(-runs="$RUNS")
  log="$build_dir/fuzz_$t.log"
  if "$build_dir/fuzz/fuzz_$t" "${limit[@]}" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
       -artifact_prefix="$build_dir/fuzz_$t-" "$corpus/$t" >"$log" 2>&1; then
    echo "fuzz_$t: ok, $(grep -o 'Done [0-9]* runs' "$log" | tail -1) ($log)"
  else
    echo "fuzz_$t: FAILED ($log):"; tail -30 "$log"; status=1
  fi
done
exit $status
