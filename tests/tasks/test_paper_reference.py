"""magicpig_tasks.paper finds config/paper_reference.yaml in a checkout, through $MAGICPIG_PAPER_REFERENCE or a
path, and outside a checkout (a non-editable install) fails naming the file and both ways to point to it."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from magicpig_tasks import paper

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_file_is_found(monkeypatch):
    monkeypatch.delenv(paper.ENV, raising=False)
    assert paper.reference_path() == ROOT / "config" / "paper_reference.yaml"
    assert paper.table9()  # read through the same lookup


def test_env_var_and_argument_point_to_a_copy(monkeypatch, tmp_path):
    copy = tmp_path / "ref.yaml"
    shutil.copy(ROOT / "config" / "paper_reference.yaml", copy)
    monkeypatch.setenv(paper.ENV, str(copy))
    assert paper.reference_path() == copy and paper.load() == paper.load(ROOT / "config" / "paper_reference.yaml")
    assert paper.reference_path(ROOT / "config" / "paper_reference.yaml") == ROOT / "config" / "paper_reference.yaml"
    monkeypatch.setenv(paper.ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(FileNotFoundError, match=r"missing\.yaml does not exist \(from \$MAGICPIG_PAPER_REFERENCE\)"):
        paper.load()


def test_outside_a_checkout_the_error_says_how_to_point_to_the_file(tmp_path):
    """paper.py copied into a bare site folder (as a non-editable install lays it out), run elsewhere."""
    site = tmp_path / "site" / "magicpig_tasks"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    shutil.copy(Path(paper.__file__), site / "paper.py")
    code = textwrap.dedent("""
        from magicpig_tasks import paper
        try:
            paper.table9()
        except FileNotFoundError as exc:
            print(exc)
    """)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    message = out.stdout
    assert "config/paper_reference.yaml not found" in message and "MAGICPIG_PAPER_REFERENCE=" in message
    assert "pass its path" in message and str(tmp_path / "site") in message


def test_settings_name_each_tables_block_and_its_cost_columns_add_up():
    """Every table of `settings.tables` resolves to its block of numbers; Tables 1-2's cost rows are (Cost1, Cost2,
    total) with total = Cost1 + Cost2 as the paper prints them, one per row of scores."""
    tables = paper.settings()["tables"]
    assert paper.table_section("table11") == paper.load()["kl_ablation_tables"]["table11"]
    for table in tables:
        assert paper.table_section(table)  # the section path exists
    for table in ("table1", "table2"):
        section = paper.table_section(table)
        for model in tables[table]["runs"].values():
            assert set(section["costs"][model]) == set(section[model])
            for spec, (c1, c2, total) in section["costs"][model].items():
                assert abs(c1 + c2 - total) < 1e-9, (table, model, spec)
    with pytest.raises(ValueError, match=r"settings\.tables: no table 'table8'; tables: table1, "):
        paper.table_section("table8")
