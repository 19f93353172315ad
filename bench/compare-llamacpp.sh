#!/usr/bin/env bash
# compare-llamacpp.sh: specula against llama.cpp on the same checkpoints, decode and prefill
# tokens/s, one and two threads, runs alternated (llama.cpp, specula, llama.cpp, ...) so that
# both engines see the same machine state; prints medians and the ratio specula / llama.cpp.
#
# Nothing of llama.cpp is in this repository: build it and convert the checkpoints outside,
# from the ggerganov/llama.cpp sources (cmake -B build -DGGML_NATIVE=ON; cmake --build build
# --target llama-bench) and its convert_hf_to_gguf.py (--outtype bf16 for the bf16 rows).
#
# usage: bench/compare-llamacpp.sh --llama-build DIR [--specula BIN] [--threads "1 2"]
#          [--reps N] [--prompt N] [--gen N] HF_DIR=FILE.gguf [HF_DIR=FILE.gguf ...]
#   --llama-build  llama.cpp build folder (holds bin/llama-bench)
#   --specula      the specula binary (default: build/cli/specula)
#   --threads      thread counts to measure (default "1 2")
#   --reps         alternated repetitions per measurement (default 3)
#   --prompt       prompt tokens of the prefill measurement (default 512)
#   --gen          new tokens of the decode measurement (default 128)
#   --weights      specula's --weights for the target (default: stored; e.g. int8 beside a
#                  Q8_0 file)
#   --wait         specula's OpenMP wait policy, active or passive (default active: llama.cpp's
#                  thread pool spins between its barriers, so both engines spin; `specula`
#                  alone waits passively unless told, docs/architecture.md, Threads)
# Decode is measured from a one-token prompt (llama-bench's tg: -p 0 -n GEN), prefill as one
# prompt of PROMPT tokens (llama-bench's pp: -p PROMPT -n 0). Both engines use their default
# KV caches (llama.cpp f16, specula f32 unless told otherwise).
set -euo pipefail

die() { echo "compare-llamacpp.sh: error: $*" >&2; exit 1; }

llama_build="" specula="build/cli/specula" threads="1 2" reps=3 prompt=512 gen=128 weights="" wait=active
pairs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-build) llama_build="${2:?--llama-build needs a folder}"; shift 2 ;;
    --specula) specula="${2:?--specula needs a path}"; shift 2 ;;
    --threads) threads="${2:?--threads needs a list}"; shift 2 ;;
    --reps) reps="${2:?--reps needs a number}"; shift 2 ;;
    --prompt) prompt="${2:?--prompt needs a number}"; shift 2 ;;
    --gen) gen="${2:?--gen needs a number}"; shift 2 ;;
    --weights) weights="${2:?--weights needs a mode}"; shift 2 ;;
    --wait) wait="${2:?--wait needs active or passive}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) die "unknown option '$1'" ;;
    *=*) pairs+=("$1"); shift ;;
    *) die "'$1' is not HF_DIR=FILE.gguf" ;;
  esac
done
bench="$llama_build/bin/llama-bench"
[[ -n "$llama_build" ]] || die "--llama-build is required"
[[ -x "$bench" ]] || die "--llama-build '$llama_build' has no bin/llama-bench"
[[ -x "$specula" ]] || die "--specula '$specula' is not an executable"
[[ ${#pairs[@]} -gt 0 ]] || die "no HF_DIR=FILE.gguf pair given"
[[ "$wait" == active || "$wait" == passive ]] || die "--wait '$wait' is not active or passive"
for n in "$reps" "$prompt" "$gen" $threads; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "'$n' is not a positive integer (--reps, --prompt, --gen, --threads)"
done
for pair in "${pairs[@]}"; do
  [[ -f "${pair%%=*}/config.json" ]] || die "'${pair%%=*}' holds no config.json"
  [[ -f "${pair#*=}" ]] || die "'${pair#*=}' does not exist"
done

python=$(command -v python3) || die "python3 is needed to read the JSON outputs"
# A prompt of N ids: BOS, then ids cycling through [100, 3100) (inside every vocabulary here).
prompt_ids() { "$python" -c "import sys; n=int(sys.argv[1]); print(','.join(['1']+[str(100+i%3000) for i in range(n-1)]))" "$1"; }
# tokens/s of one llama-bench run (-r 1: the alternation supplies the repetitions).
llama_rate() {  # gguf threads p n
  "$bench" -m "$1" -t "$2" -p "$3" -n "$4" -r 1 -o json 2>/dev/null |
    "$python" -c "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])"
}
specula_rate() {  # hf_dir threads ids new_tokens key
  local extra=()
  [[ -n "$weights" ]] && extra=(--weights "$weights")
  OMP_WAIT_POLICY="$wait" "$specula" generate --model "$1" --threads "$2" --prompt-ids "$3" --max-new-tokens "$4" --json "${extra[@]}" |
    "$python" -c "import json,sys; print(json.load(sys.stdin)['stats']['$5'])"
}

long_prompt=$(prompt_ids "$prompt")
results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "specula $(git -C "$(dirname "$0")" log -1 --format='%h %cs' 2>/dev/null || echo '(no git)') against llama.cpp ($(git -C "$llama_build/.." log -1 --format='%h %cs' 2>/dev/null || echo 'unknown build'))"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); specula with OMP_WAIT_POLICY=$wait"
for pair in "${pairs[@]}"; do
  hf="${pair%%=*}" gguf="${pair#*=}"
  for t in $threads; do
    for ((r = 1; r <= reps; ++r)); do
      echo "$hf $t decode llama.cpp $(llama_rate "$gguf" "$t" 0 "$gen")" >> "$results"
      echo "$hf $t decode specula $(specula_rate "$hf" "$t" 1 "$gen" decode_tokens_per_s)" >> "$results"
      echo "$hf $t prefill llama.cpp $(llama_rate "$gguf" "$t" "$prompt" 0)" >> "$results"
      echo "$hf $t prefill specula $(specula_rate "$hf" "$t" "$long_prompt" 1 prefill_tokens_per_s)" >> "$results"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); decode: $gen new tokens from BOS; prefill: $prompt tokens; $reps alternated runs each, medians"
"$python" - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    model, threads, what, engine, rate = line.split()
    rows.setdefault((model, int(threads), what), {}).setdefault(engine, []).append(float(rate))
print("| model | threads | measure | llama.cpp tok/s | specula tok/s | specula / llama.cpp | per-run ratios |")
print("|---|---|---|---|---|---|---|")
for (model, threads, what), r in rows.items():
    a, b = r["llama.cpp"], r["specula"]
    ratios = " ".join(f"{y / x:.2f}" for x, y in zip(a, b))
    print(f"| {model} | {threads} | {what} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | "
          f"{statistics.median(b) / statistics.median(a):.2f}x | {ratios} |")
EOF
