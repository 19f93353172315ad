#!/usr/bin/env python3
"""Plots of an experiment output directory, drawn from its summary.csv.

    python3 experiments/plot_results.py OUTDIR

Writes into OUTDIR, each only when the data has what it needs:
  acceptance_vs_gamma.png   acceptance rate and tau vs gamma, per drafter, one column per domain
  speedup_vs_gamma.png      measured speedup (95% CI) and Leviathan's prediction vs gamma
  acceptance_per_depth.png  share of rounds whose accepted path reached depth d, per run
  tree_shapes.png           tau and speedup of chains, static and dynamic trees per node budget
  sampler_comparison.png    speedup per sampling strategy, one bar per drafter
Called by `specula run` / `specula report` when output.formats includes "png".
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def number(text):
    return float(text) if text not in ("", None) else math.nan


def read_rows(outdir):
    with open(os.path.join(outdir, "summary.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("gamma", "nodes", "run_index"):
            r[key] = int(r[key])
        for key in ("acceptance_rate", "tau", "speedup", "speedup_ci_low", "speedup_ci_high", "predicted_speedup"):
            r[key] = number(r[key])
        r["depth"] = [number(r[k]) for k in sorted((k for k in r if k.startswith("acc_depth_")),
                                                    key=lambda k: int(k.rsplit("_", 1)[1]))]
    return rows


def unique(values):
    return list(dict.fromkeys(values))


def series_name(row, rows):
    """The drafter, with the strategy when several strategies are plotted together."""
    several = len(unique(r["strategy"] for r in rows)) > 1
    return f"{row['drafter']} · {row['strategy']}" if several else row["drafter"]


def save(fig, outdir, name):
    path = os.path.join(outdir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def chain_series(rows, domain):
    """{series: [(gamma, row)]} of the chain runs in `domain`, sorted by gamma."""
    series = {}
    for r in rows:
        if r["shape"] == "chain" and r["domain"] == domain:
            series.setdefault(series_name(r, rows), []).append((r["gamma"], r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in series.items()}


def plot_acceptance_vs_gamma(rows, outdir):
    chains = [r for r in rows if r["shape"] == "chain"]
    if len(unique(r["gamma"] for r in chains)) < 2:
        return
    domains = unique(r["domain"] for r in chains)
    fig, axes = plt.subplots(2, len(domains), figsize=(3.6 * len(domains), 6.4), squeeze=False, sharex=True)
    for col, domain in enumerate(domains):
        for name, points in chain_series(chains, domain).items():
            gammas = [g for g, _ in points]
            axes[0][col].plot(gammas, [r["acceptance_rate"] for _, r in points], marker="o", label=name)
            axes[1][col].plot(gammas, [r["tau"] for _, r in points], marker="o", label=name)
        axes[0][col].set_title(domain)
        axes[1][col].set_xlabel("γ (draft tokens per round)")
    axes[0][0].set_ylabel("acceptance rate")
    axes[1][0].set_ylabel("τ (mean accepted tokens)")
    axes[0][0].legend(fontsize="small")
    save(fig, outdir, "acceptance_vs_gamma.png")


def ci_errors(rows):
    """yerr of the speedup bars: distances to the 95% CI bounds (0 where undefined)."""
    low = [r["speedup"] - r["speedup_ci_low"] if not math.isnan(r["speedup_ci_low"]) else 0 for r in rows]
    high = [r["speedup_ci_high"] - r["speedup"] if not math.isnan(r["speedup_ci_high"]) else 0 for r in rows]
    return [low, high]


def plot_speedup_vs_gamma(rows, outdir):
    chains = [r for r in rows if r["shape"] == "chain" and r["domain"] == "all" and not math.isnan(r["speedup"])]
    if len(unique(r["gamma"] for r in chains)) < 2:
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, points in chain_series(chains, "all").items():
        gammas = [g for g, _ in points]
        measured = [r for _, r in points]
        line = ax.errorbar(gammas, [r["speedup"] for r in measured], yerr=ci_errors(measured), marker="o", capsize=3,
                           label=f"{name} measured")
        predicted = [r["predicted_speedup"] for _, r in points]
        if not all(math.isnan(p) for p in predicted):
            ax.plot(gammas, predicted, linestyle="--", color=line[0].get_color(), label=f"{name} predicted")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("γ (draft tokens per round)")
    ax.set_ylabel("speedup over the target alone")
    ax.legend(fontsize="small")
    save(fig, outdir, "speedup_vs_gamma.png")


def plot_acceptance_per_depth(rows, outdir):
    runs = [r for r in rows if r["domain"] == "all" and r["shape"] != "none" and any(not math.isnan(x) for x in r["depth"])]
    if not runs:
        return
    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    for r in runs:
        depths = [d + 1 for d, x in enumerate(r["depth"]) if not math.isnan(x)]
        ax.plot(depths, [x for x in r["depth"] if not math.isnan(x)], marker=".", label=r["label"])
    ax.set_xlabel("depth d")
    ax.set_ylabel("rounds accepting depth d / rounds")
    ax.set_ylim(0, 1)
    if len(runs) <= 16:
        ax.legend(fontsize="x-small")
    save(fig, outdir, "acceptance_per_depth.png")


def plot_tree_shapes(rows, outdir):
    spec = [r for r in rows if r["domain"] == "all" and r["shape"] != "none"]
    if not any(r["shape"] in ("tree", "dynamic") for r in spec):
        return
    spec.sort(key=lambda r: (r["nodes"], r["run_index"]))
    kinds = unique(r["shape"] for r in spec)
    colors = {k: f"C{i}" for i, k in enumerate(kinds)}
    xs, x = [], 0
    for i, r in enumerate(spec):
        x += 1 if i and r["nodes"] != spec[i - 1]["nodes"] else 0  # a gap between node budgets
        xs.append(x)
        x += 1
    several = len(unique((r["drafter"], r["strategy"]) for r in spec)) > 1
    names = [f"{r['label'] if several else r['variant']} ({r['nodes']})" for r in spec]
    fig, axes = plt.subplots(2, 1, figsize=(max(6.4, 0.6 * len(spec) + 2), 7.2), sharex=True)
    bar_colors = [colors[r["shape"]] for r in spec]
    axes[0].bar(xs, [r["tau"] for r in spec], color=bar_colors)
    axes[0].set_ylabel("τ (mean accepted tokens)")
    axes[1].bar(xs, [r["speedup"] for r in spec], yerr=ci_errors(spec), capsize=3, color=bar_colors)
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    axes[1].set_ylabel("speedup over the target alone")
    axes[1].set_xticks(xs)
    axes[1].set_xticklabels(names, rotation=40, ha="right", fontsize="small")
    axes[0].legend(handles=[Patch(color=colors[k], label=k) for k in kinds], fontsize="small")
    axes[0].set_title("draft shapes, grouped by draft nodes per round")
    save(fig, outdir, "tree_shapes.png")


def plot_sampler_comparison(rows, outdir):
    spec = [r for r in rows if r["domain"] == "all" and r["shape"] != "none" and not math.isnan(r["speedup"])]
    spec = [r for r in spec if r["variant"] == spec[0]["variant"]] if spec else []  # summary.md has the others
    strategies = unique(r["strategy"] for r in spec)
    if len(strategies) < 2:
        return
    drafters = unique(r["drafter"] for r in spec)
    width = 0.8 / len(drafters)
    fig, ax = plt.subplots(figsize=(1.4 * len(strategies) + 3, 4.4))
    for i, drafter in enumerate(drafters):
        cells = [(strategies.index(r["strategy"]), r) for r in spec if r["drafter"] == drafter]
        ax.bar([s + (i - (len(drafters) - 1) / 2) * width for s, _ in cells], [r["speedup"] for _, r in cells],
               width=width, yerr=ci_errors([r for _, r in cells]), capsize=2, label=drafter)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(strategies)))
    ax.set_xticklabels(strategies, fontsize="small")
    ax.set_ylabel("speedup over the target alone")
    ax.set_title(f"sampling strategies × drafters ({spec[0]['variant']})", fontsize="medium")
    ax.legend(fontsize="small")
    save(fig, outdir, "sampler_comparison.png")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_results.py OUTDIR")
    outdir = sys.argv[1]
    rows = read_rows(outdir)
    plot_acceptance_vs_gamma(rows, outdir)
    plot_speedup_vs_gamma(rows, outdir)
    plot_acceptance_per_depth(rows, outdir)
    plot_tree_shapes(rows, outdir)
    plot_sampler_comparison(rows, outdir)


if __name__ == "__main__":
    main()
