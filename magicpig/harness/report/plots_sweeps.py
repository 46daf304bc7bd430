"""Budget / cost sweep figures on RULER (paper Figs. 1, 6c, 9a, 9b/c) from ``results/<preset>/sweeps/`` (the
``sweeps`` block of the preset) and the RULER runs of ``accuracy/`` at the same (task, length): TopK and oracle
sampling at several budgets, MagicPIG with and without centering at several L, and several (K, L).

Every point is one (task, length, method) run: its mean score with the 95% interval its table cell prints
(``paper_tables.run_level``), at its measured cost2 (fraction of the keys used)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from magicpig.harness.report import canvas
from magicpig.harness.results_tree import SWEEPS, sweep_runs
from magicpig.harness.report.paper_tables import WHISKERS, run_level, whisker
from magicpig.harness.result_files import METRICS


def _line(ax, rows: pd.DataFrame, x: str, style: str, color: str, label: str) -> list[int]:
    """Plot the runs of ``rows`` sorted by ``x``, with the tables' 95% whiskers; returns their sample counts."""
    rows = rows.sort_values(x)
    pts = [run_level(r) for r in rows.itertuples()]
    if not pts:
        return []
    ys = np.array([p.value for p in pts])
    err = np.array([whisker(p.value, p.lo, p.hi) for p in pts]).T
    ax.errorbar(rows[x].astype(float), ys, yerr=err, fmt=style, color=color, capsize=2, ms=4, label=label)
    return [p.n for p in pts]


def _dense_line(ax, runs: pd.DataFrame, task: str, length: int, color: str = "k", label: str = "dense") -> None:
    d = runs[(runs["task"] == task) & (runs["length"] == length) & (runs["family"] == "dense")]
    if not d.empty:
        ax.axhline(run_level(next(d.itertuples())).value, color=color, ls="--", lw=1, label=label)


def _most_runs(rows: pd.DataFrame, column: str) -> int | None:
    """The value of ``column`` with the most of ``rows`` (a sweep's length, its K); None without rows."""
    return None if rows.empty else int(rows.groupby(column).size().idxmax())


def _samples_text(counts: list[int]) -> str:
    counts = sorted(set(counts))
    return "samples per point: " + ("-".join(str(c) for c in (counts[0], counts[-1])) if len(counts) > 1
                                    else str(counts[0] if counts else 0))


def _budgets_text(rows: pd.DataFrame) -> str:
    return ", ".join(f"{b:g}" for b in sorted(rows["budget"].dropna().astype(float).unique()))


def _short(task: str) -> str:
    return task.removeprefix("ruler/")


def _family_tasks(runs: pd.DataFrame, length: int, words: tuple[str, ...]) -> list[str]:
    """The tasks at ``length`` whose names contain one of ``words`` (niah, cwe, fwe), in that order."""
    tasks = sorted(runs.loc[runs["length"] == length, "task"].unique())
    return [t for w in words for t in tasks if w in _short(t)]


def _score_panel(ax, xlabel: str, task: str, length: int, counts: list[int], log_x: bool = True) -> None:
    """A panel of scores (0-100) of one task: its x axis (log unless ``log_x`` is false), a title naming the
    task, the length and the samples per point, and the legend."""
    if log_x:
        canvas.readable_log(ax, "x")
    ax.set(ylim=(-3, 105), xlabel=xlabel)
    ax.set_title(f"{task} at {length}; {_samples_text(counts)}", fontsize=8)
    ax.legend(fontsize=6)


def _save_panels(fig, axes, ref: dict, figure: str, path: Path, title: str) -> canvas.FigureResult:
    """The score label on the first panel, the paper's caption of ``figure``, and the figure saved."""
    axes[0].set_ylabel(f"score ({WHISKERS})", fontsize=8)
    return canvas.save_noted(fig, ref, figure, path, title)


def topk_budget_sweep(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 1: TopK accuracy vs the fraction of keys it keeps, per task (NIAH, CWE, FWE), dense dashed."""
    title = "TopK accuracy vs fraction of keys (paper Fig. 1)"
    fig, (ax,) = canvas.subplots(1, title, width=7.5, height=4.8)
    runs = sweep_runs(results)
    length = _most_runs(runs[runs["family"] == "topk"], "length")
    tasks = [] if length is None else _family_tasks(runs, length, ("niah", "cwe", "fwe"))
    topk = runs[(runs["family"] == "topk") & (runs["length"] == length)]
    if topk.empty or not tasks:
        return canvas.no_data_figure(fig, [ax], f"{SWEEPS}/ruler/*/*/topk@*/{METRICS.name}", path, title)
    counts = []
    for i, task in enumerate(tasks):
        counts += _line(ax, topk[topk["task"] == task], "cost", "o-", f"C{i}", f"TopK, {_short(task)}")
        _dense_line(ax, runs, task, length, f"C{i}", f"dense, {_short(task)}")
    canvas.lacks(fig, *[f"{SWEEPS}/ruler/{word}*/{length}/topk@*" for word in ("niah", "cwe", "fwe")
                        if not any(word in _short(t) for t in tasks)])
    canvas.readable_log(ax, "x")
    ax.set(ylim=(-3, 105), xlabel="fraction of keys TopK keeps (cost2, measured)", ylabel=f"score at {length} tokens")
    ax.set_title(f"TopK budgets {_budgets_text(topk)} (< 1: fraction, >= 1: keys); {_samples_text(counts)}; "
                 f"{WHISKERS}", fontsize=7)
    ax.legend(fontsize=7, ncol=2)
    return canvas.save_noted(fig, ref, "topk_budget_sweep", path, title)


def oracle_vs_topk_budget(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 6c: oracle sampling against TopK, accuracy vs budget, one panel per task; the paper's ~32 keys of
    16K marked, and 32 keys at the length run here."""
    title = "Oracle sampling vs TopK: accuracy vs budget (paper Fig. 6c)"
    runs = sweep_runs(results)
    length = _most_runs(runs[runs["family"] == "oracle"], "length")
    tasks = [] if length is None else _family_tasks(runs, length, ("niah", "cwe", "fwe"))
    fig, axes = canvas.subplots(max(1, len(tasks)), title, width=4.6, height=4.4)
    if not tasks:
        return canvas.no_data_figure(fig, axes, f"{SWEEPS}/ruler/*/*/oracle@*/{METRICS.name}", path, title)
    keys_16k = ref.get("ablations", {}).get("oracle_sampling_unique_keys_16k")
    for ax, task in zip(axes, tasks):
        at = runs[(runs["task"] == task) & (runs["length"] == length)]
        counts = []
        for i, fam in enumerate(("topk", "oracle")):
            rows = at[at["family"] == fam]
            if rows.empty:
                canvas.no_data(ax, f"{SWEEPS}/{task}/{length}/{fam}@*")
                break
            counts += _line(ax, rows, "cost", "o-" if fam == "topk" else "s-", f"C{i}",
                            f"{'TopK' if fam == 'topk' else 'oracle sampling'} ({_budgets_text(rows)})")
        else:
            _dense_line(ax, runs, task, length)
            ax.axvline(32 / length, color="0.4", ls=":", lw=1, label=f"32 keys of {length}")
            if keys_16k:
                ax.axvline(keys_16k / 16384, color="crimson", ls=":", lw=1,
                           label=f"paper: ~{keys_16k} keys of 16K (oracle keeps accuracy)")
            _score_panel(ax, "cost2: fraction of keys used (oracle: distinct draws)", _short(task), length, counts)
    return _save_panels(fig, axes, ref, "oracle_vs_topk_budget", path, title)


def centering_sweep(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 9a: MagicPIG with and without centering at several L (K fixed) on NIAH and FWE, and the sampled
    fraction of each run (the paper's < 0.1% without centering)."""
    title = "Centering on / off across L (paper Fig. 9a)"
    runs = sweep_runs(results)
    mp = runs[runs["family"] == "magicpig"]
    off = mp[mp["centering"] == False]  # noqa: E712 (a column of bools and None)
    length = _most_runs(off, "length")
    K = _most_runs(off[off["length"] == length], "K")
    # the NIAH / FWE tasks with an uncentered run (the accuracy tree's RULER runs add centered points only)
    swept = set(off.loc[off["length"] == length, "task"]) if length is not None else set()
    tasks = [] if length is None else [t for t in _family_tasks(runs, length, ("niah", "fwe")) if t in swept]
    fig, axes = canvas.subplots(max(2, len(tasks)) + 1, title, width=4.4, height=4.4)
    paper = ref.get("ablations", {}).get("no_centering", {})
    if not tasks:
        return canvas.no_data_figure(fig, axes, f"{SWEEPS}/ruler/{{niah,fwe}}*/*/magicpig@*centering-false*", path,
                                     title)
    grid = mp[(mp["length"] == length) & (mp["K"] == K)]
    axf = axes[-1]
    for j, (ax, task) in enumerate(zip(axes, tasks)):
        at = grid[grid["task"] == task]
        counts = []
        for on, style, color, name in ((True, "o-", "C0", "centered"), (False, "s--", "C3", "not centered")):
            rows = at[at["centering"] == on]
            if rows.empty:
                canvas.lacks(fig, f"{SWEEPS}/{task}/{length}/magicpig K={K} {name}")
                continue
            counts += _line(ax, rows, "L", style, color, name)
            if j == 0:
                axf.plot(rows.sort_values("L")["L"], rows.sort_values("L")["cost"], style, color=color,
                         label=f"{name} ({_short(task)})")
        _dense_line(ax, runs, task, length)
        key = "niah_accuracy" if "niah" in task else "fwe_accuracy"
        if key in paper:
            ax.axhline(paper[key], color="crimson", ls=":", lw=1, label=f"paper, no centering: {paper[key]:g}")
        _score_panel(ax, f"L (K = {K})", _short(task), length, counts, log_x=False)
    for ax in axes[len(tasks):-1]:
        canvas.no_data(ax, f"{SWEEPS}/ruler/fwe or niah*/{length}")
    if "sampled_fraction_below" in paper:
        axf.axhline(paper["sampled_fraction_below"], color="crimson", ls=":", lw=1,
                    label=f"paper: < {100 * paper['sampled_fraction_below']:g}% without centering")
    canvas.readable_log(axf, "y")
    axf.set(xlabel=f"L (K = {K})", ylabel="sampled fraction (cost2, measured in the run)")
    axf.set_title("keys sampled", fontsize=8)
    axf.legend(fontsize=6)
    return _save_panels(fig, axes, ref, "centering_sweep", path, title)


def magicpig_vs_topk_cost(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Figs. 9b/c: MagicPIG (several (K, L), centered) against TopK (several budgets) on CWE and FWE,
    accuracy vs measured cost2, so equal cost reads off vertically."""
    title = "MagicPIG vs TopK across cost on CWE and FWE (paper Figs. 9b/c)"
    runs = sweep_runs(results)
    mp_all = runs[(runs["family"] == "magicpig") & (runs["centering"] != False)]  # noqa: E712
    length = _most_runs(mp_all, "length")
    fig, axes = canvas.subplots(2, title, width=5.2, height=4.6)
    gains = ref.get("ablations", {}).get("magicpig_vs_topk_16k", {})
    for ax, word in zip(axes, ("cwe", "fwe")):
        tasks = [] if length is None else _family_tasks(runs, length, (word,))
        if not tasks:
            canvas.no_data(ax, f"{SWEEPS}/ruler/{word}/*/{{magicpig,topk}}@*")
            continue
        at = runs[(runs["task"] == tasks[0]) & (runs["length"] == length)]
        tk, mp = at[at["family"] == "topk"], mp_all[(mp_all["task"] == tasks[0]) & (mp_all["length"] == length)]
        if tk.empty:
            canvas.no_data(ax, f"{SWEEPS}/{tasks[0]}/{length}/topk@*")
            continue
        counts = _line(ax, tk, "cost", "o-", "C0", f"TopK ({_budgets_text(tk)})")
        mp = mp.sort_values("cost")
        counts += _line(ax, mp, "cost", "*", "C2", "MagicPIG (K, L)")
        for r in mp.itertuples():
            ax.annotate(f"({int(r.K)},{int(r.L)})", (r.cost, run_level(r).value), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
        _dense_line(ax, runs, tasks[0], length)
        gain = gains.get(f"{word}_gain_points_up_to")
        if gain is not None:
            ax.plot([], [], " ", label=f"paper (16K): MagicPIG up to +{gain:g} points over TopK at equal cost")
        _score_panel(ax, "cost2: fraction of keys used (measured)", word, length, counts)
    return _save_panels(fig, axes, ref, "magicpig_vs_topk_cost", path, title)
