"""Per-key and per-token attention figures from ``results/<preset>/estimation/`` (``magicpig estimate all`` on
the captured prompts, ``magicpig estimate inputs``): the attention mass curve (Fig. 2a), the sink key and the
mean key across inputs (Figs. 5a, 5b), cos(k_sink, k_avg) per head (Fig. 5c), ‖v_i − o‖ against the logit
(Fig. 10) and the value norm per token (Fig. 11).

The captured prompts are the units: a spread "over prompts" is the range of the per-prompt values."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from magicpig.harness.report import canvas
from magicpig.harness.results_tree import read_table, sparse_layers, truthy
from magicpig.harness.result_files import (INPUTS_MATRIX_CSV, INPUTS_SIMILARITY_CSV, MASS_CURVE_CSV, SINK_CENTER_CSV,
                                           VALUE_NORM_CSV, VALUE_OUTPUT_CSV)


def _prompts(df) -> int:
    return int(df["prompt"].nunique()) if "prompt" in df else 1


def attention_mass_curve(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 2a as a curve: mass held by the top fraction of keys, with and without the sink; left the mean
    over the sparse layers' heads per prompt (line: mean over prompts, band: range over prompts), right the
    spread over heads (10th / 50th / 90th percentile, all prompts), sink removed."""
    title = "Attention mass vs fraction of keys (paper Fig. 2a)"
    fig, (ax, axh) = canvas.subplots(2, title, width=5.6, height=4.4)
    df = read_table(MASS_CURVE_CSV.under(results))
    if df is None:
        return canvas.no_data_figure(fig, (ax, axh), MASS_CURVE_CSV.rel, path, title)
    sp = sparse_layers(df)
    if "prompt" not in sp:
        sp = sp.assign(prompt="capture")
    per_prompt = sp.groupby(["prompt", "fraction"])[["mass_with_sink", "mass_without_sink"]].mean().reset_index()
    for col, color, name in (("mass_with_sink", "C0", "with the sink"), ("mass_without_sink", "C3", "sink removed")):
        g = per_prompt.groupby("fraction")[col]
        x = g.mean().index.to_numpy()
        ax.plot(x, g.mean(), "o-", ms=3, color=color, label=f"{name} (mean over prompts)")
        ax.fill_between(x, g.min(), g.max(), color=color, alpha=0.2)
    uniform = np.logspace(np.log10(per_prompt["fraction"].min()), 0, 50)
    ax.plot(uniform, uniform, ":", color="0.5", lw=1, label="uniform attention")
    ax.set(xscale="log", ylim=(0, 1.02), xlabel="fraction of keys (largest attention first)",
           ylabel="share of the attention mass they hold")
    ax.set_title(f"mean over sparse-layer heads; band: range over {_prompts(sp)} prompt(s)", fontsize=8)
    ax.legend(fontsize=7)
    heads = sp.groupby("fraction")["mass_without_sink"]
    x = heads.median().index.to_numpy()
    axh.fill_between(x, heads.quantile(0.1), heads.quantile(0.9), color="C3", alpha=0.25,
                     label="10th-90th percentile of heads")
    axh.plot(x, heads.median(), "o-", ms=3, color="C3", label="median head")
    axh.set(xscale="log", ylim=(0, 1.02), xlabel="fraction of keys (sink removed)")
    units = len(sp.groupby([c for c in ("prompt", "layer", "head") if c in sp]))
    axh.set_title(f"per head ({units} of layer x head x prompt)", fontsize=8)
    axh.legend(fontsize=7)
    return canvas.save_noted(fig, ref, "attention_mass_curve", path, title)


def sink_key_similarity(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Figs. 5a/5b: pairwise cosines of the sink key across random inputs and of the mean key across sentences
    (heat maps at a middle layer and kv-head), and per layer the mean pairwise cosine of each and of a non-sink key."""
    title = "Sink key across random inputs, mean key across sentences (paper Figs. 5a, 5b)"
    fig, (axa, axb, axl) = canvas.subplots(3, title, width=4.6, height=4.4)
    mat = canvas.panel_table(results, INPUTS_MATRIX_CSV, axa, axb)
    if mat is not None:
        for ax, q, what in ((axa, "sink_key", "sink key (position 0), random inputs"),
                            (axb, "key_mean", "mean key (positions 1..), sentences")):
            g = mat[mat["quantity"] == q]
            if g.empty:
                canvas.no_data(ax, f"{INPUTS_MATRIX_CSV.rel}: {q}")
                continue
            n = int(g["i"].max()) + 1
            m = np.full((n, n), np.nan)
            m[g["i"].astype(int), g["j"].astype(int)] = g["cos"]
            im = ax.imshow(m, vmin=-1, vmax=1, cmap="RdBu_r")
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="cosine")
            ax.set_title(f"{what}\nlayer {int(g['layer'].iloc[0])}, kv-head {int(g['kv_head'].iloc[0])}, "
                         f"{n} inputs", fontsize=8)
            ax.set(xlabel="input", ylabel="input")
    sim = canvas.panel_table(results, INPUTS_SIMILARITY_CSV, axl)
    if sim is not None:
        names = {"sink_key": "sink key (random inputs)", "key_mean": "mean key (sentences)",
                 "other_key": "a middle key (random inputs), for scale"}
        for i, (q, g) in enumerate(sim.groupby("quantity", sort=False)):
            by = g.groupby("layer")
            axl.plot(by["mean_cos"].mean().index, by["mean_cos"].mean(), "o-", ms=3, color=f"C{i}",
                     label=f"{names.get(q, q)}, n={int(g['inputs'].iloc[0])}")
            axl.fill_between(by["min_cos"].min().index, by["min_cos"].min(), by["mean_cos"].max(), color=f"C{i}",
                             alpha=0.15)
        axl.axhline(0, color="k", lw=0.6)
        axl.set(ylim=(-1, 1.02), xlabel="layer", ylabel="pairwise cosine across inputs")
        axl.set_title("line: mean over pairs and kv-heads\nband: lowest pair to highest kv-head mean", fontsize=8)
        axl.legend(fontsize=6)
    return canvas.save_noted(fig, ref, "sink_key_similarity", path, title)


def sink_vs_mean_key(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 5c: cos(k_sink, k_avg) per (layer, kv-head) as a heat map (mean over prompts) and its distribution
    over heads beside the typical key's cos(k_i, k_avg)."""
    title = "Sink key against the mean key, per head (paper Fig. 5c)"
    fig, (ax, axh) = canvas.subplots(2, title, width=5.4, height=4.4)
    df = read_table(SINK_CENTER_CSV.under(results))
    if df is None:
        return canvas.no_data_figure(fig, (ax, axh), SINK_CENTER_CSV.rel, path, title)
    grid = df.groupby(["layer", "kv_head"])["sink_cos_center"].mean().unstack("kv_head")
    im = ax.imshow(grid.to_numpy().T, aspect="auto", vmin=-1, vmax=1, cmap="RdBu_r",
                   extent=(grid.index.min() - 0.5, grid.index.max() + 0.5, grid.columns.max() + 0.5,
                           grid.columns.min() - 0.5))
    fig.colorbar(im, ax=ax, label="cos(k_sink, k_avg)")
    ax.set_yticks(list(grid.columns))
    ax.set(xlabel="layer", ylabel="kv-head")
    ax.set_title(f"mean over {_prompts(df)} prompt(s); k_avg: mean of prompt keys 1..n-1", fontsize=8)
    per_head = sparse_layers(df).groupby(["layer", "kv_head"])[["sink_cos_center", "key_cos_center"]].mean()
    bins = np.linspace(-1, 1, 41)
    axh.hist(per_head["sink_cos_center"], bins, alpha=0.7, color="C3", label="cos(k_sink, k_avg)")
    axh.hist(per_head["key_cos_center"], bins, alpha=0.5, color="C0", label="mean cos(k_i, k_avg), other keys")
    axh.set(xlabel="cosine", ylabel=f"heads ({len(per_head)} of the sparse layers)")
    axh.legend(fontsize=7)
    return canvas.save_noted(fig, ref, "sink_vs_mean_key", path, title)


def value_vs_logit(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 10: ln ‖v_i − o‖ against q·k_i/√d over every visible key of one decode step, one panel per
    (layer, head) of the first prompt (at most 3), the sink marked; Spearman's rho in each title."""
    title = "Distance of each value to the output vs its logit, one decode step (paper Fig. 10)"
    df = read_table(VALUE_OUTPUT_CSV.under(results))
    if df is None:
        fig, axes = canvas.subplots(1, title, width=6, height=4.4)
        return canvas.no_data_figure(fig, axes, VALUE_OUTPUT_CSV.rel, path, title)
    if "prompt" in df:
        df = df[df["prompt"] == df["prompt"].iloc[0]]
    pairs = list(df.groupby(["layer", "head"]).groups)
    pairs = [pairs[round(i * (len(pairs) - 1) / 2)] for i in range(3)] if len(pairs) > 3 else pairs
    fig, axes = canvas.subplots(len(pairs), title, width=4.6, height=4.4)
    for ax, (layer, head) in zip(axes, pairs):
        g = df[(df["layer"] == layer) & (df["head"] == head)]
        sink = truthy(g["is_sink"])
        ax.scatter(g.loc[~sink, "logit"], g.loc[~sink, "log_dist"], s=3, alpha=0.4, color="C0", label="keys")
        ax.scatter(g.loc[sink, "logit"], g.loc[sink, "log_dist"], s=80, marker="*", color="crimson",
                   label="sink (key 0)", zorder=3)
        rho = g["logit"].rank().corr(g["log_dist"].rank())
        ax.set_xlabel("q·k_i / sqrt(d)")
        ax.set_title(f"layer {layer}, head {head}, query at {int(g['query_position'].iloc[0])}; "
                     f"Spearman rho {rho:+.2f}", fontsize=8)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("ln ||v_i - o||")
    return canvas.save_noted(fig, ref, "value_vs_logit", path, title)


def value_norms(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 11: ‖v_i‖ per prompt position (mean over kv-heads) at a few layers of the first prompt, the sink
    marked; and per layer the sink's value norm over the median token's, every prompt."""
    title = "Value norm per token, the sink's marked (paper Fig. 11)"
    fig, (ax, axr) = canvas.subplots(2, title, width=5.8, height=4.4)
    df = read_table(VALUE_NORM_CSV.under(results))
    if df is None:
        return canvas.no_data_figure(fig, (ax, axr), VALUE_NORM_CSV.rel, path, title)
    first = df[df["prompt"] == df["prompt"].iloc[0]] if "prompt" in df else df
    for i, (layer, g) in enumerate(first.groupby("layer")):
        g = g.sort_values("position")
        ax.plot(g["position"], g["value_norm"], lw=0.6, color=f"C{i}", label=f"layer {layer}")
        s = g[truthy(g["is_sink"])]
        ax.plot(s["position"], s["value_norm"], "*", ms=12, color=f"C{i}", mec="k")
    ax.plot([], [], "*", ms=10, color="0.5", mec="k", label="sink (position 0)")
    ax.set_xscale("symlog", linthresh=10)
    ax.set(xlabel="prompt position (symlog)", ylabel="||v_i|| (mean over kv-heads)")
    ax.set_title(f"prompt {first['prompt'].iloc[0] if 'prompt' in first else ''}", fontsize=8)
    ax.legend(fontsize=7)
    by = ["prompt", "layer"] if "prompt" in df else ["layer"]
    sink = df[truthy(df["is_sink"])].groupby(by)["value_norm"].first()
    med = df[~truthy(df["is_sink"])].groupby(by)["value_norm"].median()
    ratio = (sink / med).reset_index(name="ratio")
    for i, (layer, g) in enumerate(ratio.groupby("layer")):
        axr.plot(np.full(len(g), layer), g["ratio"], "o", color="C0", alpha=0.6, label="one prompt" if i == 0 else None)
    axr.axhline(1, color="k", lw=0.8)
    axr.set(yscale="log", xlabel="layer", ylabel="sink's ||v|| / median token's ||v||")
    axr.set_title(f"{_prompts(df)} prompt(s)", fontsize=8)
    axr.legend(fontsize=7)
    return canvas.save_noted(fig, ref, "value_norms", path, title)
