#!/usr/bin/env python3
"""Plots of an experiment output directory, drawn from its summary.csv (and the machine of
its experiment.json, for the titles).

    python3 experiments/plot_results.py OUTDIR

Writes into OUTDIR, each only when the data has what it needs:
  acceptance_vs_gamma.png   acceptance rate and tau (bootstrap 95% CI) vs gamma (two or more), one column per domain
  speedup_vs_gamma.png      decode-only and end-to-end speedup (95% CI) vs gamma; Leviathan's
                            prediction and the bound tau allows on the decode panel
  acceptance_per_depth.png  per run: rounds reaching depth d, and P(accept d | reached d - 1)
  accepted_histogram.png    per run: share of rounds accepting exactly k draft tokens
  tree_shapes.png           tau and speedup of chains, static and dynamic trees per node budget
  sampler_comparison.png    speedup per sampling strategy and drafter, one panel per draft shape
  batch_throughput.png      batched runs (batch_summary.csv): output tok/s and per-token latency
                            vs batch size, plain and each drafter
  batch_speedup.png         batched runs: throughput speedup over plain at the same batch size
A figure holds at most 10 series (runs, or drafter x strategy lines); more continue in
NAME-2.png, NAME-3.png, ... with the same axes. Each drafter keeps one colour in every
figure, each strategy one line style. Called by `specula run` / `specula report` when
output.formats includes "png".
"""
import csv
import glob
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

MAX_SERIES = 10
LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
PREDICTED = (0, (1, 2))  # a fine dotted line, unlike every strategy's style
HATCHES = {"chain": "", "adaptive": "..", "tree": "//", "dynamic": "xx"}


def number(text):
    return float(text) if text not in ("", None) else math.nan


def numbered(row, prefix):
    keys = sorted((k for k in row if k.startswith(prefix) and k[len(prefix):].isdigit()), key=lambda k: int(k[len(prefix):]))
    return [number(row[k]) for k in keys]


def read_rows(outdir):
    with open(os.path.join(outdir, "summary.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("gamma", "nodes", "run_index", "pairs"):
            r[key] = int(r[key])
        for key in ("acceptance_rate", "acceptance_ci_low", "acceptance_ci_high", "tau", "tau_ci_low", "tau_ci_high",
                    "speedup", "speedup_ci_low", "speedup_ci_high", "e2e_speedup", "e2e_speedup_ci_low",
                    "e2e_speedup_ci_high", "predicted_speedup", "speedup_bound"):
            r[key] = number(r[key])
        r["depth"] = numbered(r, "acc_depth_")
        r["conditional"] = numbered(r, "cond_depth_")
        r["histogram"] = numbered(r, "accepted_")
    return sorted(rows, key=lambda r: r["run_index"])


def unique(values):
    return list(dict.fromkeys(values))


def finite(values):
    return [v for v in values if not math.isnan(v)]


class Style:
    """One colour per drafter and one line style per strategy, the same in every figure."""

    def __init__(self, rows):
        drafters = unique(r["drafter"] for r in rows if r["shape"] != "none")
        if len(drafters) <= 10:
            palette = [plt.get_cmap("tab10")(i) for i in range(10)]
        elif len(drafters) <= 20:
            palette = [plt.get_cmap("tab20")(i) for i in range(20)]
        else:
            palette = [plt.get_cmap("hsv")(i / len(drafters)) for i in range(len(drafters))]
        self.colors = {d: palette[i] for i, d in enumerate(drafters)}
        self.strategies = unique(r["strategy"] for r in rows)

    def color(self, drafter):
        return self.colors.get(drafter, "black")

    def line(self, strategy):
        return LINE_STYLES[self.strategies.index(strategy) % len(LINE_STYLES)]


class Figures:
    """Titles and file names shared by the plots of one output directory."""

    def __init__(self, outdir, rows):
        self.outdir = outdir
        targets = ", ".join(unique(r.get("target", "") for r in rows if r.get("target"))) or "target"
        strategies = unique(r["strategy"] for r in rows)
        samplers = ", ".join(strategies) if len(strategies) <= 3 else f"{len(strategies)} samplers"
        self.subtitle = " · ".join(p for p in (targets, samplers, machine(outdir)) if p)

    def title(self, fig, what, part, parts):
        suffix = f" (part {part + 1} of {parts})" if parts > 1 else ""
        fig.suptitle(f"{what}{suffix}\n{self.subtitle}", fontsize="medium")

    def save(self, fig, name, part, parts):
        stem = name[:-len(".png")]
        path = os.path.join(self.outdir, name if part == 0 else f"{stem}-{part + 1}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")  # legends outside the axes included
        plt.close(fig)
        print(f"plot: {path}")
        if part == parts - 1:  # parts of an earlier, larger report
            for old in glob.glob(os.path.join(self.outdir, f"{stem}-*.png")):
                suffix = old[len(os.path.join(self.outdir, stem)) + 1:-len(".png")]
                if suffix.isdigit() and int(suffix) > parts:
                    os.remove(old)


def machine(outdir):
    """"CPU, N threads" of the last session in experiment.json, or ""."""
    try:
        with open(os.path.join(outdir, "experiment.json")) as f:
            m = json.load(f)["sessions"][-1]["machine"]
    except (OSError, ValueError, KeyError, IndexError):
        return ""
    threads = m.get("threads", 0)
    count = "default threads" if threads == 0 else f"{threads} thread{'s' if threads > 1 else ''}"
    return f"{m.get('cpu', 'unknown CPU')}, {count}"


def chunks(items, size=MAX_SERIES):
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


def interval(rows, key, ci=None):
    """yerr: distances from `key` to its CI bounds `ci`_ci_low/high (0 where there is none); None without any."""
    ci = ci or key
    low = [r[key] - r[f"{ci}_ci_low"] if not math.isnan(r[f"{ci}_ci_low"]) else 0 for r in rows]
    high = [r[f"{ci}_ci_high"] - r[key] if not math.isnan(r[f"{ci}_ci_high"]) else 0 for r in rows]
    return [low, high] if any(low) or any(high) else None


def limits(values, floor=None, pad=0.08):
    values = finite(values)
    if not values:
        return None
    lo, hi = min(values), max(values)
    span = (hi - lo) or max(abs(hi), 1.0) * 0.1
    lo, hi = lo - pad * span, hi + pad * span
    return (min(lo, floor) if floor is not None else lo, hi)


def series_of(rows):
    """[(drafter, strategy)] of the chains in `rows`, in run order."""
    return unique((r["drafter"], r["strategy"]) for r in rows)


def series_label(drafter, strategy, several_strategies):
    return f"{drafter} · {strategy}" if several_strategies else drafter


def dodge(i, n, width=0.25):
    """x offset of series i of n, so that series at the same γ do not hide each other."""
    return (i - (n - 1) / 2) * (width / max(n - 1, 1)) if n > 1 else 0.0


def gamma_axis(ax, gammas):
    """Integer ticks: every γ of the data when there are few, else integer steps."""
    gammas = sorted(set(gammas))
    if len(gammas) <= 12:
        ax.set_xticks(gammas)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(gammas[0] - 0.5, gammas[-1] + 0.5)
    ax.set_xlabel("γ (draft tokens per round)")


def plot_acceptance_vs_gamma(rows, style, figures):
    chains = [r for r in rows if r["shape"] == "chain"]
    if len(unique(r["gamma"] for r in chains)) < 2:  # one γ: the tables and the other plots show it
        return
    domains = unique(r["domain"] for r in chains)
    several = len(unique(r["strategy"] for r in chains)) > 1
    parts = chunks(series_of(chains))
    tau_limits = limits([r[k] for r in chains for k in ("tau", "tau_ci_high")] + [1.0])
    for part, series in enumerate(parts):
        fig, axes = plt.subplots(2, len(domains), figsize=(3.6 * len(domains) + 1.5, 6.6), squeeze=False,
                                 sharex=True, sharey="row")
        for col, domain in enumerate(domains):
            for i, (drafter, strategy) in enumerate(series):
                points = sorted((r for r in chains if r["domain"] == domain and r["drafter"] == drafter
                                 and r["strategy"] == strategy), key=lambda r: r["gamma"])
                if not points:
                    continue
                kw = dict(marker="o", capsize=3, color=style.color(drafter), linestyle=style.line(strategy),
                          label=series_label(drafter, strategy, several))
                gammas = [r["gamma"] + dodge(i, len(series)) for r in points]
                axes[0][col].errorbar(gammas, [r["acceptance_rate"] for r in points],
                                      yerr=interval(points, "acceptance_rate", "acceptance"), **kw)
                axes[1][col].errorbar(gammas, [r["tau"] for r in points], yerr=interval(points, "tau"), **kw)
            axes[0][col].set_title(domain)
            axes[0][col].set_ylim(0, 1.02)
            if tau_limits:
                axes[1][col].set_ylim(*tau_limits)
            gamma_axis(axes[1][col], [r["gamma"] for r in chains])
        axes[0][0].set_ylabel("acceptance rate")
        axes[1][0].set_ylabel("τ (tokens per round)")
        axes[0][-1].legend(fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))
        figures.title(fig, "Acceptance and τ vs γ (bootstrap 95% CI)", part, len(parts))
        figures.save(fig, "acceptance_vs_gamma.png", part, len(parts))


def plot_speedup_vs_gamma(rows, style, figures):
    """Speedup vs γ per series; when every series has the one same γ, one point with its interval per series."""
    chains = [r for r in rows if r["shape"] == "chain" and r["domain"] == "all" and not math.isnan(r["speedup"])]
    if not chains:
        return
    several = len(unique(r["strategy"] for r in chains)) > 1
    parts = chunks(series_of(chains))
    gammas = sorted(set(r["gamma"] for r in chains))
    single = len(gammas) == 1
    values = [r[k] for r in chains for k in ("speedup", "speedup_ci_low", "speedup_ci_high", "e2e_speedup",
                                             "e2e_speedup_ci_low", "e2e_speedup_ci_high", "predicted_speedup")]
    y = limits(values + [1.0])
    for part, series in enumerate(parts):
        fig, axes = plt.subplots(1, 2, figsize=(12 if not single else max(8, 1.1 * len(series) + 4), 4.8), sharey=True)
        handles, names = [], []
        for i, (drafter, strategy) in enumerate(series):
            points = sorted((r for r in chains if r["drafter"] == drafter and r["strategy"] == strategy),
                            key=lambda r: r["gamma"])
            xs = [i] * len(points) if single else [r["gamma"] + dodge(i, len(series)) for r in points]
            name = series_label(drafter, strategy, several)
            names.append(name)
            kw = dict(color=style.color(drafter), linestyle=style.line(strategy), marker="o", capsize=3)
            axes[0].errorbar(xs, [r["speedup"] for r in points], yerr=interval(points, "speedup"), **kw)
            axes[1].errorbar(xs, [r["e2e_speedup"] for r in points], yerr=interval(points, "e2e_speedup"), **kw)
            predicted = [r["predicted_speedup"] for r in points]
            if finite(predicted):
                axes[0].plot(xs, predicted, marker="x", alpha=0.7, color=style.color(drafter), linewidth=0.8,
                             linestyle="none" if single else PREDICTED)
            handles.append(Line2D([], [], color=style.color(drafter), linestyle=style.line(strategy), marker="o",
                                  label=name))
        if any(finite([r["predicted_speedup"] for r in chains])):
            handles.append(Line2D([], [], color="grey", linestyle=PREDICTED, linewidth=0.8, marker="x",
                                  label="predicted (Leviathan et al.)"))
        for ax, what in zip(axes, ("decode only", "end to end (prefill included)")):
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_title(what)
            if single:
                ax.set_xticks(range(len(series)))
                ax.set_xticklabels(names, rotation=30, ha="right", fontsize="small")
                ax.set_xlim(-0.5, len(series) - 0.5)
                ax.set_xlabel(f"γ = {gammas[0]}")
            else:
                gamma_axis(ax, gammas)
            if y:
                ax.set_ylim(*y)
        axes[0].set_ylabel("speedup over the target alone")
        axes[1].legend(handles=handles, fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))
        figures.title(fig, "Speedup vs γ (95% CI from 5 pairs)", part, len(parts))
        figures.save(fig, "speedup_vs_gamma.png", part, len(parts))


def run_style(r, style, index):
    return dict(color=style.color(r["drafter"]), linestyle=style.line(r["strategy"]),
                marker=MARKERS[index % len(MARKERS)], label=r["label"])


def plot_acceptance_per_depth(rows, style, figures):
    runs = [r for r in rows if r["domain"] == "all" and r["shape"] != "none" and finite(r["depth"])]
    if not runs:
        return
    parts = chunks(runs)
    depth = max(len(r["depth"]) for r in runs)
    for part, group in enumerate(parts):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True, sharex=True)
        for i, r in enumerate(group):
            kw = run_style(r, style, i)
            for ax, values in zip(axes, (r["depth"], r["conditional"])):
                points = [(d + 1, x) for d, x in enumerate(values) if not math.isnan(x)]
                ax.plot([d for d, _ in points], [x for _, x in points], **kw)
        for ax, what in zip(axes, ("rounds reaching depth d / rounds", "P(accept d | reached d − 1)")):
            ax.set_title(what)
            ax.set_xlabel("depth d")
            ax.set_xlim(0.5, depth + 0.5)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(0, 1.02)
        axes[1].legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.02, 0.5))
        figures.title(fig, "Acceptance per depth", part, len(parts))
        figures.save(fig, "acceptance_per_depth.png", part, len(parts))


def plot_accepted_histogram(rows, style, figures):
    runs = [r for r in rows if r["domain"] == "all" and r["shape"] != "none" and finite(r["histogram"])]
    if not runs:
        return
    parts = chunks(runs)
    width = max(len(r["histogram"]) for r in runs)
    top = max(max(finite(r["histogram"])) for r in runs)
    for part, group in enumerate(parts):
        cols = min(5, len(group))
        nrows = math.ceil(len(group) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(2.9 * cols + 0.5, 2.6 * nrows + 0.9), squeeze=False,
                                 sharey=True)
        for ax in axes.flat[len(group):]:
            ax.set_visible(False)
        for ax, r in zip(axes.flat, group):
            ks = [k for k, x in enumerate(r["histogram"]) if not math.isnan(x)]
            ax.bar(ks, [r["histogram"][k] for k in ks], color=style.color(r["drafter"]))
            ax.set_title(r["label"], fontsize="x-small")
            ax.set_xlim(-0.6, width - 0.4)
            ax.set_ylim(0, min(1.0, top * 1.1))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.supxlabel("accepted draft tokens k", fontsize="medium")
        for row in axes:
            row[0].set_ylabel("share of rounds")
        figures.title(fig, "Accepted draft tokens per round", part, len(parts))
        figures.save(fig, "accepted_histogram.png", part, len(parts))


def plot_tree_shapes(rows, style, figures):
    spec = [r for r in rows if r["domain"] == "all" and r["shape"] != "none"]
    if not any(r["shape"] in ("tree", "dynamic") for r in spec):
        return
    spec.sort(key=lambda r: (r["nodes"], r["run_index"]))
    xs, x = [], 0
    for i, r in enumerate(spec):
        x += 1 if i and r["nodes"] != spec[i - 1]["nodes"] else 0  # a gap between node budgets
        xs.append(x)
        x += 1
    several = len(unique((r["drafter"], r["strategy"]) for r in spec)) > 1
    names = [f"{r['label'] if several else r['variant']} ({r['nodes']})" for r in spec]
    fig, axes = plt.subplots(2, 1, figsize=(max(6.4, 0.6 * len(spec) + 2), 7.6), sharex=True)
    bars = dict(color=[style.color(r["drafter"]) for r in spec], hatch=None, edgecolor="white")
    for ax, key, label in ((axes[0], "tau", "τ (tokens per round)"), (axes[1], "speedup", "speedup over the target alone")):
        drawn = ax.bar(xs, [r[key] for r in spec], yerr=interval(spec, key), capsize=3, **bars)
        for bar, r in zip(drawn, spec):
            bar.set_hatch(HATCHES.get(r["shape"], ""))
        ax.set_ylabel(label)
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    axes[1].set_xticks(xs)
    axes[1].set_xticklabels(names, rotation=40, ha="right", fontsize="small")
    handles = [Patch(color=style.color(d), label=d) for d in unique(r["drafter"] for r in spec)]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=HATCHES.get(k, ""), label=k)
                for k in unique(r["shape"] for r in spec)]
    axes[0].legend(handles=handles, fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    figures.title(fig, "Draft shapes, grouped by draft nodes per round", 0, 1)
    figures.save(fig, "tree_shapes.png", 0, 1)


def plot_sampler_comparison(rows, style, figures):
    spec = [r for r in rows if r["domain"] == "all" and r["shape"] != "none" and not math.isnan(r["speedup"])]
    strategies = unique(r["strategy"] for r in rows if r["domain"] == "all")  # beam: the target alone only
    if len(unique(r["strategy"] for r in spec)) < 2:
        return
    variants = unique(r["variant"] for r in spec)
    parts = chunks(unique(r["drafter"] for r in spec))
    y = limits([r[k] for r in spec for k in ("speedup", "speedup_ci_low", "speedup_ci_high")] + [1.0], floor=0)
    for part, drafters in enumerate(parts):
        cols = min(4, len(variants))
        nrows = math.ceil(len(variants) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=((1.2 * len(strategies) + 1.5) * cols + 1.5, 4.4 * nrows),
                                 squeeze=False, sharey=True)
        for ax in axes.flat[len(variants):]:
            ax.set_visible(False)
        width = 0.8 / len(drafters)
        for ax, variant in zip(axes.flat, variants):
            for i, drafter in enumerate(drafters):
                cells = [r for r in spec if r["drafter"] == drafter and r["variant"] == variant]
                offsets = [strategies.index(r["strategy"]) + (i - (len(drafters) - 1) / 2) * width for r in cells]
                ax.bar(offsets, [r["speedup"] for r in cells], width=width, yerr=interval(cells, "speedup"), capsize=2,
                       color=style.color(drafter), label=drafter)
            ax.axhline(1.0, color="grey", linewidth=0.8)
            for k, strategy in enumerate(strategies):
                if not any(r["strategy"] == strategy for r in spec):
                    ax.text(k, 1.0, "target only\n(no speculative form)", ha="center", va="bottom", fontsize="x-small",
                            color="grey")
            ax.set_xticks(range(len(strategies)))
            ax.set_xlim(-0.6, len(strategies) - 0.4)
            ax.set_xticklabels(strategies, fontsize="small", rotation=30, ha="right")
            ax.set_title(variant, fontsize="medium")
            if y:
                ax.set_ylim(*y)
        for row in axes:
            row[0].set_ylabel("speedup over the target alone")
        axes[0][cols - 1].legend(handles=[Patch(color=style.color(d), label=d) for d in drafters], fontsize="small",
                                 loc="center left", bbox_to_anchor=(1.02, 0.5))
        figures.title(fig, "Sampling strategies × drafters (decode speedup, 95% CI)", part, len(parts))
        figures.save(fig, "sampler_comparison.png", part, len(parts))


def read_batch_rows(outdir):
    path = os.path.join(outdir, "batch_summary.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for key in ("batch_size", "run_index", "pairs", "gamma"):
            r[key] = int(r[key])
        for key in ("request_rate", "tokens_per_s", "ms_per_token", "speedup", "speedup_ci_low", "speedup_ci_high"):
            r[key] = number(r[key])
    return sorted(rows, key=lambda r: r["run_index"])


def batch_series(rows):
    """(series, request rate) -> its rows by batch size, in run order."""
    out = {}
    for r in rows:
        out.setdefault((r["series"], r["request_rate"]), []).append(r)
    return [(key, sorted(v, key=lambda r: r["batch_size"])) for key, v in out.items()]


def batch_line_style(r, style):
    colour = "black" if r["shape"] == "none" else style.color(r["drafter"])
    marker = "s" if r["variant"].startswith("load") else "o"
    return dict(color=colour, linestyle=style.line(r["strategy"]), marker=marker)


def batch_axis(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(b) for b in sizes])
    ax.set_xlabel("batch size (run.batch_size)")


def series_name(key):
    series, rate = key
    return series if rate == 0 else f"{series} @ {rate:g} req/s"


def plot_batch_throughput(rows, style, figures):
    if not rows:
        return
    sizes = sorted({r["batch_size"] for r in rows})
    parts = chunks(batch_series(rows))
    for part, group in enumerate(parts):
        fig, (tps, latency) = plt.subplots(1, 2, figsize=(12, 4.5))
        for key, points in group:
            kw = batch_line_style(points[0], style)
            xs = [r["batch_size"] for r in points]
            tps.plot(xs, [r["tokens_per_s"] for r in points], label=series_name(key), **kw)
            latency.plot(xs, [r["ms_per_token"] for r in points], **kw)
        for ax in (tps, latency):
            batch_axis(ax, sizes)
            ax.grid(alpha=0.3)
        tps.set_ylabel("output throughput (tok/s)")
        latency.set_ylabel("per-token latency (ms, mean inter-token gap)")
        tps.set_ylim(bottom=0)
        latency.set_ylim(bottom=0)
        fig.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
        figures.title(fig, "Throughput and per-token latency vs batch size", part, len(parts))
        figures.save(fig, "batch_throughput.png", part, len(parts))


def plot_batch_speedup(rows, style, figures):
    spec = [r for r in rows if r["shape"] != "none" and not math.isnan(r["speedup"])]
    if not spec:
        return
    sizes = sorted({r["batch_size"] for r in spec})
    parts = chunks(batch_series(spec))
    for part, group in enumerate(parts):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for key, points in group:
            kw = batch_line_style(points[0], style)
            xs = [r["batch_size"] for r in points]
            ys = [r["speedup"] for r in points]
            low = [y - r["speedup_ci_low"] if not math.isnan(r["speedup_ci_low"]) else 0 for y, r in zip(ys, points)]
            high = [r["speedup_ci_high"] - y if not math.isnan(r["speedup_ci_high"]) else 0 for y, r in zip(ys, points)]
            ax.errorbar(xs, ys, yerr=[low, high], capsize=3, label=series_name(key), **kw)
        ax.axhline(1.0, color="grey", linewidth=1)
        batch_axis(ax, sizes)
        ax.set_ylabel("throughput speedup over plain (same batch size)")
        ax.grid(alpha=0.3)
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
        figures.title(fig, "Speculative vs plain decoding throughput vs batch size", part, len(parts))
        figures.save(fig, "batch_speedup.png", part, len(parts))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_results.py OUTDIR")
    outdir = sys.argv[1]
    rows = read_rows(outdir)
    batch_rows = read_batch_rows(outdir)
    style, figures = Style(rows + batch_rows), Figures(outdir, rows + batch_rows)
    for plot in (plot_acceptance_vs_gamma, plot_speedup_vs_gamma, plot_acceptance_per_depth, plot_accepted_histogram,
                 plot_tree_shapes, plot_sampler_comparison):
        plot(rows, style, figures)
    for plot in (plot_batch_throughput, plot_batch_speedup):
        plot(batch_rows, style, figures)


if __name__ == "__main__":
    main()
