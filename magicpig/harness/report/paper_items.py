"""Every table and figure of the paper (arXiv 2410.16179 v4), the one place a report item is declared.

Each ``PaperItem`` names what the paper's item shows, where in the report ours is (the section of
``sections.SECTIONS`` that lists its label, or its own ``section``: the start of a subheading), the report figures
that draw it (names of ``figures.FIGURES``; tests/test_coverage.py checks that every figure belongs to an item) and
``check``: its status from a ``coverage_run.Run`` (the preset's config, the results present), computed at report
time; an item with neither a section nor a figure is reported as not produced by this build. A new figure is named
here, in ``figures.PLOTS`` and in the section that embeds it (CONTRIBUTING.md, "Add a figure").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from magicpig.harness import results_tree
from magicpig.harness.families import FAMILIES
from magicpig.harness.report.coverage_run import (Run, add_gaps, cells_status, not_run, partial, partial_or_reproduced,
                                                  reproduced)
from magicpig.harness.report.tables_kl import kl_table_status
from magicpig.harness.result_files import (ATTENTION_MASS_CURVE_PNG, ATTENTION_SPREAD_PNG, CENTERING_PNG,
                                           CENTERING_SWEEP_PNG, CPU_BASELINES_PNG, DECODE_CSV, ERROR_SUMMARY_CSV,
                                           ERROR_TOPK_VS_ORACLE_CSV, ERROR_VS_BUDGET_PNG, GEOMETRY_PNG,
                                           INPUTS_SIMILARITY_CSV, KL_GRID_PNG, KL_GRID_SUMMARY_CSV,
                                           MAGICPIG_VS_TOPK_COST_PNG, MASS_CURVE_CSV, ORACLE_VS_TOPK_BUDGET_PNG,
                                           PROJECTION_PAPER_HARDWARE_CSV, RULER_PER_TASK_PNG, RULER_VS_COST_PNG,
                                           ResultFile, SINK_CENTER_CSV, SINK_KEY_SIMILARITY_PNG, SINK_VS_MEAN_KEY_PNG,
                                           SPEEDUP_PAPER_HARDWARE_PNG, SPREAD_SUMMARY_CSV, THROUGHPUT_BATCH_PNG,
                                           THROUGHPUT_CONTEXT_PNG, TOPK_BUDGET_SWEEP_PNG, VALUE_NORMS_PNG,
                                           VALUE_NORM_CSV, VALUE_OUTPUT_CSV, VALUE_VS_LOGIT_PNG)

PAPER_MODEL = "Llama-3.1-8B-Instruct"
HUB = {"ruler/qa_1": "SQuAD v2.0 dev", "ruler/qa_2": "HotpotQA dev", "longbench/": "THUDM/LongBench",
       "gsm8k": "openai/gsm8k", "coqa": "stanfordnlp/coqa", "mmlu": "cais/mmlu", "igsm": "infini_igsm"}
LONG_WEIGHTS = "aws-prototyping/MegaBeam-Mistral-7B-512k, princeton-nlp/Llama-3-8B-ProLong-512k-Instruct"


@dataclass(frozen=True)
class PaperItem:
    label: str  # "Table 3", "Figure 5c"
    shows: str  # what the paper's item shows
    section: str | None  # the start of the subheading that holds ours; None: the section listing it (or none)
    figures: tuple[str, ...] = ()
    check: Callable[[Run], str] | None = None  # None: reproduced wherever its section or figure is


# ---- checks -----------------------------------------------------------------------------------------------

def absent(run: Run, runs: Callable[[dict], bool], what: str, *needs: str) -> str:
    """Status when ``what`` is not in the results: this preset runs it (so it has not run yet) or not (``needs``:
    what running it needs)."""
    return partial(f"no {what} in this run yet") if runs(run.config) else not_run(*needs, run.elsewhere(runs))


def _model_note(run: Run) -> str:
    """Why our numbers are not the paper's cells: a different model than the paper's."""
    if PAPER_MODEL.lower() in run.model.lower():
        return ""
    return f"on `{run.model}`, not {PAPER_MODEL} (needs model weights: meta-llama/{PAPER_MODEL}, a GPU)"


def _configured(block: dict) -> bool:
    return bool(block) and bool(block.get("tasks", True)) and block.get("samples", 1) != 0


def _length_note(run: Run, ours: list[int], paper: list[int]) -> str:
    if not ours or set(paper) <= set(ours):
        return ""
    ctx = run.model_context()
    text = f"at {', '.join(map(str, sorted(ours)))} tokens, the paper at {', '.join(map(str, paper))}"
    if ctx is not None and ctx < max(paper):
        text += f" (needs a longer context than `{run.model}` has: {ctx})"
    return text


def benchmark(family: str, lengths: bool = False) -> Callable[[Run], str]:
    """Status of a benchmark family's accuracy table (``families.FAMILIES[family]``): scheduled by the preset's
    block, results under its prefix, the paper's rows (settings) of its table run, skipped tasks with their reason."""
    def check(run: Run) -> str:
        fam = FAMILIES[family]
        block, prefix, table_key = fam.block, fam.prefix, fam.table_key
        if not _configured(run.config.get(block, {})):
            return not_run(run.elsewhere(lambda p: _configured(p.get(block, {}))))
        df = run.rows(lambda t: t == prefix or t.startswith(prefix) and prefix.endswith("/"))
        ok = df[df["status"] == "ok"]
        hub = HUB.get(prefix, "")
        if ok.empty:
            if not df.empty:
                return not_run(f"needs hub data ({hub})" if hub else "every run skipped",
                               str(df["reason"].iloc[0]).splitlines()[0][:120])
            return partial("no results in this run yet")
        missing = []
        skipped = sorted(set(df["task"]) - set(ok["task"]))
        if skipped:
            names = ", ".join(t.split("/")[-1] for t in skipped)
            need = sorted({HUB.get(t, hub) for t in skipped} - {""})
            missing.append(f"{names} skipped" + (f" (needs hub data: {', '.join(need)})" if need else ""))
        paper = results_tree.load_reference().get(table_key) or {}  # a family whose table is not transcribed: {}
        ran = set(ok["method"]) | set(ok["method_effective"])
        not_ran = [s for s in paper.get("llama-3.1-8b-instruct", {}) if results_tree.canonical(s) not in ran]
        if not_ran:
            missing.append("paper settings not run: " + ", ".join(f"`{s}`" for s in not_ran))
        if lengths:
            missing.append(_length_note(run, sorted(ok["length"].unique().tolist()), paper["lengths"]))
        missing.append(_model_note(run))
        return partial_or_reproduced(*missing)
    return check


def table3(run: Run) -> str:
    status = benchmark("ruler", lengths=True)(run)
    others = [m for m in results_tree.load_reference()["ruler_table3"] if m not in ("lengths", PAPER_MODEL.lower())]
    if not others or any(m.split("-")[0] in run.model.lower() for m in others):
        return status
    return add_gaps(status, f"the {', '.join(others)} rows need model weights ({LONG_WEIGHTS.split(', ')[0]})")


def table1(run: Run) -> str:
    cols = [f"{name} column: no results in this run (needs hub data: {HUB[task]})"
            for task, name in (("coqa", "COQA"), ("mmlu", "MMLU-CoT"))
            if run.rows(lambda t, task=task: t.startswith(task))["status"].eq("ok").sum() == 0]
    return add_gaps(benchmark("gsm8k")(run), *cols)


def _longest_ruler(p: dict) -> int:
    return max(p.get("ruler", {}).get("lengths") or [0])


def table4(run: Run) -> str:
    needed = 131072
    if _longest_ruler(run.config) >= needed:
        return benchmark("ruler")(run)
    ctx = run.model_context()
    why = [f"needs a longer context than `{run.model}` has ({ctx} tokens; the paper 128K-256K)"] \
        if ctx is not None and ctx < needed else []
    return not_run(*why, f"needs model weights ({LONG_WEIGHTS})",
                   run.elsewhere(lambda p: _longest_ruler(p) >= needed))


def table5(run: Run) -> str:
    if "70b" in run.model.lower():
        return benchmark("ruler", lengths=True)(run)
    return not_run("needs model weights (meta-llama/Llama-3.1-70B-Instruct) and GPUs",
                   run.elsewhere(lambda p: "70b" in str(p.get("model", "")).lower()))


def table6(run: Run) -> str:
    df = run.rows(lambda t: "igsm" in t)
    if (df["status"] == "ok").any():
        return partial_or_reproduced(_model_note(run))
    if not df.empty:
        return not_run(f"needs hub data ({HUB['igsm']})", str(df["reason"].iloc[0]).splitlines()[0][:120])
    return absent(run, lambda p: _configured(p.get("reasoning") or {}), "infini_igsm results",
                  f"needs hub data ({HUB['igsm']})")


def table7(run: Run) -> str:
    df = run.csv(DECODE_CSV.rel)
    if df is None:
        return absent(run, lambda p: bool(p.get("decode_bench")), f"`{DECODE_CSV.rel}`")
    # the (K, L) settings measured: MagicPIG rows that fit
    settings = {str(m) for m, f in zip(df["method"], df.get("fits", [True] * len(df)))
                if str(m).startswith("magicpig") and str(f).lower() != "false"}
    all_six = [f"`{name}`" for name, preset in run.presets.items() if name != run.preset and sum(
        str(m).startswith("magicpig") for m in (preset.get("decode_bench") or {}).get("methods", [])) >= 6]
    missing = [f"{len(settings)} of the paper's 6 (K, L) settings measured"
               + (f" (preset {', '.join(all_six)} measures all 6)" if all_six else "") if len(settings) < 6 else "",
               "" if run.on_gpu else "measured on this machine's CPU (the paper: an L20 GPU box; needs a GPU)",
               _model_note(run)]
    if not results_tree.load_reference().get("kl_throughput_table7", {}).get("rows"):
        missing.append("the paper's cells are not transcribed (only its Sec. 5 (10, 150) figures)")
    return partial_or_reproduced(*missing)


TABLE8_ROWS = 6  # the paper's Table 8 (App. E.2): three Llama-3.1-8B rows, 70B, CodeLlama-13B and -34B


def table8(run: Run) -> str:
    """Reproduced when the paper's six rows are transcribed and each cell of ours is within the stated
    tolerance (``tables_system.table8_cells``); partial otherwise, naming the rows and cells that are not."""
    from magicpig.harness.report.tables_system import table8_cells

    return cells_status(table8_cells(results_tree.load_reference()), TABLE8_ROWS,
                        "computed from model shapes by formula, no measurement")


def table9(run: Run) -> str:
    df = run.csv(KL_GRID_SUMMARY_CSV.rel)
    if df is None:
        return absent(run, lambda p: bool(p.get("estimation")), f"`{KL_GRID_SUMMARY_CSV.rel}`")
    t9 = results_tree.load_reference()["sampled_fraction_table9"]
    cells = {(int(K), int(L)) for K in t9["K"] for L in t9["L"]}
    have = {(int(r.K), int(r.L)) for r in df.itertuples()} & cells
    return partial_or_reproduced(f"{len(have)} of the {len(cells)} cells measured" if len(have) < len(cells) else "",
                                 _model_note(run))


def kl_table(key: str, models: str = "") -> Callable[[Run], str]:
    """Tables 10-13: the paper's (K, L) settings measured by the preset's (K, L) grid (``tables_kl``);
    ``models``: the weights the table's cells need when they are not the paper's main model."""
    def check(run: Run) -> str:
        note = _model_note(run) if not models else (
            "" if any(m.lower() in run.model.lower() for m in models.split(", "))
            else f"on `{run.model}`, not {models} (needs model weights: {models})")
        return kl_table_status(run, key, note)
    return check


PAPER_ATTENTION_LENGTH = 16384  # Fig. 3 "16k total context", Fig. 4 "a KV-cache of 16k tokens", Fig. 6 "16k"
CAPTURE_NAME = re.compile(r"capture_(\d+)_p\d+")


def capture_lengths(run: Run, df) -> tuple[list[int], str]:
    """The context lengths the attention-level experiments ran at, from the capture files' names
    (``capture_<length>_p<i>``) and the ``prompt`` column of ``df``, else the preset's ``estimation.length`` (noted)."""
    names = [p.name for p in (run.results / "estimation" / "captures").glob("capture_*")]
    if "prompt" in df.columns:
        names += df["prompt"].astype(str).tolist()
    lengths = sorted({int(m.group(1)) for n in names if (m := CAPTURE_NAME.search(n))})
    if lengths:
        return lengths, ""
    configured = (run.config.get("estimation") or {}).get("length")
    return ([int(configured)], " (the preset's `estimation.length`; no capture file found)") if configured \
        else ([], "")


def estimation(file: ResultFile) -> Callable[[Run], str]:
    """An attention-level figure from the estimation table ``file``: partial when drawn from one capture or at
    another length than the paper's 16K (the status names the length the captures have)."""
    def check(run: Run) -> str:
        df = run.csv(file.rel)
        if df is None:
            return absent(run, lambda p: bool(p.get("estimation")), f"`{file.rel}`")
        if "inputs" in df.columns:  # drawn over many short inputs (Fig. 5a/b), not over captured prompts
            return partial(_model_note(run)) if _model_note(run) else reproduced("over short inputs, as the paper's")
        lengths, source = capture_lengths(run, df)
        if "prompt" in df.columns:
            captures = df["prompt"].nunique()
        elif "prompts" in df.columns:  # a summary over the captures
            captures = int(df["prompts"].max())
        else:
            captures = df["capture"].nunique() if "capture" in df.columns else 1
        length = (_length_note(run, lengths, [PAPER_ATTENTION_LENGTH]).replace(" tokens,", f" tokens{source},", 1)
                  if lengths else "capture length unknown (no capture file, no `estimation.length`)")
        gaps = [length, f"from {captures} capture (one prompt; the paper's units are prompts)" if captures < 2 else "",
                _model_note(run)]
        if any(gaps):
            return partial(*gaps)
        return reproduced(f"at {', '.join(str(n) for n in lengths)} tokens, the paper's length")
    return check


def centering(run: Run) -> str:
    if not run.config.get("ablations", {}).get("centering_methods"):
        return not_run(run.elsewhere(lambda p: bool(p.get("ablations", {}).get("centering_methods"))))
    sweep_ls = ((run.config.get("sweeps") or {}).get("centering") or {}).get("L") or []
    one_l = "" if len(sweep_ls) >= 2 else "at one (K, L); the paper varies L (a `sweeps.centering` block varies it)"
    return partial_or_reproduced(one_l, _model_note(run))


def throughput(model: str, context: int, hardware: str) -> Callable[[Run], str]:
    """Fig. 8 panels: measured here (CPU or GPU), a GPU run of ``make gpu-check``, or the labelled projection."""
    def check(run: Run) -> str:
        found = (results_tree.read_csv(p) for p in run.results.glob(f"{DECODE_CSV.folder}/**/{DECODE_CSV.name}"))
        frames = [f for f in found if f is not None]
        measured = any("model" in f and f["model"].astype(str).str.contains(model, case=False, regex=False).any()
                       for f in frames)
        if measured and run.on_gpu:
            return partial_or_reproduced(f"on this run's GPU, not the paper's {hardware}" if hardware else "")
        if run.csv(PROJECTION_PAPER_HARDWARE_CSV.rel) is None and not frames:
            return absent(run, lambda p: bool(p.get("decode_bench")), "throughput results")
        return partial(f"{model} at {context} on {hardware}: a bandwidth-model projection here, not a measurement "
                       "(needs a GPU; `make gpu-check`)" + (", GPU runs shown" if run.gpu_folders else ""),
                       "measured on this machine's CPU" + ("" if measured else f" for `{run.model}` only"))
    return check


def sweep(run: Run) -> str:
    """A budget / cost sweep figure (Figs. 1, 6c, 9a, 9b/c): run by the preset's ``sweeps`` block at its
    length; without one the figure shows only the RULER runs' single budgets."""
    block = run.config.get("sweeps") or {}
    if not block.get("tasks"):
        elsewhere = run.elsewhere(lambda p: bool((p.get("sweeps") or {}).get("tasks")))
        ruler = run.rows(lambda t: t.startswith("ruler/"))
        if ruler["method"].astype(str).str.startswith(("topk", "oracle")).any():
            return partial("no budget sweep in this preset: the RULER runs' budgets only", elsewhere)
        return not_run(elsewhere)
    length = int(block.get("length") or _longest_ruler(run.config))
    return partial_or_reproduced(_length_note(run, [length], [16384]), _model_note(run))


def diagram(what: str) -> Callable[[Run], str]:
    """A diagram of the paper: no data to reproduce; ``what`` says what it draws and where ours touches it."""
    return lambda run: not_run(f"a diagram, no data: {what}")


# ---- the registry -----------------------------------------------------------------------------------------

ITEMS: tuple[PaperItem, ...] = (
    PaperItem("Table 1", "lm-eval accuracy (GSM8K-CoT, COQA, MMLU-CoT): full, MagicPIG (10,220)/(8,90), Quest",
              None, check=table1),
    PaperItem("Table 2", "LongBench accuracy on 6 tasks: full, MagicPIG (10,150)/(8,75), Quest (16,0.05)",
              None, check=benchmark("longbench")),
    PaperItem("Table 3", "RULER 13-task average at 16K-96K: full, MagicPIG, Quest (Llama-3.1-8B, MegaBeam-7B)",
              None, (RULER_PER_TASK_PNG.name, RULER_VS_COST_PNG.name), table3),
    PaperItem("Table 4", "RULER at 16K-256K on 512K-context models (MegaBeam-Mistral-7B, ProLong-8B): full, MagicPIG, Quest",
              None, check=table4),
    PaperItem("Table 5", "RULER on Llama-3.1-70B-Instruct at 16K-96K: full vs MagicPIG (10,150), (9,110), (9,120)",
              None, check=table5),
    PaperItem("Table 6", "reasoning (infini_igsm) accuracy: full vs MagicPIG (10,300), (10,220), (10,150)",
              None, check=table6),
    PaperItem("Table 7", "(K, L) against ms/token at batch 1, max throughput, throughput under 200 ms/token",
              None, (CPU_BASELINES_PNG.name,), check=table7),
    PaperItem("Table 8", "LSH overhead, six rows (Llama-3.1-8B at 96K/64K incl. (11,300), 70B, CodeLlama-13B/34B): "
              "projectors (KB), hash tables (GB), CO (projection over linear-layer compute, %)", None, check=table8),
    PaperItem("Table 9", "measured sampled fraction B/n over K = 7..11, L = 75..300 (Llama-3.1-8B)",
              "Sampled fraction", (KL_GRID_PNG.name,), table9),
    PaperItem("Table 10", "RULER on MegaBeam-7B at 16K-256K: (11,300) beats (10,150) at the same ~2% cost",
              None, check=kl_table("table10", "MegaBeam-Mistral-7B-512k")),
    PaperItem("Table 11", "RULER at 64K, 8B and 70B: full, (10,150), (10,135), (9,120), (9,110)", None,
              check=kl_table("table11", "Llama-3.1-8B-Instruct, Llama-3.1-70B-Instruct")),
    PaperItem("Table 12", "RULER at 16K with cost fixed at ~4%: (10,240), (9,120), (8,65), (7,35)", None,
              check=kl_table("table12")),
    PaperItem("Table 13", "RULER at 16K with L = 120: K = 10, 9, 8, 7 and their costs", None,
              check=kl_table("table13")),
    PaperItem("Figure 1", "exact TopK accuracy against the fraction of keys: fine on NIAH, degrades on CWE, FWE",
              None, (TOPK_BUDGET_SWEEP_PNG.name,), sweep),
    PaperItem("Figure 2a", "long-tailed attention: mass covered by the top keys against the fraction kept (the "
              "paper: top 20% covers only 70-80% in some layers)", None, (ATTENTION_MASS_CURVE_PNG.name,),
              estimation(MASS_CURVE_CSV)),
    PaperItem("Figure 2b", "the attention sink reshapes sparsity: attention looks sparser with the sink, spreads "
              "more evenly without it (top-key mass with vs without the sink)", "Attention spread",
              (ATTENTION_SPREAD_PNG.name,), estimation(SPREAD_SUMMARY_CSV)),
    PaperItem("Figure 2c", "the geometry of attention (a diagram): the sink key opposite the keys' narrow cone, "
              "queries near the sink key", None,
              check=diagram("Fig. 5 and `geometry.png` measure the angles it draws (Figure 5c's row)")),
    PaperItem("Figure 3", "TopK vs sampling at 16K total context: oracle sampling's relative output error up to 4x "
              "lower than TopK's (Sec. 1, Sec. 3.2)", "Relative output error",
              (ERROR_VS_BUDGET_PNG.name,), estimation(ERROR_TOPK_VS_ORACLE_CSV)),
    PaperItem("Figure 4", "TopK's relative output error against its budget, KV cache of 16K tokens (15-20% where "
              "the top 20% keys cover 70-80% of the mass, Sec. 3.1)", "Relative output error",
              (ERROR_VS_BUDGET_PNG.name,), estimation(ERROR_SUMMARY_CSV)),
    PaperItem("Figure 5a", "the sink key's direction across 32 random inputs: mutual cosine > 0.99", None,
              (SINK_KEY_SIMILARITY_PNG.name,), estimation(INPUTS_SIMILARITY_CSV)),
    PaperItem("Figure 5b", "the key mean's direction across 50 sentences: mutual cosine > 0.9", None,
              (SINK_KEY_SIMILARITY_PNG.name,), estimation(INPUTS_SIMILARITY_CSV)),
    PaperItem("Figure 5c", "per head: cosine of the sink key and the key mean, between -0.9 and -0.8", "Geometry",
              (GEOMETRY_PNG.name, SINK_VS_MEAN_KEY_PNG.name), estimation(SINK_CENTER_CSV)),
    PaperItem("Figure 6a", "oracle sampling vs TopK: relative output error against the budget at 16K (left panel); "
              "TopK crosses below only past a large budget (~12K)", "TopK vs oracle",
              (ERROR_VS_BUDGET_PNG.name,), estimation(ERROR_TOPK_VS_ORACLE_CSV)),
    PaperItem("Figure 6b", "the same comparison on a second example (middle panel): oracle sampling's error well "
              "below TopK's at small budgets", "TopK vs oracle", (ERROR_VS_BUDGET_PNG.name,),
              estimation(ERROR_TOPK_VS_ORACLE_CSV)),
    PaperItem("Figure 6c", "downstream accuracy of oracle sampling vs TopK against the fraction of keys: oracle "
              "keeps accuracy at 0.002% of 16K (~32 keys)", None, (ORACLE_VS_TOPK_BUDGET_PNG.name,), sweep),
    PaperItem("Figure 7a", "memory hierarchy (a diagram): GPU VRAM fast and small, CPU DRAM large at 100-200 GB/s, "
              "PCIe narrow", None, check=diagram("the bandwidth model of `magicpig.harness.projection` uses these "
                                                  "memories' bandwidths")),
    PaperItem("Figure 7b", "MagicPIG's workload split (a diagram): linear layers and hashing on the GPU, hash tables "
              "and sampled attention on the CPU", None, check=diagram("the offload backend implements this split")),
    PaperItem("Figure 8a", "throughput vs batch, A100, CodeLlama-34B, 16K: MagicPIG 1.5x GPU-only full attention",
              None, (THROUGHPUT_BATCH_PNG.name, SPEEDUP_PAPER_HARDWARE_PNG.name),
              throughput("codellama-34b", 16384, "A100")),
    PaperItem("Figure 8b", "throughput vs batch, L20, CodeLlama-13B, 16K: MagicPIG 5.0x",
              None, (THROUGHPUT_BATCH_PNG.name, SPEEDUP_PAPER_HARDWARE_PNG.name),
              throughput("codellama-13b", 16384, "L20")),
    PaperItem("Figure 8c", "simulated RTX 4090, Llama-3.1-8B, 96K: 54 ms/token at batch 1, up to 3.3x over full "
              "attention on the CPU at a theoretical 150 GB/s (Sec. 5.2, Baselines)",
              None, (THROUGHPUT_CONTEXT_PNG.name, SPEEDUP_PAPER_HARDWARE_PNG.name),
              throughput("llama-3.1-8b", 98304, "RTX 4090 (simulated)")),
    PaperItem("Figure 9a", "centering on/off: without it NIAH ~ 0, FWE ~ 65, under 0.1% of keys sampled",
              "Centering on", (CENTERING_PNG.name, CENTERING_SWEEP_PNG.name), centering),
    PaperItem("Figure 9b", "MagicPIG vs exact TopK on CWE across cost: MagicPIG up to 3 points higher",
              None, (MAGICPIG_VS_TOPK_COST_PNG.name,), sweep),
    PaperItem("Figure 9c", "MagicPIG vs exact TopK on FWE across cost: MagicPIG up to 8 points higher",
              None, (MAGICPIG_VS_TOPK_COST_PNG.name,), sweep),
    PaperItem("Figure 10", "log |v_i - o| against q·k_i/√d in one decode step: the former fluctuates far less",
              None, (VALUE_VS_LOGIT_PNG.name,), estimation(VALUE_OUTPUT_CSV)),
    PaperItem("Figure 11", "value norm ||v_i|| per token: the sink's is much smaller than the others'",
              None, (VALUE_NORMS_PNG.name,), estimation(VALUE_NORM_CSV)),
)
