#!/usr/bin/env python3
"""Sequoia's acceptance vector from an experiment's results.jsonl: the rank counts
(stats.rank_counts: children tried along accepted paths and those accepted, by depth and
sibling rank) pooled over the jobs of the runs whose label contains FILTER (all speculative
runs without one), turned into p[depth][rank], the probability that a node's child of that
rank is the one accepted, and printed as the draft.sequoia line of a config.

    python3 experiments/rank_acceptance.py OUTDIR [FILTER] [--min-tried N]

A context's children are tried in rank order up to the accepted one: h_k = accepted_k / tried_k
estimates the chance rank k is accepted when ranks < k were not (trees of any shape give
unbiased h_k where the shape does not depend on the draw), and p_k = h_k * prod_{j<k} (1 - h_j).
Ranks tried fewer than N times (default 20) end a row; depths whose rank 0 is end the table.
"""
import json
import sys


def pooled(path, label_filter):
    tried, accepted = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("role") == "baseline" or label_filter not in r.get("label", ""):
                continue
            counts = r.get("stats", {}).get("rank_counts")
            if not counts:
                continue
            for total, source in ((tried, counts["tried"]), (accepted, counts["accepted"])):
                for d, row in enumerate(source):
                    while len(total) <= d:
                        total.append([])
                    while len(total[d]) < len(row):
                        total[d].append(0)
                    for k, n in enumerate(row):
                        total[d][k] += n
    return tried, accepted


def acceptance(tried, accepted, min_tried):
    table = []
    for row_tried, row_accepted in zip(tried, accepted):
        row, survive = [], 1.0
        for n, a in zip(row_tried, row_accepted):
            if n < min_tried:
                break
            h = a / n
            row.append(survive * h)
            survive *= 1 - h
        if not row:
            break
        table.append(row)
    return table


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    min_tried = 20
    if "--min-tried" in argv:
        i = argv.index("--min-tried")
        min_tried = int(argv[i + 1])
        args.remove(argv[i + 1])
    if not 1 <= len(args) <= 2:
        sys.exit(__doc__)
    tried, accepted = pooled(f"{args[0]}/results.jsonl", args[1] if len(args) == 2 else "")
    table = acceptance(tried, accepted, min_tried)
    if not table:
        sys.exit(f"rank_acceptance: no rank counts tried at least {min_tried} times in {args[0]}/results.jsonl")
    for d, (row_tried, row) in enumerate(zip(tried, table)):
        print(f"# depth {d + 1}: tried {row_tried[:len(row)]}")
    print("sequoia = [" + ", ".join("[" + ", ".join(f"{x:.4f}" for x in row) + "]" for row in table) + "]")


if __name__ == "__main__":
    main(sys.argv)
