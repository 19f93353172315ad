#!/usr/bin/env python3
"""Paired comparison of two values of one swept key in an experiment's results.jsonl.

    python3 experiments/paired_compare.py OUTDIR KEY A B

For every run setting the sweep holds apart from KEY (drafter, shape, the other sweep coordinates),
pairs the jobs of KEY = A and KEY = B on (prompt, seed, repetition) and prints tau (tokens per
speculative step, pooled over the jobs: (accepted + steps) / steps) under each, the relative
change, and the mean paired difference of the jobs' tau with its 95% interval (Student's t).
Jobs without a partner are left out and counted.
"""
import json
import math
import sys
from collections import defaultdict

# Two-sided 97.5% quantiles of Student's t for small df; the normal's beyond.
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
        15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00, 120: 1.98}


def t975(df):
    for bound in sorted(T975):
        if df <= bound:
            return T975[bound]
    return 1.96


def shape(r):
    """The drafted shape: a static tree's branching, a dynamic tree's budget, else the chain's gamma
    (runs of one drafter whose trees have one depth stay apart)."""
    draft = r.get("settings", {}).get("draft", {})
    if draft.get("tree"):
        return "tree " + "-".join(str(b) for b in draft["tree"])
    if draft.get("budget"):
        return f"budget {draft['budget']}"
    return str(r["gamma"])


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__)
    outdir, key, a, b = argv[1:]
    groups = defaultdict(dict)
    with open(f"{outdir}/results.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if r.get("role") == "baseline":
                continue
            value = r.get("coords", {}).get(key)
            if value not in (a, b):
                continue
            s = r["stats"]
            if not s.get("steps"):
                continue
            others = {k: v for k, v in r.get("coords", {}).items() if k != key}
            group = (r["drafter"], shape(r), json.dumps(others, sort_keys=True))
            job = (r["prompt_id"], r["seed"], r["repetition"])
            groups[group][(job, value)] = (s["accepted"], s["steps"])
    print(f"{key}: {a} -> {b}")
    print("| drafter | γ or tree | other coords | pairs | τ " + a + " | τ " + b + " | change | paired Δτ [95% CI] |")
    print("|---|---|---|---|---|---|---|---|")
    for group in sorted(groups):
        jobs = groups[group]
        diffs, sums, unpaired = [], {a: [0, 0], b: [0, 0]}, 0
        for (job, value), (accepted, steps) in jobs.items():
            if value != a:
                continue
            partner = jobs.get((job, b))
            if partner is None:
                unpaired += 1
                continue
            diffs.append((partner[0] + partner[1]) / partner[1] - (accepted + steps) / steps)
            for v, (acc, st) in ((a, (accepted, steps)), (b, partner)):
                sums[v][0] += acc
                sums[v][1] += st
        if len(diffs) < 2:
            continue
        n = len(diffs)
        mean = sum(diffs) / n
        se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)
        tau = {v: (acc + st) / st for v, (acc, st) in sums.items()}
        drafter, gamma, others = group
        print(f"| {drafter} | {gamma} | {others if others != '{}' else ''} | {n}"
              f"{f' ({unpaired} unpaired)' if unpaired else ''} | {tau[a]:.3f} | {tau[b]:.3f} | "
              f"{100 * (tau[b] / tau[a] - 1):+.1f}% | {mean:+.3f} [{mean - t975(n - 1) * se:+.3f}, "
              f"{mean + t975(n - 1) * se:+.3f}] |")


if __name__ == "__main__":
    main(sys.argv)
