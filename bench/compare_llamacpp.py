#!/usr/bin/env python3
"""Reads the saved outputs of bench/compare-llamacpp.sh, after every timed process has exited.

  python3 bench/compare_llamacpp.py RUN_DIR

RUN_DIR/index.tsv lists one timed run a line: model, threads, measure (decode, prefill, plain
or ngram), engine (llama.cpp or specula), repetition and the output's path relative to RUN_DIR
(a `llama-bench -o json` file, the log of a `llama-lookup` run, or the results.jsonl of a
`specula run`). Writes every run's figure to RUN_DIR/raw.tsv and prints the tables of medians
and ratios: specula against llama.cpp (decode, prefill), and each engine's n-gram speculation
against its own plain decoding (plain, ngram).

The figures, tokens/s, as each engine reports them:
  llama.cpp decode   avg_ts of tg N: N tokens over N one-token forwards.
  llama.cpp prefill  avg_ts of pp N: N tokens over one prompt pass, after a pp N warm-up.
  specula decode     stats.decode_tokens_per_s: tokens from decode forwards over their time,
                     (new_tokens - 1) / decode_s (the first token comes from the prefill).
  specula prefill    stats.prefill_tokens_per_s: prompt tokens over the prefill's time, in the
                     job after the runner's unrecorded warm-up generation of the same prompt.
  llama.cpp plain, ngram   llama-lookup --draft-max 0 or K: (n_predict - 1) tokens over the
                     decode loop's time ("decoded N tokens ... speed: S t/s" gives N / time),
                     the first predicted token coming from the prompt's logits.
  specula plain, ngram     stats.decode_tokens_per_s, as for decode.
"""
import json
import re
import pathlib
import statistics
import sys

MEASURES = ("decode", "prefill", "plain", "ngram")
ENGINES = ("llama.cpp", "specula")


class ParseError(Exception):
    pass


def read_llama_bench(path, measure):
    """The run's rate and settings from one `llama-bench -r 1 -o json` output."""
    try:
        tests = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ParseError(f"{path}: not a llama-bench JSON output ({e})") from None
    if not isinstance(tests, list) or len(tests) != 1:
        raise ParseError(f"{path}: expected one llama-bench test, got {type(tests).__name__} of {len(tests)}")
    t = tests[0]
    for key in ("n_prompt", "n_gen", "n_threads", "avg_ts", "samples_ns", "poll", "build_commit"):
        if key not in t:
            raise ParseError(f"{path}: llama-bench test has no '{key}'")
    want_prompt, want_gen = (t["n_prompt"] == 0, t["n_gen"] > 0) if measure == "decode" else (t["n_prompt"] > 0, t["n_gen"] == 0)
    if not (want_prompt and want_gen):
        raise ParseError(f"{path}: a {measure} run needs " +
                         ("n_prompt 0 and n_gen > 0" if measure == "decode" else "n_prompt > 0 and n_gen 0") +
                         f", got n_prompt {t['n_prompt']} n_gen {t['n_gen']}")
    if len(t["samples_ns"]) != 1:
        raise ParseError(f"{path}: expected one timed repetition (-r 1), got {len(t['samples_ns'])}")
    return {"rate": float(t["avg_ts"]), "threads": t["n_threads"], "tokens": t["n_prompt"] + t["n_gen"],
            "poll": t["poll"], "note": f"poll {t['poll']}, {t.get('model_type', '?')}, build {t['build_commit']}"}


def read_specula_run(path, measure):
    """The rate and settings of the job of `measure`'s drafter (ngram, or none) from the
    results.jsonl of a `specula run` of one seed and one repetition."""
    try:
        lines = [line for line in pathlib.Path(path).read_text().splitlines() if line.strip()]
        jobs = [json.loads(line) for line in lines]
    except (OSError, ValueError) as e:
        raise ParseError(f"{path}: not a specula results.jsonl ({e})") from None
    drafter = "ngram" if measure == "ngram" else "none"
    jobs = [j for j in jobs if isinstance(j, dict) and j.get("drafter") == drafter]
    if len(jobs) != 1:
        raise ParseError(f"{path}: expected one job with drafter '{drafter}', got {len(jobs)}")
    job = jobs[0]
    stats, machine = job.get("stats"), job.get("machine")
    if not isinstance(stats, dict) or not isinstance(machine, dict):
        raise ParseError(f"{path}: the job has no 'stats' or 'machine' object")
    key = "prefill_tokens_per_s" if measure == "prefill" else "decode_tokens_per_s"
    for k in (key, "prompt_tokens", "new_tokens"):
        if k not in stats:
            raise ParseError(f"{path}: stats has no '{k}'")
    for k in ("threads", "wall_s", "cpu_s"):
        if k not in machine:
            raise ParseError(f"{path}: machine has no '{k}'")
    prompt, new = stats["prompt_tokens"], stats["new_tokens"]
    fits, needs = {
        "decode": (prompt == 1 and new >= 2, "a one-token prompt and >= 2 new tokens"),
        "prefill": (prompt >= 2 and new == 1, ">= 2 prompt tokens and one new token"),
        "plain": (new >= 2, ">= 2 new tokens"),
        "ngram": (new >= 2, ">= 2 new tokens"),
    }[measure]
    if not fits:
        raise ParseError(f"{path}: a {measure} run needs {needs}, got prompt_tokens {prompt}, new_tokens {new}")
    # A speculative request's first token comes from its first verify step, a plain one's from the prefill.
    tokens = {"decode": new - 1, "prefill": prompt, "plain": new - 1, "ngram": new}[measure]
    share = machine["cpu_s"] / (machine["wall_s"] * machine["threads"]) if machine["wall_s"] > 0 else 0.0
    return {"rate": float(stats[key]), "threads": machine["threads"], "tokens": tokens, "poll": None,
            "note": f"cpu share {share:.2f}, version {machine.get('version', '?')}"}


def read_llama_lookup(path, measure):
    """The run's decode rate and drafting counts from the stderr log of one `llama-lookup`."""
    try:
        text = pathlib.Path(path).read_text()
    except OSError as e:
        raise ParseError(f"{path}: not a llama-lookup log ({e})") from None
    decoded = re.search(r"^decoded\s+(\d+) tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s$", text, re.M)
    counts = {k: re.search(rf"^{k}\s+= (\d+)$", text, re.M) for k in ("n_draft", "n_drafted", "n_accept")}
    if not decoded or not all(counts.values()):
        raise ParseError(f"{path}: no 'decoded N tokens ...' line or n_draft / n_drafted / n_accept counts")
    n, speed = int(decoded.group(1)), float(decoded.group(2))
    n_draft, drafted, accepted = (int(counts[k].group(1)) for k in ("n_draft", "n_drafted", "n_accept"))
    if (measure == "plain") != (n_draft == 0) or n < 2:
        raise ParseError(f"{path}: a {measure} run needs " + ("--draft-max 0" if measure == "plain" else "--draft-max > 0") +
                         f" and >= 2 predicted tokens, got n_draft {n_draft}, {n} tokens")
    return {"rate": speed * (n - 1) / n, "threads": None, "tokens": n - 1, "poll": None,
            "note": f"draft-max {n_draft}, accepted {accepted} of {drafted}"}


READERS = {("llama.cpp", "decode"): read_llama_bench, ("llama.cpp", "prefill"): read_llama_bench,
           ("llama.cpp", "plain"): read_llama_lookup, ("llama.cpp", "ngram"): read_llama_lookup,
           ("specula", "decode"): read_specula_run, ("specula", "prefill"): read_specula_run,
           ("specula", "plain"): read_specula_run, ("specula", "ngram"): read_specula_run}


def collect(run_dir):
    """Every run of RUN_DIR/index.tsv: dicts of model, threads, measure, engine, rep, file and the
    reader's rate, tokens, poll and note; refuses a run whose output records other threads than
    its index line (llama-lookup's records none)."""
    run_dir = pathlib.Path(run_dir)
    rows = []
    for number, line in enumerate((run_dir / "index.tsv").read_text().splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 6:
            raise ParseError(f"{run_dir / 'index.tsv'}:{number}: expected 6 tab-separated fields, got {len(fields)}")
        model, threads, measure, engine, rep, file = fields
        if measure not in MEASURES or engine not in ENGINES:
            raise ParseError(f"{run_dir / 'index.tsv'}:{number}: unknown measure '{measure}' or engine '{engine}'")
        row = {"model": model, "threads": int(threads), "measure": measure, "engine": engine, "rep": int(rep),
               "file": file}
        parsed = READERS[engine, measure](run_dir / file, measure)
        ran_with = parsed.pop("threads")
        if ran_with is not None and ran_with != row["threads"]:
            raise ParseError(f"{run_dir / file}: ran with {ran_with} threads, index says {threads}")
        row.update(parsed)
        rows.append(row)
    return rows


def raw_tsv(rows):
    lines = ["model\tthreads\tmeasure\tengine\trep\ttokens\ttokens_per_s\tnote\tfile"]
    lines += [f"{r['model']}\t{r['threads']}\t{r['measure']}\t{r['engine']}\t{r['rep']}\t{r['tokens']}\t{r['rate']:.3f}\t"
              f"{r['note']}\t{r['file']}" for r in rows]
    return "\n".join(lines) + "\n"


def table(rows):
    """Markdown: per (model, threads, measure) of decode and prefill, both engines' medians, the
    ratio of medians and the per-repetition ratios specula / llama.cpp; per (model, threads,
    engine) of plain and ngram, the medians, the speedup of medians and the per-repetition
    speedups ngram / plain."""
    groups, speedups = {}, {}
    for r in rows:
        if r["measure"] in ("decode", "prefill"):
            groups.setdefault((r["model"], r["threads"], r["measure"]), {}).setdefault(r["engine"], {})[r["rep"]] = r["rate"]
        else:
            speedups.setdefault((r["model"], r["threads"], r["engine"]), {}).setdefault(r["measure"], {})[r["rep"]] = r["rate"]
    out = []
    if groups:
        out += ["| model | threads | measure | llama.cpp tok/s | specula tok/s | specula / llama.cpp | per-run ratios |",
                "|---|---|---|---|---|---|---|"]
    for (model, threads, measure), by_engine in groups.items():
        if set(by_engine) != set(ENGINES) or set(by_engine["llama.cpp"]) != set(by_engine["specula"]):
            raise ParseError(f"{model} {threads} threads {measure}: the engines' repetitions do not pair up")
        tokens = {r["tokens"] for r in rows if (r["model"], r["threads"], r["measure"]) == (model, threads, measure)}
        if len(tokens) != 1:
            raise ParseError(f"{model} {threads} threads {measure}: the runs count different tokens {sorted(tokens)}")
        a, b = by_engine["llama.cpp"], by_engine["specula"]
        ratios = " ".join(f"{b[rep] / a[rep]:.2f}" for rep in sorted(a))
        ma, mb = statistics.median(a.values()), statistics.median(b.values())
        out.append(f"| {model} | {threads} | {measure} | {ma:.1f} | {mb:.1f} | {mb / ma:.2f}x | {ratios} |")
    if groups and speedups:
        out.append("")
    if speedups:
        out += ["| model | threads | engine | plain tok/s | n-gram tok/s | n-gram / plain | per-run speedups |",
                "|---|---|---|---|---|---|---|"]
    for (model, threads, engine), by_measure in speedups.items():
        if set(by_measure) != {"plain", "ngram"} or set(by_measure["plain"]) != set(by_measure["ngram"]):
            raise ParseError(f"{model} {threads} threads {engine}: the plain and ngram repetitions do not pair up")
        a, b = by_measure["plain"], by_measure["ngram"]
        ratios = " ".join(f"{b[rep] / a[rep]:.2f}" for rep in sorted(a))
        ma, mb = statistics.median(a.values()), statistics.median(b.values())
        out.append(f"| {model} | {threads} | {engine} | {ma:.1f} | {mb:.1f} | {mb / ma:.2f}x | {ratios} |")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2:
        print("usage: compare_llamacpp.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = pathlib.Path(argv[1])
    if not (run_dir / "index.tsv").is_file():
        print(f"compare_llamacpp.py: error: RUN_DIR '{run_dir}' holds no index.tsv", file=sys.stderr)
        return 1
    try:
        rows = collect(run_dir)
        text = table(rows)
    except ParseError as e:
        print(f"compare_llamacpp.py: error: {e}", file=sys.stderr)
        return 1
    (run_dir / "raw.tsv").write_text(raw_tsv(rows))
    sys.stdout.write(text)
    polls = sorted({r["poll"] for r in rows if r["poll"] is not None})
    if polls:
        print(f"llama-bench thread pool --poll: {', '.join(map(str, polls))} (ggml: 0 no polling, 100 aggressive polling)")
    print(f"every run's figure: {run_dir / 'raw.tsv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
