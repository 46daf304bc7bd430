"""Attention-level figures from ``results/<preset>/estimation/`` (written by ``magicpig estimate``):
attention spread (Fig. 2b), output error vs budget (Figs. 3, 4, 6a/b), query/key geometry (Fig. 5) and the
sampled fraction over the (K, L) grid (Table 9)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from magicpig.harness.report import canvas
from magicpig.harness.results_tree import read_table, sparse_layers, truthy
from magicpig.harness.result_files import (ERROR_SUMMARY_CSV, ERROR_TOPK_VS_ORACLE_CSV, GEOMETRY_CSV, GEOMETRY_HIST_CSV,
                                           KL_GRID_SUMMARY_CSV, SPREAD_CSV)

# the per-key cosine distributions Fig. 5 draws (written by `magicpig estimate geometry`)
# its quantities as a reader knows them (c: the mean key)
HIST_LABELS = {"k_cos_sink": "cos(k, sink key)", "k_cos_center": "cos(k, c)", "qk_cos": "cos(q, k)",
               "qk_cos_centered": "cos(q, k - c)"}


def attention_spread(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Top-20% mass per layer with and without the sink (mean over heads), and its spread over heads."""
    title = "Attention spread with and without the sink (paper Fig. 2b)"
    fig, (ax, axh) = canvas.subplots(2, title)
    df = read_table(SPREAD_CSV.under(results))
    if df is None:
        return canvas.no_data_figure(fig, (ax, axh), SPREAD_CSV.rel, path, title)
    frac = float(df["top_frac"].iloc[0])
    by = df.groupby("layer")[["top_mass_with_sink", "top_mass_without_sink", "sink_mass"]].mean()
    ax.plot(by.index, by["top_mass_with_sink"], "o-", label=f"top {frac:.0%} keys, with sink")
    ax.plot(by.index, by["top_mass_without_sink"], "s-", label=f"top {frac:.0%} keys, sink removed")
    ax.plot(by.index, by["sink_mass"], "^:", label="sink mass")
    ax.set(ylim=(0, 1.05), xlabel="layer", ylabel="share of attention mass (mean over heads)")
    canvas.legend_below(ax)
    sp = sparse_layers(df)
    bins = np.linspace(0, 1, 21)
    axh.hist(sp["top_mass_with_sink"], bins, alpha=0.6, label="with sink")
    axh.hist(sp["top_mass_without_sink"], bins, alpha=0.6, label="sink removed")
    axh.set(xlabel=f"mass in the top {frac:.0%} of keys, per head (sparse layers)", ylabel="heads")
    canvas.legend_below(axh)
    return canvas.save_noted(fig, ref, "attention_spread", path, title)


_SETTING = re.compile(r"^(topk|oracle)(@|=)(.+)$")


def error_vs_budget(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Relative output error vs cost2 for TopK, oracle sampling and MagicPIG (sparse-layer means), and
    TopK / oracle error ratio at equal distinct keys per layer, beside the paper's "up to 4x"."""
    title = "Output error vs budget: TopK, oracle sampling, MagicPIG (paper Figs. 3, 4, 6a/b)"
    fig, (ax, axr) = canvas.subplots(2, title)
    abl = ref.get("ablations", {})
    df = canvas.panel_table(results, ERROR_SUMMARY_CSV, ax)
    if df is not None:
        kinds = df["setting"].astype(str).map(lambda s: _SETTING.match(s))
        for i, name in enumerate(("topk", "oracle")):  # at a budget ("@"), and at MagicPIG's key count ("=")
            for sep, style, face, label in (("@", "o-", {}, f"{name} (budget)"),
                                            ("=", "o", {"mfc": "none"}, f"{name} at MagicPIG's key count")):
                g = df[[bool(m and m.group(1) == name and m.group(2) == sep) for m in kinds]].sort_values("cost2")
                ax.plot(g["cost2"], g["rel_error_mean"], style, color=f"C{i}", label=label, **face)
        mp = df[df["setting"].astype(str).str.startswith("magicpig")]
        ax.plot(mp["cost2"], mp["rel_error_mean"], "*", ms=11, color="C2", label="MagicPIG (K, L)")
        for k, r in enumerate(mp.sort_values("cost2").itertuples()):  # labels alternate above / below
            ax.annotate(str(r.setting).removeprefix("magicpig"), (r.cost2, r.rel_error_mean), fontsize=6,
                        xytext=(0, 9 if k % 2 == 0 else -11), textcoords="offset points", ha="center")
        canvas.loglog(ax)
        ax.set(xlabel="cost2 (fraction of keys used, measured)", ylabel="relative output error ||ô-o||/||o|| (mean)")
        canvas.legend_below(ax)
    tv = canvas.panel_table(results, ERROR_TOPK_VS_ORACLE_CSV, axr)
    if tv is not None:
        dense = truthy(tv["dense_in_magicpig"]) if "dense_in_magicpig" in tv else tv["layer"] < 0
        points = axr.scatter(tv.loc[~dense, "unique_keys"], tv.loc[~dense, "topk_over_oracle"],
                             c=tv.loc[~dense, "layer"], cmap="viridis", label="MagicPIG's sparse layers")
        fig.colorbar(points, ax=axr, label="layer", pad=0.02)
        axr.scatter(tv.loc[dense, "unique_keys"], tv.loc[dense, "topk_over_oracle"], c="0.6", marker="x",
                    label="MagicPIG's dense layers")
        axr.axhline(1.0, color="k", lw=0.8)
        up_to = abl.get("topk_vs_oracle_relative_error_ratio_up_to")
        if up_to is not None:
            axr.axhline(up_to, color="crimson", ls="--", lw=1, label=f"paper: TopK error up to {up_to}x oracle's")
        keys = abl.get("oracle_sampling_unique_keys_16k")
        if keys is not None:
            axr.axvline(keys, color="crimson", ls=":", lw=1, label=f"paper: oracle keeps accuracy at ~{keys} keys (16K)")
        canvas.loglog(axr)
        axr.set(xlabel="distinct keys (oracle sampling's unique draws)", ylabel="TopK / oracle error, equal keys")
        canvas.legend_below(axr)
    return canvas.save_noted(fig, ref, "error_vs_budget", path, title)


def geometry(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Per-layer cosines of queries and keys to the sink key and to the key mean, and cos(q, k) before and
    after centering (mean ± std); the per-key distributions need ``estimation/geometry_hist.csv``."""
    title = "Query / key geometry (paper Fig. 5)"
    fig, (ax, axc, axh) = canvas.subplots(3, title, width=4.8)
    df = canvas.panel_table(results, GEOMETRY_CSV, ax, axc)
    if df is not None:
        by = df.groupby("layer").mean(numeric_only=True)
        for col, style in (("q_cos_sink", "o-"), ("k_cos_sink", "s-"), ("q_cos_center", "o--"),
                           ("k_cos_center", "s--")):
            if col in by:
                ax.plot(by.index, by[col], style, ms=3, label=col.replace("_cos_", " · ").replace("center", "key mean c"))
        ax.axhline(0, color="k", lw=0.6)
        ax.set(ylim=(-1, 1), xlabel="layer", ylabel="cosine (mean over kv-heads)")
        canvas.legend_below(ax)
        for col, color, name in (("qk_cos", "C3", "cos(q, k)"), ("qk_cos_centered", "C0", "cos(q, k - c)")):
            if f"{col}_mean" in by:
                m, s = by[f"{col}_mean"], by[f"{col}_std"]
                axc.plot(by.index, m, "o-", ms=3, color=color, label=name)
                axc.fill_between(by.index, m - s, m + s, color=color, alpha=0.2)
        axc.axhline(0, color="k", lw=0.6)
        axc.set(xlabel="layer", ylabel="cosine seen by the hash (mean ± std)")
        canvas.legend_below(axc)
    hist = canvas.panel_table(results, GEOMETRY_HIST_CSV, axh,
                              what=f"{GEOMETRY_HIST_CSV.rel}\n(per-key cosine distribution)")
    # columns: [layer, dense_in_magicpig,] quantity, bin_lo, bin_hi, count; summed over sparse layers
    if hist is not None:
        for i, (q, g) in enumerate(sparse_layers(hist).groupby("quantity", sort=False)):
            g = g.groupby(["bin_lo", "bin_hi"], as_index=False)["count"].sum()
            axh.stairs(g["count"] / max(1, g["count"].sum()), np.append(g["bin_lo"].to_numpy(), g["bin_hi"].iloc[-1]),
                       color=f"C{i}", label=HIST_LABELS.get(str(q), str(q)))
        axh.set(xlabel="cosine", ylabel="share of keys")
        canvas.legend_below(axh)
    return canvas.save_noted(fig, ref, "geometry", path, title)


def kl_grid(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Sampled fraction vs L for each K: measured on real keys, the p = 1/2 formula, and the paper's Table 9
    (from the reference file)."""
    title = "Sampled fraction over (K, L) (paper Table 9)"
    fig, (ax,) = canvas.subplots(1, title, width=6.5, height=4.5)
    df = canvas.panel_table(results, KL_GRID_SUMMARY_CSV, ax)
    t9 = ref.get("sampled_fraction_table9", {})
    Ks = sorted(set(t9.get("K", {})) | (set() if df is None else {int(k) for k in df["K"]}))
    color = {K: f"C{i}" for i, K in enumerate(Ks)}
    if df is not None:
        for K, g in df.groupby("K"):
            i, g = Ks.index(int(K)), g.sort_values("L")
            ax.plot(g["L"], g["measured"], "o-", color=f"C{i}", label=f"K={K} measured")
            if "formula" in g:
                ax.plot(g["L"], g["formula"], ":", color=f"C{i}")
    ax.set(xlabel="L", ylabel="sampled fraction")
    for j, K in enumerate(sorted(t9.get("K", {}))):
        ax.plot(t9["L"], t9["K"][K], "s--", color=color[K], alpha=0.6, ms=3,
                label="paper Table 9 (dashed)" if j == 0 else None)
    canvas.readable_log(ax)
    ax.set_title("solid: measured here, dashed: paper Table 9, dotted: p=1/2 formula", fontsize=8)
    canvas.legend_below(ax, ncol=3)
    return canvas.save(fig, path, title)
