"""Figures of the report (matplotlib, Agg). A figure whose data is missing says so on the figure."""
from __future__ import annotations

from pathlib import Path

import pandas as pd


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def missing(path: Path, title: str, what: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, f"MISSING DATA\n{what}", ha="center", va="center", fontsize=12, color="crimson")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def ruler_per_task(ok: pd.DataFrame, path: Path) -> Path:
    """Grouped bars: score per RULER task for each method (first length)."""
    plt = _plt()
    n = sorted(ok["length"].unique())[0]
    piv = ok[ok["length"] == n].pivot_table(index="task", columns="method", values="score", aggfunc="mean")
    if piv.empty:
        return missing(path, "RULER per task", "no RULER scores")
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(piv)), 3.5))
    width = 0.8 / len(piv.columns)
    for i, method in enumerate(piv.columns):
        ax.bar([x + i * width for x in range(len(piv))], piv[method].fillna(0), width, label=method)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(piv))])
    ax.set_xticklabels([t.removeprefix("ruler/") for t in piv.index], rotation=45, ha="right")
    ax.set_ylabel("score")
    ax.set_ylim(0, 105)
    ax.set_title(f"RULER at {n} tokens")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def kl_grid(df: pd.DataFrame, path: Path) -> Path:
    """Sampled fraction vs L for each K: measured on real keys, the well-spread formula, the paper's Table 9."""
    plt = _plt()
    if df.empty:
        return missing(path, "Sampled fraction for the (K, L) grid", "no grid measurements")
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (K, g) in enumerate(df.groupby("K")):
        color = f"C{i}"
        ax.plot(g["L"], g["measured"], "o-", color=color, label=f"K={K} measured")
        if "formula" in g:
            ax.plot(g["L"], g["formula"], ":", color=color)
        if "paper_table9" in g and g["paper_table9"].notna().any():
            ax.plot(g["L"], g["paper_table9"], "s--", color=color, alpha=0.6, markersize=3)
    ax.set_yscale("log")
    ax.set_xlabel("L")
    ax.set_ylabel("sampled fraction")
    ax.set_title("solid: measured here, dashed: paper Table 9, dotted: p=1/2 formula")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
