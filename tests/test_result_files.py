"""magicpig.harness.result_files is the one map of result files: no other source file quotes a declared name,
each declared rule is a rule of the workflow, each declared reader uses its entry, and the tables `magicpig
estimate all` writes are the ones declared."""
import re
from pathlib import Path

from magicpig.harness import result_files
from magicpig.harness.estimate_experiments import EXPERIMENTS
from magicpig.harness.families import FAMILIES
from magicpig.harness.result_files import EVAL_RULE_NAMES, EXPERIMENT_FILES, RESULT_FILES, TUNE_KL_JSON, ResultFile

ROOT = Path(__file__).resolve().parents[1]
DECLARING = ROOT / "magicpig" / "harness" / "result_files.py"
WORKFLOW = [ROOT / "Snakefile", *sorted((ROOT / "workflow").rglob("*.smk"))]
SOURCES = [*sorted((ROOT / "magicpig").rglob("*.py")), *sorted((ROOT / "tasks").rglob("*.py")),
           *sorted((ROOT / "workflow").rglob("*.py")), *WORKFLOW]
CONSTANTS = {id(v): k for k, v in vars(result_files).items() if isinstance(v, ResultFile)}


def quoted(file: ResultFile) -> re.Pattern:
    """A string literal ending in ``file``'s name (alone or after a folder: ``"decode.csv"``,
    ``f"{EST}/mass_curve.csv"``); a pattern's placeholders match anything (``f"tune_kl_{tag}.json"``,
    ``"tune_kl_*.json"``)."""
    name = Path(file.name).name
    parts = [re.escape(p) for p in re.split(r"\{[^}]*\}", name)]
    return re.compile(r"(?<![\w.-])" + r"\S*?".join(parts) + r"[\"']")


def test_each_result_file_name_is_spelled_in_one_module():
    found = []
    for path in SOURCES:
        if path == DECLARING or "__pycache__" in path.parts:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {file.name}: {line.strip()}"
                      for file in RESULT_FILES if quoted(file).search(line)]
    assert not found, "declared in magicpig/harness/result_files.py; import it instead:\n" + "\n".join(found)


def test_the_check_finds_a_quoted_name():
    """The scan above would catch a retyped name, with or without a folder, and a pattern's file."""
    decode = result_files.DECODE_CSV
    assert quoted(decode).search('read_csv(results / "throughput" / "decode.csv")')
    assert quoted(decode).search('canvas.no_data(ax, f"{EST}/decode.csv", missing)')
    assert not quoted(decode).search('"decode_predicted.csv"') and not quoted(decode).search("decode.csv is read")
    assert quoted(TUNE_KL_JSON).search('out_dir / f"tune_kl_{tag}.json"')
    assert quoted(TUNE_KL_JSON).search('est.glob("tune_kl_*.json")')


def workflow_rules() -> set[str]:
    """Rule names of the workflow: ``rule NAME:`` and the rows of common.smk's eval job table (``EvalRule("NAME"``
    and the eval rule of each benchmark family, which the table reads from ``families.FAMILIES``)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in WORKFLOW)
    common = (ROOT / "workflow" / "rules" / "common.smk").read_text(encoding="utf-8")
    table = set(re.findall(r'EvalRule\("(\w+)"', common))
    assert "in FAMILIES.values()" in common  # the table has a rule per family
    return set(re.findall(r"^\s*rule (\w+):", text, re.MULTILINE)) | table | {f.rule for f in FAMILIES.values()}


def test_each_declared_rule_is_a_rule_of_the_workflow():
    rules = workflow_rules()
    assert {"bench_decode", "report", "eval_ruler", "ablation_setup"} <= rules
    missing = [(f.name, r) for f in RESULT_FILES for r in f.rules if r not in rules]
    assert not missing, missing
    assert set(EVAL_RULE_NAMES) == {r for r in rules if r.startswith(("eval_", "ablation_", "sweep_"))}


def test_each_declared_reader_uses_its_entry():
    """A reader that no longer reads a file (or never did) is a stale line of the map."""
    stale = []
    for file in RESULT_FILES:
        constant = CONSTANTS[id(file)]
        for reader in file.readers:
            text = (ROOT / reader).read_text(encoding="utf-8")
            if not re.search(rf"\b{constant}\b", text):
                stale.append(f"{reader} does not use {constant}")
    assert not stale, stale


def test_the_experiment_tables_are_the_ones_estimate_writes():
    """`magicpig estimate all` writes, per experiment of its registry, <stem>.csv and <stem>_summary.csv and the
    extra tables it declares (the TopK vs oracle tables, the geometry histograms): together every declared
    experiment table, each written by one experiment."""
    written = [f for e in EXPERIMENTS for f in e.writes]
    assert len(written) == len(set(written)) and set(written) == set(EXPERIMENT_FILES)
    for e in EXPERIMENTS:
        stem = e.name.replace("-", "_")
        assert (e.table.name, e.summary.name) == (f"{stem}.csv", f"{stem}_summary.csv")
    assert any(e.extras for e in EXPERIMENTS)


def test_names_and_paths():
    assert len({(f.folder, f.name) for f in RESULT_FILES}) == len(RESULT_FILES)
    decode = result_files.DECODE_CSV
    assert decode.under("results/cpu") == Path("results/cpu/throughput") / decode.name
    assert decode.rel == f"throughput/{decode.name}" and decode.glob == decode.name
    assert TUNE_KL_JSON.format(target="0.02") == "tune_kl_0.02.json" and TUNE_KL_JSON.glob == "tune_kl_*.json"
