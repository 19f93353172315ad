#!/usr/bin/env python3
"""bench/compare_llamacpp.py on recorded outputs of both engines (tests/data/compare-llamacpp:
one bench/compare-llamacpp.sh run, target-16m f32, one thread, --reps 1 --prompt 16 --gen 8).

The expected figures are the outputs' own, checked by hand: llama-bench's avg_ts is n_gen or
n_prompt over samples_ns (8 / 20839815 ns, 16 / 9255962 ns); specula's are the stats fields.
Exits 1 with the first mismatch.
  python3 tests/check_compare_llamacpp.py SOURCE_DIR
"""
import pathlib
import shutil
import sys
import tempfile


def main(root: pathlib.Path) -> int:
    sys.path.insert(0, str(root / "bench"))
    import compare_llamacpp as c

    data = root / "tests" / "data" / "compare-llamacpp"
    failures = []

    def check(what, got, want):
        if got != want:
            failures.append(f"{what}: got {got!r}, want {want!r}")

    rows = c.collect(data)
    got = [(r["engine"], r["measure"], r["rep"], r["threads"], r["tokens"], round(r["rate"], 3)) for r in rows]
    check("runs", got, [("llama.cpp", "decode", 0, 1, 8, 383.881), ("specula", "decode", 0, 1, 8, 627.858),
                        ("llama.cpp", "prefill", 0, 1, 16, 1728.616), ("specula", "prefill", 0, 1, 16, 5085.030)])
    check("llama.cpp poll", {r["poll"] for r in rows if r["engine"] == "llama.cpp"}, {50})
    check("table", c.table(rows).splitlines()[2:], [
        "| target-16m/target-16m-f32.gguf | 1 | decode | 383.9 | 627.9 | 1.64x | 1.64 |",
        "| target-16m/target-16m-f32.gguf | 1 | prefill | 1728.6 | 5085.0 | 2.94x | 2.94 |"])

    # A run read as the other measure, and a run with a missing partner, are refused.
    for engine, file in (("llama.cpp", "runs/001-llama-bench.json"), ("specula", "runs/004-specula/results.jsonl")):
        try:
            c.READERS[engine](data / file, "prefill" if "001" in file else "decode")
            failures.append(f"{file} read as the other measure was accepted")
        except c.ParseError:
            pass
    try:
        c.table(rows[1:])
        failures.append("a measurement without llama.cpp's run was accepted")
    except c.ParseError:
        pass

    # The command line: raw.tsv holds every run's figure.
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = pathlib.Path(tmp) / "run"
        shutil.copytree(data, run_dir)
        check("exit status", c.main(["compare_llamacpp.py", str(run_dir)]), 0)
        raw = (run_dir / "raw.tsv").read_text().splitlines()
        check("raw.tsv rates", [line.split("\t")[6] for line in raw],
              ["tokens_per_s", "383.881", "627.858", "1728.616", "5085.030"])

    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
