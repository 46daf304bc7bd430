"""Accuracy figures: RULER per task (our runs of Table 3's settings), RULER average vs cost, and the centering
ablation (Fig. 9a). Whiskers are the tables' 95% intervals (``paper_tables.run_level``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from magicpig.harness.report import canvas
from magicpig.harness.results_tree import canonical, ok_runs, truthy
from magicpig.harness.report.paper_tables import PAPER_MODEL, WHISKERS, paper_rows, run_level, whisker
from magicpig.harness.result_files import CENTERING_SUMMARY_CSV, METRICS
from magicpig.harness.stats.paired import task_average


def ruler_per_task(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Grouped bars per RULER task and method (a panel per context length, at most 4) with the tables' 95%
    intervals; dashed: the paper's Table 3 average of the setting at its first length (it has no per-task cells)."""
    title = "RULER per task: our runs of Table 3's settings (paper: 13-task averages only)"
    ok = ok_runs(results / "accuracy", "ruler/")
    lengths = sorted(ok["length"].unique())[:4]
    fig, axes = canvas.subplots(max(1, len(lengths)), title, width=max(5.5, 0.9 * ok["task"].nunique() + 2))
    if not lengths:  # one panel
        return canvas.no_data_figure(fig, axes, f"accuracy/ruler/*/*/*/{METRICS.name}", path, title)
    paper = paper_rows(ref.get("ruler_table3", {}))
    for ax, n in zip(axes, lengths):
        at = ok[ok["length"] == n]
        tasks = sorted(at["task"].unique())
        methods = list(dict.fromkeys(at["method"]))
        width = 0.8 / len(methods)
        for i, method in enumerate(methods):
            runs = [at[(at["task"] == t) & (at["method"] == method)] for t in tasks]
            ivs = [run_level(next(rows.itertuples())) if len(rows) else None for rows in runs]
            vals = [np.nan if iv is None else iv.value for iv in ivs]
            errs = np.array([(0, 0) if iv is None else whisker(iv.value, iv.lo, iv.hi) for iv in ivs]).T
            xs = np.arange(len(tasks)) + i * width
            ax.bar(xs, np.nan_to_num(vals), width, yerr=errs, capsize=2, label=method, color=f"C{i}")
            canvas.bar_values(ax, xs, vals)
            if method in paper:
                ax.axhline(paper[method][0], color=f"C{i}", ls="--", lw=1)
        ax.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2)
        ax.set_xticklabels([t.removeprefix("ruler/") for t in tasks], rotation=45, ha="right")
        ax.set(ylim=(0, 105), ylabel="score (0-100)")
        ax.set_title(f"ours at {n} tokens" + ("; dashed: paper Table 3 average" if paper else "") + f"\n{WHISKERS}",
                     fontsize=8)
        canvas.legend_below(ax, right=True)
        canvas.paper_note(ax, ref, "ruler_per_task")
    return canvas.save(fig, path, title)


def ruler_vs_cost(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """RULER average (the tables' task average, MOVER over the task intervals) vs measured cost2, one marker
    per (method, length); beside it the paper's Table 3 averages at the settings' nominal cost2."""
    title = "RULER average vs cost (ours | paper Table 3)"
    fig, (ax, axp) = canvas.subplots(2, title)
    ok = ok_runs(results / "accuracy", "ruler/")
    if ok.empty:
        canvas.no_data(ax, f"accuracy/ruler/*/*/*/{METRICS.name}")
    else:
        ntasks = ok["task"].nunique()
        for j, (n, at) in enumerate(ok.groupby("length")):
            for i, (method, g) in enumerate(at.groupby("method", sort=False)):
                parts = [run_level(r) for r in g.drop_duplicates("task").itertuples()]
                iv = task_average(parts)
                sampled = all(pt.n for pt in parts)  # every task has its per-sample scores
                y = iv.value if sampled else g["score"].mean()
                err = [[v] for v in whisker(y, iv.lo, iv.hi)] if sampled else None
                ax.errorbar(g["cost"].mean(), y, yerr=err, fmt="os^vD"[j % 5], color=f"C{i}", capsize=3,
                            label=f"{method} @ {n}" + ("" if g["task"].nunique() == ntasks else " (partial)"))
        canvas.readable_log(ax, "x")
        canvas.fit_single(ax, ok.groupby("method")["cost"].mean(), log=True)
        ax.set_xlabel("cost2: fraction of offloaded keys used (measured)")
        ax.set_ylabel("RULER average (95% CI as in the tables)")
        ax.set_title("ours; whiskers: MOVER over the tasks' intervals", fontsize=9)
        canvas.legend_below(ax, fontsize=6)
    cfg = ref.get("figures", {}).get("ruler_vs_cost", {})
    costs = {canonical(k): v for k, v in cfg.get("nominal_cost2", {}).items()}
    paper = paper_rows(ref.get("ruler_table3", {}))
    lengths = ref.get("ruler_table3", {}).get("lengths", [])
    if not paper or not costs:
        canvas.no_data(axp, "config/paper_reference.yaml: figures.ruler_vs_cost")
    else:
        # one marker per setting, one colour per length: named in the legend, not by text beside the points
        written = {canonical(k): k for k in ref["ruler_table3"].get(PAPER_MODEL, {})}
        settings = sorted((m for m in paper if m in costs), key=lambda m: costs[m])
        marker = {m: "osD^v<>ph*P"[i % 11] for i, m in enumerate(settings)}
        for j, n in enumerate(lengths):
            for m in settings:
                axp.plot(costs[m], paper[m][j], marker[m], color=f"C{j}", mfc="none" if j else None, ms=6)
            axp.plot([], [], "s", color=f"C{j}", label=f"paper {n // 1024}K")
        for m in settings:
            axp.plot([], [], marker[m], color="0.3", mfc="none", label=written.get(m, m))
        canvas.readable_log(axp, "x")
        axp.set_xlabel("nominal cost2 (paper Sec. 5, Table 9)")
        axp.set_title("paper (Llama-3.1-8B-Instruct)")
        canvas.legend_below(axp, ncol=3, fontsize=6)
        canvas.paper_note(axp, ref, "ruler_vs_cost")
    return canvas.save(fig, path, title)


def centering(results: Path, ref: dict, path: Path) -> canvas.FigureResult:
    """Fig. 9a: accuracy per task with / without centering (95% whiskers, the paper's no-centering NIAH and FWE as
    crosses) and the sampled fraction per (K, L) with / without centering (the paper's < 0.1% line)."""
    title = "Centering ablation (paper Fig. 9a)"
    fig, (ax, axf) = canvas.subplots(2, title)
    paper = ref.get("ablations", {}).get("no_centering", {})
    ok = ok_runs(results / "ablations" / "centering", "")
    if ok.empty:
        canvas.no_data(ax, f"ablations/centering/*/{METRICS.name}")
    else:
        tasks = sorted(ok["task"].unique())
        methods = list(dict.fromkeys(ok["method"]))
        width = 0.8 / len(methods)
        for i, method in enumerate(methods):
            for k, t in enumerate(tasks):
                rows = ok[(ok["task"] == t) & (ok["method"] == method)]
                if rows.empty:
                    continue
                iv = run_level(next(rows.itertuples()))
                ax.bar(k + i * width, iv.value, width, yerr=[[v] for v in whisker(iv.value, iv.lo, iv.hi)],
                       capsize=2, color=f"C{i}", label=method if k == 0 else None)
                canvas.bar_values(ax, [k + i * width], [iv.value])
                canvas.zero_marks(ax, [k + i * width], [iv.value], f"C{i}")
        xs = np.arange(len(tasks)) + 0.4 - width / 2
        uncentered = [i for i, m in enumerate(methods) if "centering=false" in m.replace(" ", "")]
        for k, t in enumerate(tasks):  # the paper's no-centering score on our no-centering bar
            x = k + uncentered[0] * width if uncentered else xs[k]
            for key, word in (("niah_accuracy", "niah"), ("fwe_accuracy", "fwe")):
                if word in t and key in paper:
                    ax.plot(x, paper[key], "kx", ms=10, mew=2)
        ax.plot([], [], "kx", label="paper, no centering")
        ax.set_xticks(xs, [t.removeprefix("ruler/") for t in tasks], rotation=30, ha="right")
        ax.set(ylim=(0, 105), ylabel="score (0-100)")
        ax.set_title(WHISKERS, fontsize=7)
        canvas.legend_below(ax, right=True)
    df = canvas.panel_table(results, CENTERING_SUMMARY_CSV, axf)
    if df is not None:
        flag = truthy(df["centering"])
        order = list(dict.fromkeys(f"({k},{l})" for k, l in zip(df["K"], df["L"])))
        xs = np.arange(len(order))
        for on, color, name in ((True, "C0", "centered"), (False, "C3", "not centered")):
            sub = df[flag == on]
            idx = [order.index(f"({k},{l})") for k, l in zip(sub["K"], sub["L"])]
            axf.bar(xs[idx] + (0 if on else 0.4), sub["cost2"], 0.4, color=color, label=name)
            canvas.zero_marks(axf, xs[idx] + (0 if on else 0.4), sub["cost2"], color, "0: no key sampled")
        if "sampled_fraction_below" in paper:
            axf.axhline(paper["sampled_fraction_below"], color="k", ls="--", lw=1,
                        label=f"paper: no centering < {100 * paper['sampled_fraction_below']:g}%")
        axf.set_xticks(xs + 0.2, order)
        canvas.readable_log(axf)
        axf.set(xlabel="(K, L)", ylabel="sampled fraction (sparse layers)")
        canvas.legend_below(axf)
    return canvas.save_noted(fig, ref, "centering", path, title)
