"""The package layout: runtime <- tasks <- harness, no import circle, the packaged module list complete.

The import graph is read from the source (every ``import`` statement, also those inside functions), so a lazy
import that points the wrong way fails here even when no test happens to execute it.
"""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"magicpig": ROOT / "magicpig", "magicpig_tasks": ROOT / "tasks"}


def _modules() -> dict[str, Path]:
    """Dotted module name -> source file, for the runtime, the harness and the tasks."""
    found = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``name`` imports (``from pkg import sub`` counts as importing pkg.sub)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names} & modules.keys()
            out |= subs or ({target} & modules.keys())
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name: str) -> str:
    if name.startswith("magicpig_tasks"):
        return "tasks"
    if name.startswith("magicpig.harness") or name == "magicpig.__main__":
        return "harness"
    return "runtime"


def test_dependencies_run_one_way():
    allowed = {"runtime": {"runtime"}, "tasks": {"runtime", "tasks"}, "harness": {"runtime", "tasks", "harness"}}
    wrong = [f"{a} ({_layer(a)}) imports {b} ({_layer(b)})"
             for a, targets in _graph().items() for b in sorted(targets) if _layer(b) not in allowed[_layer(a)]]
    assert not wrong, "\n".join(wrong)


def test_statistics_import_no_report():
    """magicpig.harness.stats holds the statistics the claims table and ``magicpig compare`` share: it imports
    no project module outside itself (in particular nothing of the report), so both call the same pure code."""
    graph = _graph()
    stats = [name for name in graph if name == "magicpig.harness.stats" or name.startswith("magicpig.harness.stats.")]
    assert "magicpig.harness.stats.verdicts" in stats
    wrong = [f"{a} imports {b}" for a in stats for b in sorted(graph[a])
             if not (b == "magicpig.harness.stats" or b.startswith("magicpig.harness.stats."))]
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    graph = _graph()
    # A package's __init__ importing its own submodules is how packages are made, not a circle.
    def edges(a):
        return {b for b in graph[a] if not a.startswith(b + ".")}

    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges(node)):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(cycles)


def test_import_magicpig_loads_no_task_or_harness_module():
    code = textwrap.dedent("""
        import sys
        import magicpig
        from magicpig import Engine, patch, parse_method
        import magicpig.attention, magicpig.cache, magicpig.engine, magicpig.models
        bad = sorted(m for m in sys.modules if m.startswith(("magicpig.harness", "magicpig_tasks", "tasks")))
        print(",".join(bad))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == ""


def test_runtime_works_without_the_harness_dependencies():
    """Patch a tiny model and decode with MagicPIG while snakemake, pandas, matplotlib and datasets are
    unimportable: the runtime must not need them."""
    code = textwrap.dedent("""
        import sys
        for name in ("snakemake", "pandas", "matplotlib", "datasets"):
            sys.modules[name] = None  # as if not installed: `import name` raises, find_spec says absent
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        import magicpig
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        model = LlamaForCausalLM(cfg).eval()
        engine = magicpig.Engine(model)
        ids = torch.randint(0, 64, (1, 300)).tolist()
        out = engine.generate(ids, "magicpig:K=4,L=8,sinks=2,local=8",
                              magicpig.GenerationConfig(max_new_tokens=4))
        assert out[0].new_tokens == 4
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_packaged_module_list_is_the_tree():
    """pyproject.toml lists the packages explicitly (tasks/ is installed as magicpig_tasks): a new folder
    that is not listed would be missing from a non-editable install."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert listed == tree


def test_no_code_imports_the_old_generic_tasks_name():
    offenders = []
    for path in [*ROOT.glob("magicpig/**/*.py"), *ROOT.glob("tasks/**/*.py"), *ROOT.glob("tests/**/*.py"),
                 *ROOT.glob("workflow/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "tasks" or n.startswith("tasks.")]
    assert not offenders, offenders


@pytest.mark.parametrize("top", ["magicpig", "magicpig_tasks"])
def test_packages_import_from_anywhere(top):
    subprocess.run([sys.executable, "-c", f"import {top}"], check=True, cwd="/")
