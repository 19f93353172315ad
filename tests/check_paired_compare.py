#!/usr/bin/env python3
"""experiments/paired_compare.py on a hand-made results.jsonl: pooled tau per value, the paired
difference and its interval, jobs without a partner counted, baselines and other values ignored.

    python3 tests/check_paired_compare.py SOURCE_DIR
"""
import json
import subprocess
import sys
import tempfile


def job(prompt, seed, rule, accepted, steps, role="speculative", tree=None):
    row = {"role": role, "coords": {"verify.rule": rule, "draft.gamma": "4"}, "drafter": "d", "gamma": 4,
           "prompt_id": prompt, "seed": seed, "repetition": 0, "stats": {"accepted": accepted, "steps": steps}}
    if tree:
        row["settings"] = {"draft": {"tree": tree, "budget": 0}}
    return row


def main(source):
    rows = [job("p0", 0, "token", 10, 10), job("p0", 0, "block", 15, 10),  # tau 2.0 -> 2.5
            job("p1", 0, "token", 20, 10), job("p1", 0, "block", 20, 10),  # tau 3.0 -> 3.0
            job("p2", 0, "token", 5, 5),                                   # no partner
            job("p0", 0, "other", 90, 10), job("p0", 0, "token", 0, 10, role="baseline"),
            # a tree of the chain's depth: its own group, not the chain's partner
            job("p0", 0, "token", 30, 10, tree=[2, 1, 1, 1]), job("p0", 0, "block", 40, 10, tree=[2, 1, 1, 1]),
            job("p1", 0, "token", 30, 10, tree=[2, 1, 1, 1]), job("p1", 0, "block", 30, 10, tree=[2, 1, 1, 1])]
    with tempfile.TemporaryDirectory() as out:
        with open(f"{out}/results.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        text = subprocess.run([sys.executable, f"{source}/experiments/paired_compare.py", out, "verify.rule", "token",
                               "block"], check=True, capture_output=True, text=True).stdout
    line = [l for l in text.splitlines() if l.startswith("| d | 4 |")]
    assert len(line) == 1, text
    cells = [c.strip() for c in line[0].strip("|").split("|")]
    # pooled: token (30 + 20) / 20 = 2.5, block (35 + 20) / 20 = 2.75; diffs 0.5 and 0: mean 0.25, se 0.25, t(1) 12.71
    assert cells[3] == "2 (1 unpaired)", cells
    assert cells[4] == "2.500" and cells[5] == "2.750" and cells[6] == "+10.0%", cells
    assert cells[7] == "+0.250 [-2.928, +3.428]", cells
    tree = [l for l in text.splitlines() if l.startswith("| d | tree 2-1-1-1 |")]
    assert len(tree) == 1, text
    cells = [c.strip() for c in tree[0].strip("|").split("|")]
    assert cells[3] == "2" and cells[4] == "4.000" and cells[5] == "4.500", cells
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
