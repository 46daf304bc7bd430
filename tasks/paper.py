"""The paper's own numbers, read from their one home ``config/paper_reference.yaml``.

Code never types a paper number: the (K, L) settings the paper names, their nominal sampled fractions,
Table 9 and the system figures are looked up here by the setting they belong to (hardware, model,
context, batch, method spec), never by position. The harness (projection, report) and the attention-level
experiments read the same file through these functions.

The file belongs to the repository, not to the installed package: ``reference_path`` finds it (a path given
to a function here, else ``$MAGICPIG_PAPER_REFERENCE``, else the checkout's ``config/`` folder).
"""
from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

ENV = "MAGICPIG_PAPER_REFERENCE"
RELATIVE = Path("config") / "paper_reference.yaml"


def reference_path(path: Path | str | None = None) -> Path:
    """The paper reference file: ``path`` if given, else ``$MAGICPIG_PAPER_REFERENCE``, else
    ``config/paper_reference.yaml`` of the checkout this package is loaded from (an editable install) or of
    the current folder. FileNotFoundError naming the file and how to point to it when none exists."""
    chosen = path or os.environ.get(ENV)
    if chosen:
        if not Path(chosen).is_file():
            raise FileNotFoundError(f"paper reference: {chosen} does not exist"
                                    + ("" if path else f" (from ${ENV})"))
        return Path(chosen)
    candidates = [Path(__file__).resolve().parents[1] / RELATIVE, Path.cwd() / RELATIVE]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"paper reference: {RELATIVE} not found (looked at {', '.join(map(str, candidates))}); "
                            f"this package runs outside the repository checkout: set {ENV}=/path/to/"
                            f"paper_reference.yaml, pass its path, or run from the checkout's root")


@lru_cache(maxsize=4)
def _read(path: str) -> dict:
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _load(path: Path | str | None) -> dict:
    return _read(str(reference_path(path)))


def load(path: Path | str | None = None) -> dict:
    """The whole reference file (a copy: callers may change it freely)."""
    return copy.deepcopy(_load(path))


def kl_settings(group: str, path: Path | str | None = None) -> list:
    """The MagicPIG settings the paper uses in ``group`` (a key of ``kl_settings``: ruler_longbench,
    lm_eval, reasoning, longer_contexts, llama_70b, or ``all``: every distinct one in file order), parsed
    to ``MagicPIG`` methods (their ``K`` and ``L`` are the pair)."""
    from magicpig.methods import parse_method

    groups = _load(path)["kl_settings"]
    if group != "all" and group not in groups:
        raise ValueError(f"kl_settings: no group {group!r}; groups: {', '.join(groups)}, all")
    items = [x for g in groups.values() for x in g] if group == "all" else groups[group]
    specs = list(dict.fromkeys(x["method"] if isinstance(x, dict) else x for x in items))
    return [parse_method(s) for s in specs]


def nominal_costs(path: Path | str | None = None) -> dict[tuple[int, int], float]:
    """(K, L) -> the sampled fraction the paper states for it (its RULER/LongBench settings: ~2% ...)."""
    from magicpig.methods import parse_method

    out = {}
    for item in _load(path)["kl_settings"]["ruler_longbench"]:
        m = parse_method(item["method"])
        out[(m.K, m.L)] = float(item["nominal_cost"])
    return out


def table9(path: Path | str | None = None) -> dict[int, dict[int, float]]:
    """Table 9: measured sampled fraction (a fraction, not percent) by K, then L."""
    t = _load(path)["sampled_fraction_table9"]
    return {int(K): {int(L): float(v) for L, v in zip(t["L"], row)} for K, row in t["K"].items()}


def system_entries(name: str, path: Path | str | None = None) -> list[dict[str, Any]]:
    """The entries of ``system.<name>`` (throughput_speedup, latency_ms_per_token, max_throughput_tokens_per_s),
    each naming its setting; ``baselines`` (what each throughput ratio is over) is a mapping by key."""
    section = _load(path)["system"]
    if name not in section:
        raise ValueError(f"system: no entry {name!r}; entries: {', '.join(section)}")
    return copy.deepcopy(section[name])


def system_value(name: str, value: str, path: Path | str | None = None, **setting) -> float:
    """The one ``value`` of ``system.<name>`` whose entry matches every ``setting`` field given (e.g.
    ``hardware="L20", batch=1``); ValueError when none or several match."""
    hits = [e for e in system_entries(name, path) if all(e.get(k) == v for k, v in setting.items())]
    if len(hits) != 1:
        raise ValueError(f"system.{name}: {len(hits)} entries match {setting} (need exactly one)")
    return float(hits[0][value])


def settings(path: Path | str | None = None) -> dict[str, Any]:
    """The ``settings`` block: how the paper ran each table (RULER tasks and samples, sinks, local window per
    benchmark, MagicPIG's dense layers by layer count) and ``tables``: per table its ``section`` (the block
    holding its numbers), ``runs`` (preset -> the table's model key) and what it states of samples and window."""
    return copy.deepcopy(_load(path)["settings"])


def table_section(table: str, path: Path | str | None = None) -> dict[str, Any]:
    """The block of the reference file holding the numbers of ``table`` (a key of ``settings.tables``, e.g.
    ``table11``), found through its ``section`` path (``kl_ablation_tables.table11``)."""
    tables = _load(path)["settings"]["tables"]
    if table not in tables:
        raise ValueError(f"settings.tables: no table {table!r}; tables: {', '.join(tables)}")
    node = _load(path)
    for part in tables[table]["section"].split("."):
        node = node[part]
    return copy.deepcopy(node)
