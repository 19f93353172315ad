#!/usr/bin/env python3
"""bench/compare_llamacpp.py on recorded outputs of both engines (tests/data/compare-llamacpp:
one bench/compare-llamacpp.sh run, target-16m f32, one thread, --reps 1 --prompt 16 --gen 32
--ngram 3 on the first dev prompt).

The expected figures are the outputs' own, checked by hand: llama-bench's avg_ts is n_gen or
n_prompt over samples_ns (32 / 76605106 ns, 16 / 7107537 ns); llama-lookup's is its speed
times (n - 1) / n (355.814 and 371.705 t/s, n = 33); specula's are the stats fields.
Exits 1 with the first mismatch.
  python3 tests/check_compare_llamacpp.py SOURCE_DIR
"""
import pathlib
import shutil
import sys
import tempfile


def main(root: pathlib.Path) -> int:
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(root / "bench"))
    import compare_llamacpp as c

    data = root / "tests" / "data" / "compare-llamacpp"
    failures = []

    def check(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    rows = c.collect(data)
    got = [(r["engine"], r["measure"], r["threads"], r["tokens"], round(r["rate"], 3)) for r in rows]
    check("runs", got, [("llama.cpp", "decode", 1, 32, 417.727), ("specula", "decode", 1, 32, 467.062),
                        ("llama.cpp", "prefill", 1, 16, 2251.131), ("specula", "prefill", 1, 16, 3937.043),
                        ("llama.cpp", "plain", 1, 32, 345.032), ("llama.cpp", "ngram", 1, 32, 360.441),
                        ("specula", "plain", 1, 32, 290.017), ("specula", "ngram", 1, 33, 552.241)])
    check("llama-bench poll", [r["poll"] for r in rows if r["measure"] in ("decode", "prefill")], [50, None, 50, None])
    check("llama-lookup counts", [r["note"] for r in rows if r["engine"] == "llama.cpp" and r["measure"] == "ngram"],
          ["draft-max 3, accepted 6 of 6"])
    model = "target-16m/target-16m-f32.gguf"
    check("table", c.table(rows).splitlines(), [
        "| model | threads | measure | llama.cpp tok/s | specula tok/s | specula / llama.cpp | per-run ratios |",
        "|---|---|---|---|---|---|---|",
        f"| {model} | 1 | decode | 417.7 | 467.1 | 1.12x | 1.12 |",
        f"| {model} | 1 | prefill | 2251.1 | 3937.0 | 1.75x | 1.75 |",
        "",
        "| model | threads | engine | plain tok/s | n-gram tok/s | n-gram / plain | per-run speedups |",
        "|---|---|---|---|---|---|---|",
        f"| {model} | 1 | llama.cpp | 345.0 | 360.4 | 1.04x | 1.04 |",
        f"| {model} | 1 | specula | 290.0 | 552.2 | 1.90x | 1.90 |"])

    # An output read as another measure, and a measurement missing a partner, are refused.
    for engine, measure, file in (("llama.cpp", "prefill", "runs/001-llama-bench.json"),
                                  ("llama.cpp", "ngram", "runs/005-llama-lookup.log"),
                                  ("specula", "decode", "runs/004-specula/results.jsonl"),
                                  ("specula", "ngram", "runs/002-specula/results.jsonl")):
        try:
            c.READERS[engine, measure](data / file, measure)
            failures.append(f"{file} read as {measure} was accepted")
        except c.ParseError:
            pass
    for i, what in ((0, "a decode without llama.cpp's run"), (6, "specula's n-gram without its plain run")):
        try:
            c.table(rows[:i] + rows[i + 1:])
            failures.append(f"{what} was accepted")
        except c.ParseError:
            pass

    # The command line: raw.tsv holds every run's figure.
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = pathlib.Path(tmp) / "run"
        shutil.copytree(data, run_dir)
        check("exit status", c.main(["compare_llamacpp.py", str(run_dir)]), 0)
        raw = (run_dir / "raw.tsv").read_text().splitlines()
        check("raw.tsv rates", [line.split("\t")[6] for line in raw],
              ["tokens_per_s", "417.727", "467.062", "2251.131", "3937.043", "345.032", "360.441", "290.017", "552.241"])

    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
