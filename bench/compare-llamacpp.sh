#!/usr/bin/env bash
# compare-llamacpp.sh: specula against llama.cpp on the same checkpoints, decode and prefill
# tokens/s, runs alternated (llama.cpp first on even repetitions, specula first on odd ones);
# prints both engines' medians, their ratio specula / llama.cpp and every run's ratio. With
# --ngram K also each engine's n-gram speculation against its own plain decoding.
#
# Nothing of llama.cpp is in this repository: build it and convert the checkpoints outside,
# from the ggerganov/llama.cpp sources (cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF;
# cmake --build build --target llama-bench llama-lookup) and its convert_hf_to_gguf.py
# (--outtype f32 or bf16, matched by specula's --weights).
#
# usage: bench/compare-llamacpp.sh --llama-build DIR [--specula BIN] [--threads "1 2"]
#          [--reps N] [--prompt N] [--gen N] [--weights MODE] [--wait POLICY] [--first-core N]
#          [--out DIR] [--ngram K --ngram-prompt FILE] HF_DIR=FILE.gguf [HF_DIR=FILE.gguf ...]
#   --llama-build  llama.cpp build folder (holds bin/llama-bench, and bin/llama-lookup for --ngram)
#   --specula      the specula binary (default: build/cli/specula)
#   --threads      thread counts to measure (default "1 2")
#   --reps         alternated repetitions per measurement (default 3)
#   --prompt       prompt tokens of the prefill measurement (default 512)
#   --gen          decode forwards of the decode measurement (default 128)
#   --weights      specula's target.weights (default stored): f32 beside an f32 GGUF, bf16
#                  beside a bf16 one, int8 beside Q8_0
#   --wait         specula's OMP_WAIT_POLICY, active or passive (default active: llama.cpp's
#                  thread pool spins between its barriers, llama-bench --poll 50)
#   --first-core   a run of T threads is pinned (taskset) to cores FIRST .. FIRST+T-1
#                  (default 0)
#   --out          folder for every run's output, new or empty (default: a new /tmp folder);
#                  kept, with raw.tsv holding every run's figure
#   --ngram        n-gram drafts of up to K tokens (llama-lookup --draft-max K, specula's ngram
#                  drafter with gamma K and n-grams of 1-4 tokens as llama-lookup's), greedy, GEN
#                  new tokens after the text of --ngram-prompt; 0 (the default) measures none
#   --ngram-prompt the prompt of the n-gram runs, a text file without its last newline (encoded
#                  by each engine, with BOS)
#
# The timed process runs alone: each engine's process is pinned and writes its output to a
# file; nothing else of this script runs until it exits, and bench/compare_llamacpp.py reads
# the files after the last run.
#
# Both figures are warm, and count the same tokens:
#   decode   llama-bench tg GEN (-p 0 -n GEN, after a one-token warm-up): GEN one-token
#            forwards from BOS, GEN tokens over their time. specula: `specula run` of the
#            prompt [BOS] with GEN + 1 new tokens, timed after the runner's unrecorded warm-up
#            generation of the same request; stats.decode_tokens_per_s = (new_tokens - 1) /
#            decode_s, the GEN tokens of the GEN decode forwards over their time (the first
#            new token comes from the prefill forward).
#   prefill  llama-bench pp PROMPT (-p PROMPT -n 0): one pass over PROMPT tokens, timed after
#            a pass over PROMPT tokens. specula: `specula run` of a PROMPT-token prompt (BOS,
#            then ids cycling through [100, 3100)) with one new token, after the warm-up
#            generation of the same request; stats.prefill_tokens_per_s.
#   n-gram   llama-lookup --draft-max K, and --draft-max 0 as its plain decoding (the same
#            loop, one token a forward), -n GEN: (n_predict - 1) tokens over the decode loop's
#            time, in a fresh process after the prompt's forwards. specula: one `specula run`
#            of the ngram drafter and its plain baseline, GEN + 1 new tokens, each after its
#            warm-up generation; stats.decode_tokens_per_s. Each engine's figure is its speedup
#            over its own plain decoding.
# Both engines use their default KV caches (llama.cpp f16, specula f32).
set -euo pipefail

die() { echo "compare-llamacpp.sh: error: $*" >&2; exit 1; }
here="$(cd "$(dirname "$0")" && pwd)"

llama_build="" specula="build/cli/specula" threads="1 2" reps=3 prompt=512 gen=128 weights=stored wait=active
first_core=0 out="" ngram=0 ngram_prompt=""
pairs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-build|--specula|--threads|--reps|--prompt|--gen|--weights|--wait|--first-core|--out|--ngram|--ngram-prompt)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      case "$1" in
        --llama-build) llama_build="$2" ;; --specula) specula="$2" ;; --threads) threads="$2" ;;
        --reps) reps="$2" ;; --prompt) prompt="$2" ;; --gen) gen="$2" ;; --weights) weights="$2" ;;
        --wait) wait="$2" ;; --first-core) first_core="$2" ;; --out) out="$2" ;;
        --ngram) ngram="$2" ;; --ngram-prompt) ngram_prompt="$2" ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *=*) pairs+=("$1"); shift ;;
    *) die "argument '$1' is not HF_DIR=FILE.gguf" ;;
  esac
done
bench="$llama_build/bin/llama-bench"
[[ -n "$llama_build" ]] || die "--llama-build is required"
[[ -x "$bench" ]] || die "--llama-build '$llama_build' has no bin/llama-bench"
[[ -x "$specula" ]] || die "--specula '$specula' is not an executable"
[[ ${#pairs[@]} -gt 0 ]] || die "no HF_DIR=FILE.gguf pair given"
[[ "$wait" == active || "$wait" == passive ]] || die "--wait '$wait' is not active or passive"
case "$weights" in stored|f32|f16|bf16|int8|bf16dot|bf16amx) ;; *) die "--weights '$weights' is not stored, f32, f16, bf16, int8, bf16dot or bf16amx" ;; esac
for flag in reps prompt gen; do
  [[ "${!flag}" =~ ^[1-9][0-9]*$ ]] || die "--$flag '${!flag}' is not a positive integer"
done
[[ "$first_core" =~ ^(0|[1-9][0-9]*)$ ]] || die "--first-core '$first_core' is not a core number"
[[ "$ngram" =~ ^(0|[1-9][0-9]{0,2})$ ]] && (( ngram <= 256 )) || die "--ngram '$ngram' is not a draft length in 0..256"
lookup="$llama_build/bin/llama-lookup"
if (( ngram > 0 )); then
  [[ -x "$lookup" ]] || die "--llama-build '$llama_build' has no bin/llama-lookup (needed by --ngram $ngram)"
  [[ -s "$ngram_prompt" ]] || die "--ngram-prompt '$ngram_prompt' is not a non-empty file (needed by --ngram $ngram)"
else
  [[ -z "$ngram_prompt" ]] || die "--ngram-prompt '$ngram_prompt' needs --ngram K > 0"
fi
[[ -n "$threads" ]] || die "--threads '' names no thread count"
cores_online=$(getconf _NPROCESSORS_ONLN)
for t in $threads; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || die "--threads '$threads': '$t' is not a positive integer"
  (( first_core + t <= cores_online )) ||
    die "--threads '$threads': $t threads from --first-core $first_core need cores up to $((first_core + t - 1)), this machine has 0-$((cores_online - 1))"
done
for pair in "${pairs[@]}"; do
  [[ -f "${pair%%=*}/config.json" ]] || die "argument '$pair': '${pair%%=*}' holds no config.json"
  [[ -f "${pair#*=}" ]] || die "argument '$pair': '${pair#*=}' does not exist"
done
command -v taskset >/dev/null || die "taskset (util-linux) is needed to pin the runs"
command -v python3 >/dev/null || die "python3 is needed to read the outputs after the runs"
if [[ -z "$out" ]]; then
  out=$(mktemp -d /tmp/compare-llamacpp.XXXXXX)
else
  [[ ! -e "$out" || -d "$out" && -z "$(ls -A "$out")" ]] || die "--out '$out' is not a new or empty folder"
  mkdir -p "$out"
fi
out="$(cd "$out" && pwd)"
mkdir -p "$out/runs" "$out/configs"

# The requests of specula's runs: one prompt each, as token ids.
ids="1"
for ((i = 0; i < prompt - 1; ++i)); do ids+=",$((100 + i % 3000))"; done
echo "{\"id\": \"prefill\", \"domain\": \"bench\", \"prompt_ids\": [$ids]}" > "$out/configs/prefill.jsonl"
echo '{"id": "decode", "domain": "bench", "prompt_ids": [1]}' > "$out/configs/decode.jsonl"
if (( ngram > 0 )); then
  cp "$ngram_prompt" "$out/configs/ngram-prompt.txt"
  # The text as llama-lookup -f reads it: without one trailing newline.
  python3 -c 'import json, sys; t = open(sys.argv[1]).read(); t = t[:-1] if t.endswith("\n") else t
print(json.dumps({"id": "ngram", "domain": "bench", "prompt": t}))' "$ngram_prompt" > "$out/configs/ngram.jsonl"
fi
# specula_config HF_DIR MEASURE THREADS FILE: a one-job experiment (one seed, one repetition).
specula_config() {
  local new_tokens=1
  [[ "$2" == prefill ]] || new_tokens=$((gen + 1))
  cat > "$4" <<EOF
title = "compare-llamacpp $2"
[target]
path = "$(cd "$1" && pwd)"
weights = "$weights"
[sampling]
strategy = "greedy"
[run]
prompts_file = "$out/configs/$2.jsonl"
max_new_tokens = $new_tokens
seeds = [0]
repetitions = 1
threads = $3
[output]
formats = []
EOF
  [[ "$2" != ngram ]] || printf '[draft]\nmethod = "ngram"\ngamma = %d\nngram_min = 1\nngram_max = 4\n' "$ngram" >> "$4"
}

n=0
# index MODEL THREADS MEASURE ENGINE REP FILE: one line of index.tsv.
index() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$out/index.tsv"; }
# run_llama MODEL GGUF THREADS MEASURE REP CORES; measure ngram: llama-lookup --draft-max 0
# (its plain line) and then --draft-max K (its ngram line), each its own process.
run_llama() {
  if [[ "$4" == ngram ]]; then
    local k measure file
    for k in 0 "$ngram"; do
      n=$((n + 1))
      file=$(printf 'runs/%03d-llama-lookup.log' "$n") measure=plain
      (( k == 0 )) || measure=ngram
      taskset -c "$6" "$lookup" -m "$2" -t "$3" -f "$out/configs/ngram-prompt.txt" -n "$gen" --temp 0 --draft-max "$k" \
        > "$out/${file%.log}.txt" 2> "$out/$file" || die "llama-lookup failed on '$2' (its output: $out/$file)"
      index "$1" "$3" "$measure" llama.cpp "$5" "$file"
    done
    return
  fi
  n=$((n + 1))
  local file; file=$(printf 'runs/%03d-llama-bench.json' "$n")
  local pn=(-p 0 -n "$gen")
  [[ "$4" == prefill ]] && pn=(-p "$prompt" -n 0)
  taskset -c "$6" "$bench" -m "$2" -t "$3" "${pn[@]}" -r 1 -o json > "$out/$file" 2> "$out/$file.log" ||
    die "llama-bench failed on '$2' (its output: $out/$file.log)"
  index "$1" "$3" "$4" llama.cpp "$5" "$file"
}
# run_specula MODEL CONFIG THREADS MEASURE REP CORES; measure ngram: one process times the
# ngram run and its plain baseline (the runner alternates them), both lines in its results.
run_specula() {
  n=$((n + 1))
  local dir; dir=$(printf 'runs/%03d-specula' "$n")
  OMP_WAIT_POLICY="$wait" taskset -c "$6" "$specula" run "$2" --out "$out/$dir" --quiet > "$out/$dir.log" 2>&1 ||
    die "specula run failed on '$2' (its output: $out/$dir.log)"
  [[ "$4" != ngram ]] || index "$1" "$3" plain specula "$5" "$dir/results.jsonl"
  index "$1" "$3" "$4" specula "$5" "$dir/results.jsonl"
}

echo "specula $specula (its version in raw.tsv) against llama.cpp $(git -C "$llama_build/.." log -1 --format='%h %cs' 2>/dev/null || echo '(unknown commit)') ($bench); this script at $(git -C "$here" log -1 --format='%h %cs' 2>/dev/null || echo '(no git)')"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $cores_online cores online; load before $(cut -d' ' -f1-3 /proc/loadavg)"
# cores_for T: the cores a run of T threads is pinned to, as taskset -c takes them.
cores_for() { if (( $1 == 1 )); then echo "$first_core"; else echo "$first_core-$((first_core + $1 - 1))"; fi; }
pinning=""
for t in $threads; do pinning+="${pinning:+, }$t thread(s) on core(s) $(cores_for "$t")"; done
echo "pinning (taskset): $pinning; specula OMP_WAIT_POLICY=$wait; llama.cpp's thread pool at llama-bench's --poll (below)"
echo "decode: $gen forwards from BOS, warm (llama-bench tg$gen; specula run, [BOS] + $((gen + 1)) new tokens, after its warm-up generation)"
echo "prefill: $prompt tokens, warm (llama-bench pp$prompt after a pp$prompt warm-up; specula run after its warm-up generation of the same prompt)"
(( ngram == 0 )) || echo "n-gram: up to $ngram drafted tokens, greedy, $gen new tokens after $ngram_prompt; llama-lookup --draft-max $ngram against --draft-max 0, fresh processes; specula run, ngram and plain alternated in one process, each after its warm-up generation"
echo "every run's output: $out"
for pair in "${pairs[@]}"; do
  hf="${pair%%=*}" gguf="${pair#*=}"
  model="$(basename "$hf")/$(basename "$gguf")"
  for t in $threads; do
    cores=$(cores_for "$t")
    measures=(decode prefill)
    (( ngram == 0 )) || measures+=(ngram)
    for measure in "${measures[@]}"; do
      config="$out/configs/$(basename "$hf")-$measure-t$t.toml"
      specula_config "$hf" "$measure" "$t" "$config"
      for ((r = 0; r < reps; ++r)); do
        if (( r % 2 == 0 )); then
          run_llama "$model" "$gguf" "$t" "$measure" "$r" "$cores"
          run_specula "$model" "$config" "$t" "$measure" "$r" "$cores"
        else
          run_specula "$model" "$config" "$t" "$measure" "$r" "$cores"
          run_llama "$model" "$gguf" "$t" "$measure" "$r" "$cores"
        fi
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $reps alternated runs each, medians"
python3 "$here/compare_llamacpp.py" "$out"
