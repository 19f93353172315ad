#!/usr/bin/env python3
"""experiments/rank_acceptance.py on a hand-made results.jsonl: counts pooled over the matching
runs' jobs, baselines and other runs ignored, hazards turned into p, thin ranks cut.

    python3 tests/check_rank_acceptance.py SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile


def job(label, tried, accepted, role="speculative"):
    return {"role": role, "label": label, "stats": {"rank_counts": {"tried": tried, "accepted": accepted}}}


def main(source):
    rows = [job("draft-4m tree 4-2", [[40, 20, 10], [10]], [[20, 10, 1], [5]]),
            job("draft-4m tree 4-2", [[60, 30, 15, 5]], [[30, 15, 2, 1]]),
            job("draft-1m tree 4-2", [[100]], [[100]]),
            job("draft-4m tree 4-2", [[100]], [[100]], role="baseline")]
    with tempfile.TemporaryDirectory() as out:
        with open(f"{out}/results.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        text = subprocess.run([sys.executable, f"{source}/experiments/rank_acceptance.py", out, "draft-4m"],
                              check=True, capture_output=True, text=True).stdout
    # depth 1: tried 100, 50, 25 (5 is under 20), accepted 50, 25, 3: h = 0.5, 0.5, 0.12 ->
    # p = 0.5, 0.25, 0.03; depth 2: tried 10, under 20: the table ends at depth 1.
    last = text.strip().splitlines()[-1]
    assert last == "sequoia = [[0.5000, 0.2500, 0.0300]]", text
    assert "# depth 1: tried [100, 50, 25]" in text, text
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
