"""Every figure of the report, by file name. ``FIGURES`` is the list the pipeline declares as outputs of
the report rule: ``write_all`` writes each of them on every run (a figure without data says so on itself).

Each figure is drawn beside the paper's number or shape, read from ``config/paper_reference.yaml``."""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Callable

from magicpig.harness.report import plots_accuracy, plots_attention, plots_geometry, plots_sweeps, plots_throughput
from magicpig.harness.report.canvas import FigureResult
from magicpig.harness.result_files import (ATTENTION_MASS_CURVE_PNG, ATTENTION_SPREAD_PNG, CENTERING_PNG,
                                           CENTERING_SWEEP_PNG, CPU_BASELINES_PNG, ERROR_VS_BUDGET_PNG, GEOMETRY_PNG,
                                           KL_GRID_PNG, MAGICPIG_VS_TOPK_COST_PNG, ORACLE_VS_TOPK_BUDGET_PNG,
                                           RULER_PER_TASK_PNG, RULER_VS_COST_PNG, SINK_KEY_SIMILARITY_PNG,
                                           SINK_VS_MEAN_KEY_PNG, SPEEDUP_PAPER_HARDWARE_PNG, THROUGHPUT_BATCH_PNG,
                                           THROUGHPUT_CONTEXT_PNG, TOPK_BUDGET_SWEEP_PNG, VALUE_NORMS_PNG,
                                           VALUE_VS_LOGIT_PNG)

Plot = Callable[[Path, dict, Path], FigureResult]

PLOTS: dict[str, Plot] = {
    RULER_PER_TASK_PNG.name: plots_accuracy.ruler_per_task,
    RULER_VS_COST_PNG.name: plots_accuracy.ruler_vs_cost,
    ATTENTION_SPREAD_PNG.name: plots_attention.attention_spread,
    ERROR_VS_BUDGET_PNG.name: plots_attention.error_vs_budget,
    GEOMETRY_PNG.name: plots_attention.geometry,
    CENTERING_PNG.name: plots_accuracy.centering,
    KL_GRID_PNG.name: plots_attention.kl_grid,
    TOPK_BUDGET_SWEEP_PNG.name: plots_sweeps.topk_budget_sweep,
    ORACLE_VS_TOPK_BUDGET_PNG.name: plots_sweeps.oracle_vs_topk_budget,
    CENTERING_SWEEP_PNG.name: plots_sweeps.centering_sweep,
    MAGICPIG_VS_TOPK_COST_PNG.name: plots_sweeps.magicpig_vs_topk_cost,
    ATTENTION_MASS_CURVE_PNG.name: plots_geometry.attention_mass_curve,
    SINK_KEY_SIMILARITY_PNG.name: plots_geometry.sink_key_similarity,
    SINK_VS_MEAN_KEY_PNG.name: plots_geometry.sink_vs_mean_key,
    VALUE_VS_LOGIT_PNG.name: plots_geometry.value_vs_logit,
    VALUE_NORMS_PNG.name: plots_geometry.value_norms,
    THROUGHPUT_BATCH_PNG.name: plots_throughput.throughput_batch,
    THROUGHPUT_CONTEXT_PNG.name: plots_throughput.throughput_context,
    SPEEDUP_PAPER_HARDWARE_PNG.name: plots_throughput.speedup_paper_hardware,
    CPU_BASELINES_PNG.name: plots_throughput.cpu_baselines,
}

FIGURES: list[str] = list(PLOTS)


def write_all(results: Path | str, out: Path | str, ref: dict,
              gpu_folders: Sequence[Path] | None = None) -> dict[str, FigureResult]:
    """Draw every figure of ``FIGURES`` from the results root into ``out``; returns name -> result.
    ``gpu_folders``: the GPU runs the speed-up figure reads (default: ``results_tree.gpu_run_folders``)."""
    results, out = Path(results), Path(out)
    plots = {**PLOTS, SPEEDUP_PAPER_HARDWARE_PNG.name: partial(plots_throughput.speedup_paper_hardware,
                                                               gpu_folders=gpu_folders)}
    return {name: plot(results, ref, out / name) for name, plot in plots.items()}


def embed(result: FigureResult) -> str:
    """The Markdown line of a figure, with what it lacks."""
    line = f"![{result.title}]({result.name})"
    if result.missing:
        line += "\n\n*Figure `" + result.name + "`: no data for " + ", ".join(f"`{m.splitlines()[0]}`"
                                                                           for m in result.missing) + ".*"
    return line


def embed_all(figs: dict[str, FigureResult] | None, names) -> list[str]:
    """The Markdown lines of the figures ``names`` that ``figs`` (``write_all``'s result) holds, in that order."""
    return [embed(figs[n]) for n in names if figs and n in figs]
