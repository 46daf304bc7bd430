"""Every figure of the report, by file name. ``FIGURES`` is the list the pipeline declares as outputs of
the report rule: ``write_all`` writes each of them on every run (a figure without data says so on itself).

Each figure is drawn beside the paper's number or shape, read from ``config/paper_reference.yaml``."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from magicpig.harness.report import plots_accuracy, plots_attention, plots_geometry, plots_sweeps, plots_throughput
from magicpig.harness.report.canvas import FigureResult

Plot = Callable[[Path, dict, Path], FigureResult]

PLOTS: dict[str, Plot] = {
    "ruler_per_task.png": plots_accuracy.ruler_per_task,
    "ruler_vs_cost.png": plots_accuracy.ruler_vs_cost,
    "attention_spread.png": plots_attention.attention_spread,
    "error_vs_budget.png": plots_attention.error_vs_budget,
    "geometry.png": plots_attention.geometry,
    "centering.png": plots_accuracy.centering,
    "kl_grid.png": plots_attention.kl_grid,
    "topk_budget_sweep.png": plots_sweeps.topk_budget_sweep,
    "oracle_vs_topk_budget.png": plots_sweeps.oracle_vs_topk_budget,
    "centering_sweep.png": plots_sweeps.centering_sweep,
    "magicpig_vs_topk_cost.png": plots_sweeps.magicpig_vs_topk_cost,
    "attention_mass_curve.png": plots_geometry.attention_mass_curve,
    "sink_key_similarity.png": plots_geometry.sink_key_similarity,
    "sink_vs_mean_key.png": plots_geometry.sink_vs_mean_key,
    "value_vs_logit.png": plots_geometry.value_vs_logit,
    "value_norms.png": plots_geometry.value_norms,
    "throughput_batch.png": plots_throughput.throughput_batch,
    "throughput_context.png": plots_throughput.throughput_context,
    "speedup_paper_hardware.png": plots_throughput.speedup_paper_hardware,
    "cpu_baselines.png": plots_throughput.cpu_baselines,
}

FIGURES: list[str] = list(PLOTS)


def write_all(results: Path | str, out: Path | str, ref: dict) -> dict[str, FigureResult]:
    """Draw every figure of ``FIGURES`` from the results root into ``out``; returns name -> result."""
    results, out = Path(results), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return {name: plot(results, ref, out / name) for name, plot in PLOTS.items()}


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
