"""Load-time checks of the pipeline config (``config/config.yaml``), so a bad setting fails ``snakemake -n``
instead of a job hours later.

``validate_pipeline_config(config)`` runs the JSON schema (``magicpig/data/pipeline_config.schema.yaml``,
package data) and then what a schema cannot express: method specs and duplicate / equivalent methods, task
names, kernel-bench (K, L) limits, and whether the model exists and its context holds every configured
length. Every problem is named by its config path (``presets.cpu.ruler.lengths[0]``) with the allowed values,
all of them in one ValueError. A usable config comes back with its defaults filled in: the schema's
``default`` values and the ones that follow other fields (``fill_derived_defaults``), so that the rules read
every setting from it and no default is written twice.

Machine-independent checks run on every preset (``--configfile`` merges files, so all presets are loaded
anyway); the model checks only on the selected preset, whose model must exist on this machine. A hub id
that is not in the local Hugging Face cache cannot be checked without the network: it is accepted with a
warning (a GPU box downloads it).
"""
from __future__ import annotations

import copy
import difflib
import math
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from magicpig.harness.families import FAMILIES
from magicpig.names import NAME_PATTERN, TASK_NAME_PATTERN, name_problem, task_name_problem

SCHEMA_FILE = "pipeline_config.schema.yaml"  # in the package's data/ folder
# the schema's name patterns ($defs name, task_name) -> the grammar's own message of a value
NAME_PATTERNS = {NAME_PATTERN: name_problem, TASK_NAME_PATTERN: task_name_problem}
# method lists of the preset blocks other than the benchmark families' (families.FAMILIES: each block's
# `methods`, run by magicpig eval), as config paths below the preset: (block, key, runs magicpig eval)
METHOD_LISTS = (("ablations", "centering_methods", True), ("ablations", "kl_grid", True),
                ("decode_bench", "methods", False))
# a config holds a few thousand values; more is a mistake or a YAML alias bomb (aliases nesting aliases: a
# small file standing for billions of values), refused before anything walks or prints it
MAX_CONFIG_VALUES = 100_000
MAX_PROBLEM_CHARS = 400  # one problem line; a longer one (a huge value quoted back) is cut


def validate_pipeline_config(config: dict, *, warn: Callable[[str], None] | None = None) -> dict:
    """A copy of ``config`` with its defaults filled in, when it is usable; else ValueError listing every
    problem (one line each, by config path). ``warn`` receives what cannot be checked here (default: printed
    to stderr)."""
    warn = warn or (lambda msg: print(f"config warning: {msg}", file=sys.stderr))
    size_problem = config_size_problem(config)
    if size_problem:
        raise ValueError(f"config: 1 problem(s):\n- {size_problem}")
    config = copy.deepcopy(config)
    problems = non_finite_problems(config) or schema_problems(config)
    if not problems:
        problems += methods_module_problems(config["methods_module"])
        problems += data_problems(config["data"], warn)
    if not problems:
        for name, preset in config["presets"].items():
            problems += preset_problems(f"presets.{name}", preset)
            problems += seed_problems(config["seed"], f"presets.{name}", preset)
        selected = config["preset"]
        if selected not in config["presets"]:
            problems.append(f"preset: preset {selected!r} is not one of {sorted(config['presets'])}")
        else:
            problems += model_problems(f"presets.{selected}", config["presets"][selected], warn)
    if problems:
        raise ValueError(f"config: {len(problems)} problem(s):\n" + "\n".join(f"- {_cut(p)}" for p in problems))
    for preset in config["presets"].values():
        fill_derived_defaults(preset)
    return config


def _cut(line: str) -> str:
    return line if len(line) <= MAX_PROBLEM_CHARS else f"{line[:MAX_PROBLEM_CHARS]}... ({len(line)} characters)"


def config_size_problem(config: Any, limit: int = MAX_CONFIG_VALUES) -> str:
    """A problem when ``config`` holds more than ``limit`` values counted as a reader sees them (a value that
    several YAML aliases name counts once per alias); the walk stops at the limit, so it is cheap."""
    count, stack = 0, [config]
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            return (f"(top level): the config holds more than {limit} values (YAML aliases nesting aliases?); "
                    "write each value out")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return ""


def non_finite_problems(node: Any, path: tuple = ()) -> list[str]:
    """NaN or infinite numbers anywhere in the config (YAML reads .nan and .inf), by config path: no setting
    takes one, and NaN passes every bound of the schema (it compares false)."""
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{config_path(path) or '(top level)'}: {node!r} is not a finite number"]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in non_finite_problems(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in non_finite_problems(v, (*path, i))]
    return []


def seed_problems(seed: int, path: str, p: dict) -> list[str]:
    """The seeds the jobs are given stay below 2**63 (the engine's torch generators): a capture of prompt i
    takes seed + i."""
    from magicpig.harness.argcheck import SEED_LIMIT

    top = seed + p["estimation"]["prompts"] - 1
    if top < SEED_LIMIT:
        return []
    return [f"seed: {seed} + {path}.estimation.prompts - 1 = {top} is beyond the largest seed 2**63 - 1; "
            f"allowed: at most {SEED_LIMIT - p['estimation']['prompts']}"]


def fill_derived_defaults(p: dict) -> None:
    """Fill in the preset ``p`` the defaults that follow other fields (the schema's descriptions name them): the
    ablations' and the sweeps' length (``ruler.lengths[0]``) and samples (``ruler.samples``), the centering
    ablation's samples (the ablations'), and each decode_bench shape's methods (the block's)."""
    for block in ("ablations", "sweeps"):
        if block in p:
            p[block].setdefault("length", p["ruler"]["lengths"][0])
            p[block].setdefault("samples", p["ruler"]["samples"])
    p["ablations"].setdefault("centering_samples", p["ablations"]["samples"])
    for shape in p["decode_bench"]["shapes"]:
        shape.setdefault("methods", list(p["decode_bench"]["methods"]))


def methods_module_problems(modules: list[str]) -> list[str]:
    """Import the user's method modules (and the ``magicpig.methods`` entry points), so that the method lists
    may name their methods; a module that does not load is a problem of ``methods_module``."""
    from magicpig.methods.plugins import load_methods

    try:
        load_methods(modules)
    except (ValueError, FileNotFoundError) as exc:
        return [str(exc)]
    except Exception as exc:  # the user's module raised while it was imported
        return [f"methods_module: importing {modules} raised {exc.__class__.__name__}: {exc}"]
    return []


def data_problems(data: dict, warn: Callable[[str], None]) -> list[str]:
    """``data:`` keys must be tasks that read a data file; a file not there (yet) is only a warning: its task
    is skipped until it appears, and the job then reruns."""
    from magicpig_tasks.registry import DATA_TASKS

    out = []
    for task, path in data.items():
        if "{" in path or "}" in path:  # a data file is an eval job's input, where {x} is a wildcard
            out.append(f"data.{task}: {path!r} holds '{{' or '}}', which Snakemake reads as a wildcard in a job's "
                       "input; rename the file or its folder")
        elif task not in DATA_TASKS:
            close = difflib.get_close_matches(task, DATA_TASKS, 1)
            out.append(f"data.{task}: task {task!r} takes no data file"
                       + (f" (did you mean {close[0]!r}?)" if close else "") + f"; tasks with data: {', '.join(DATA_TASKS)}")
        elif not Path(path).is_file():
            warn(f"data.{task}: {path} does not exist; {task} is skipped until it does, then its job reruns")
    return out


def load_schema() -> dict:
    """The pipeline config's JSON schema: package data of ``magicpig`` (its data/ folder), with the block of each
    benchmark family (``families.FAMILIES``)."""
    import yaml

    source = resources.files("magicpig") / "data" / SCHEMA_FILE
    try:
        schema = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"the pipeline config schema {source} is missing from the installed magicpig "
                                "package: it ships as package data (pyproject.toml, [tool.setuptools.package-data] "
                                "data/*.yaml); reinstall magicpig from a complete checkout") from None
    preset = schema["properties"]["presets"]["additionalProperties"]
    for family in FAMILIES.values():  # each benchmark family's block, declared with its family
        preset["properties"][family.block] = copy.deepcopy(family.schema)
        preset["required"] += [] if family.optional else [family.block]
    return schema


def _filling_validator(schema: dict):
    """A Draft 2020-12 validator of ``schema`` that, as it validates an object, sets each property it lacks and
    whose schema has a ``default`` (a copy of that value). The schema keeps its defaults out of ``anyOf``
    branches, which a validator visits whether or not they match."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, subschema):
        if validator.is_type(instance, "object"):
            for name, prop in props.items():
                if "default" in prop and name not in instance:
                    instance[name] = copy.deepcopy(prop["default"])
        yield from check_properties(validator, props, instance, subschema)

    return jsonschema.validators.extend(base, {"properties": properties})(schema)


def schema_problems(config: Any) -> list[str]:
    """The schema's errors as 'config.path: message' lines (unknown keys get the allowed keys); fills the
    schema's defaults into ``config`` as it goes."""
    out = []
    for err in sorted(_filling_validator(load_schema()).iter_errors(config), key=lambda e: list(e.path)):
        msg = err.message
        if err.validator == "additionalProperties" and isinstance(err.schema.get("properties"), dict):
            allowed = sorted(err.schema["properties"])
            extra = [k for k in err.instance if k not in allowed]
            hints = [f"{k!r} -> {m[0]!r}?" for k in extra for m in [difflib.get_close_matches(k, allowed, 1)] if m]
            msg += f"; allowed keys: {', '.join(allowed)}" + (f" (did you mean {', '.join(hints)})" if hints else "")
        elif err.validator == "anyOf":
            msg += "; allowed: " + " or ".join(_describe(s) for s in err.validator_value)
        elif err.validator in ("pattern", "maxLength") and err.schema.get("pattern") in NAME_PATTERNS:
            msg = NAME_PATTERNS[err.schema["pattern"]](err.instance)
            if "propertyNames" in err.schema_path:  # a key of the object at err.path
                msg = f"key {msg}"
        out.append(f"{config_path(err.path) or '(top level)'}: {msg}")
    return out


def _describe(schema: dict) -> str:
    """A one-branch schema in words: {type: integer, minimum: 0} -> 'integer >= 0', {const: all} -> "'all'"."""
    if "const" in schema:
        return repr(schema["const"])
    text = schema.get("type", "value")
    return text + (f" >= {schema['minimum']}" if "minimum" in schema else "")


def config_path(parts) -> str:
    """('presets', 'cpu', 'ruler', 'lengths', 0) -> 'presets.cpu.ruler.lengths[0]'."""
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text


def method_problems(path: str, specs: list[str], *, eval_specs: bool, eval_backend: str = "reference") -> list[str]:
    """Unparsable specs, duplicate / equivalent ones, specs beyond the limits of their backend (``eval_backend``
    for an eval list) and, for an eval list, folder names that two specs would share. ``eval_specs``: the
    list goes to ``magicpig eval``; otherwise to ``bench decode``, which also takes SPEC@BACKEND."""
    from magicpig.backends import BASELINE_BACKENDS, check_backend_limits, parse_spec_at_backend, system_backend
    from magicpig.methods import canonical_spec  # equal for equivalent specs ('magicpig', 'magicpig:K=10,L=150')
    from magicpig.methods import parse_method
    from magicpig.methods.spec_names import check_dirnames

    out, seen = [], {}
    for i, raw in enumerate(specs):
        spec, backend = raw, ""
        if not eval_specs:
            try:
                given = parse_spec_at_backend(raw)
            except ValueError as exc:
                out.append(f"{path}[{i}]: {exc}")
                continue
            spec, backend = given.spec, given.backend
        try:
            key = (canonical_spec(spec), backend)  # one method on two decode backends: two measurements
            method = parse_method(spec)
            runs_on = (backend if backend not in BASELINE_BACKENDS else "reference") or (
                eval_backend if eval_specs else system_backend(method.name))
            if backend in BASELINE_BACKENDS and method.name != "dense":
                raise ValueError(f"backend {backend!r} (stock transformers or llama.cpp) runs 'dense' only")
            check_backend_limits(method, runs_on)
        except ValueError as exc:
            out.append(f"{path}[{i}]: {exc}")
            continue
        if key in seen:
            j = seen[key]
            out.append(f"{path}[{i}]: {raw!r} is the same method as {path}[{j}] {specs[j]!r} "
                       f"(canonical spec {key[0]!r}); list each setting once")
        else:
            seen[key] = i
    if eval_specs and not out:
        try:
            check_dirnames(specs)
        except ValueError as exc:
            out.append(f"{path}: {exc}")
    return out


def preset_problems(path: str, p: dict) -> list[str]:
    """What the schema cannot check in one preset, machine-independent."""
    from magicpig_tasks.registry import TASK_NAMES

    from magicpig.lsh import check_kl, parse_kl

    out = []
    for block, key, eval_specs in method_lists(p):
        out += method_problems(f"{path}.{block}.{key}", p[block][key], eval_specs=eval_specs,
                               eval_backend=p["backend"])
    out += length_method_problems(f"{path}.ruler", p["ruler"], p["backend"])
    out += task_sample_problems(f"{path}.ruler", p["ruler"])
    ruler_names = [t.removeprefix("ruler/") for t in TASK_NAMES if t.startswith("ruler/")]
    if "sweeps" in p:
        out += sweep_problems(f"{path}.sweeps", p["sweeps"])
    for block in [b for b in ("ruler", "ablations", "sweeps") if b in p]:
        for i, task in enumerate(p[block]["tasks"]):
            if task not in ruler_names:
                close = difflib.get_close_matches(task, ruler_names, 1)
                out.append(f"{path}.{block}.tasks[{i}]: unknown RULER task {task!r}"
                           + (f" (did you mean {close[0]!r}?)" if close else "")
                           + f"; tasks: {', '.join(ruler_names)}")
    for i, kl in enumerate(p["kernel_bench"]["kl"]):
        try:
            check_kl(*parse_kl(kl))  # the CPU module's limits: K <= 16 bits per code, K*L hash bits per key
        except ValueError as exc:
            out.append(f"{path}.kernel_bench.kl[{i}]: {kl!r}: {exc}")
    shapes = p["decode_bench"]["shapes"]
    out += shape_problems(f"{path}.decode_bench.shapes", shapes)
    for i, entry in enumerate(shapes):
        out += method_problems(f"{path}.decode_bench.shapes[{i}].methods", entry.get("methods", []), eval_specs=False)
    return out


def method_lists(p: dict) -> list[tuple[str, str, bool]]:
    """The method lists of preset ``p`` as (block, key, runs magicpig eval): the ``methods`` of each benchmark
    family's block that ``p`` has, then ``METHOD_LISTS``."""
    return [(f.block, "methods", True) for f in FAMILIES.values() if f.block in p] + list(METHOD_LISTS)


def ruler_methods_by_length(ruler: dict) -> dict[int, list[str]]:
    """Length -> the method specs RULER runs at it: ``methods``, then those of each ``length_methods`` entry
    naming the length (each spec once, in that order). ``ruler`` has its defaults filled in."""
    out = {int(n): list(ruler["methods"]) for n in ruler["lengths"]}
    for entry in ruler.get("length_methods", []):
        for n in entry["lengths"]:
            if int(n) in out:
                out[int(n)] += [m for m in entry["methods"] if m not in out[int(n)]]
    return out


def ruler_task_samples(ruler: dict) -> dict[str, int]:
    """Task (less ``ruler/``) -> the samples RULER runs of it at each length: its ``task_samples`` entry, else
    ``samples``. ``ruler`` has its defaults filled in."""
    return {t: int(ruler.get("task_samples", {}).get(t, ruler["samples"])) for t in ruler["tasks"]}


def task_sample_problems(path: str, ruler: dict) -> list[str]:
    """Each ``task_samples`` entry names one of the block's ``tasks``."""
    return [f"{path}.task_samples.{t}: {t!r} is not one of {path}.tasks {ruler['tasks']}"
            for t in ruler.get("task_samples", {}) if t not in ruler["tasks"]]


def length_method_problems(path: str, ruler: dict, backend: str) -> list[str]:
    """``ruler.length_methods``: each entry's lengths are RULER lengths, its methods pass ``method_problems``,
    and no length runs one setting twice (``methods`` and the entries naming it, by canonical spec)."""
    from magicpig.methods import canonical_spec

    out = []
    for i, entry in enumerate(ruler.get("length_methods", [])):
        where = f"{path}.length_methods[{i}]"
        out += [f"{where}.lengths[{j}]: {n} is not one of {path}.lengths {ruler['lengths']}"
                for j, n in enumerate(entry["lengths"]) if n not in ruler["lengths"]]
        out += method_problems(f"{where}.methods", entry["methods"], eval_specs=True, eval_backend=backend)
    try:
        base = {canonical_spec(m): f"{path}.methods" for m in ruler["methods"]}
    except ValueError:  # an unparsable spec of `methods`: reported by its own check
        return out
    if out:
        return out
    for n in ruler["lengths"]:
        seen = dict(base)
        for i, entry in enumerate(ruler.get("length_methods", [])):
            for j, spec in enumerate(entry["methods"] if n in entry["lengths"] else []):
                key = canonical_spec(spec)
                if key in seen:
                    out.append(f"{path}.length_methods[{i}].methods[{j}]: {spec!r} is already run at {n} by "
                               f"{seen[key]}; list each setting once per length")
                seen[key] = f"{path}.length_methods[{i}]"
    return out


def shape_problems(path: str, shapes: list[dict]) -> list[str]:
    """Shape-only models of decode_bench.shapes that magicpig/data/model_shapes.yaml does not hold."""
    from magicpig.shapes import shape_names

    known = shape_names()
    return [f"{path}[{i}].model: {s['model']!r} has no stored shape; known: "
            + ", ".join(f"shape:{k}" for k in sorted(known))
            for i, s in enumerate(shapes) if s["model"].removeprefix("shape:") not in known]


def budget_text(budget: float) -> str:
    """A budget as a method spec writes it: 32 -> '32', 0.02 -> '0.02'."""
    return f"{float(budget):g}"


def sweep_methods(sweeps: dict | None) -> list[str]:
    """The method specs of a preset's ``sweeps`` block, in this order, each setting once (equivalent specs,
    e.g. MagicPIG (10, 150) in both the centering grid and ``magicpig_kl``, by canonical spec): dense (the
    reference line), TopK at each budget, oracle sampling at each budget, MagicPIG (K, L) with and without
    centering for each L of ``centering``, then each (K, L) of ``magicpig_kl``. None / no tasks: []. ``sweeps``
    has its defaults filled in (``validate_pipeline_config``)."""
    if not sweeps or not sweeps["tasks"]:
        return []
    from magicpig.lsh import parse_kl
    from magicpig.methods import canonical_spec

    specs = ["dense"]
    specs += [f"topk:budget={budget_text(b)}" for b in sweeps["topk_budgets"]]
    specs += [f"oracle:budget={budget_text(b)}" for b in sweeps["oracle_budgets"]]
    centering = sweeps.get("centering")  # optional: no centering grid
    if centering:
        for L in centering["L"]:
            specs += [f"magicpig:K={centering['K']},L={L}", f"magicpig:K={centering['K']},L={L},centering=false"]
    for kl in sweeps["magicpig_kl"]:
        K, L = parse_kl(kl)
        specs.append(f"magicpig:K={K},L={L}")
    out, seen = [], set()
    for spec in specs:
        try:
            key = canonical_spec(spec)
        except ValueError:  # reported by sweep_problems; kept so the rule and the check see the same list
            key = spec
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def sweep_problems(path: str, sweeps: dict) -> list[str]:
    """Budgets and (K, L) settings of a ``sweeps`` block that no method accepts, by config path."""
    from magicpig.lsh import check_kl, parse_kl
    from magicpig.methods import parse_method

    out = []
    for key, name in (("topk_budgets", "topk"), ("oracle_budgets", "oracle")):
        for i, b in enumerate(sweeps[key]):
            try:
                parse_method(f"{name}:budget={budget_text(b)}")
            except ValueError as exc:
                out.append(f"{path}.{key}[{i}]: {b!r}: {exc}")
    centering = sweeps.get("centering")
    pairs = [(f"{path}.centering.L[{i}]", centering["K"], L) for i, L in enumerate(centering["L"])] if centering else []
    for i, kl in enumerate(sweeps["magicpig_kl"]):
        pairs.append((f"{path}.magicpig_kl[{i}]", *parse_kl(kl)))
    for where, K, L in pairs:
        try:
            check_kl(K, L)
        except ValueError as exc:
            out.append(f"{where}: (K, L) = ({K}, {L}): {exc}")
    return out


def answer_budget(tasks: list[str]) -> int:
    """The largest answer budget (max_new_tokens) of ``tasks`` (unknown names, reported elsewhere, skipped):
    prompt + answer must fit the context."""
    from magicpig_tasks.registry import TASK_NAMES, get_task

    return max((get_task(t).max_new_tokens for t in tasks if t in TASK_NAMES), default=0)


def layer_problems(path: str, p: dict, layers: int | None, label: str) -> list[str]:
    """Methods whose explicit ``dense_layers`` name a layer the preset's model does not have."""
    from magicpig.backends import parse_spec_at_backend
    from magicpig.methods import parse_method

    out = []
    lists = [(f"{block}.{key}", p[block][key]) for block, key, _ in method_lists(p)]
    lists += [(f"ruler.length_methods[{i}].methods", e["methods"])
              for i, e in enumerate(p["ruler"].get("length_methods", []))]
    for where, specs in lists if layers else ():
        block = where.split(".")[0]
        for i, raw in enumerate(specs):
            try:
                spec = parse_spec_at_backend(raw).spec if block == "decode_bench" else raw
                parse_method(spec).dense_layer_set(layers)
            except ValueError as exc:  # an unparsable spec is method_problems' to report
                if "dense_layers" in str(exc):
                    out.append(f"{path}.{where}[{i}]: {exc} ({label})")
    return out


def model_problems(path: str, p: dict, warn: Callable[[str], None]) -> list[str]:
    """The selected preset's model exists, its context holds every configured length and its layers every
    method's dense_layers."""
    from magicpig.models import model_facts

    try:
        facts, label = model_facts(p["model"])
    except (ValueError, OSError) as exc:
        return [f"{path}.model: {exc}"]
    if facts is None:
        warn(f"{path}.model: {label}; the lengths and dense_layers are not checked against it")
        return []
    context = facts["context"]
    out = layer_problems(path, p, facts["layers"], label)
    # RULER's lengths (the first one is also the ablations' and the sweeps' unless they set one); a benchmark block
    # that does not run is not checked
    sweep_tasks = p["sweeps"]["tasks"] if "sweeps" in p else []
    ruler_tasks = [f"ruler/{t}" for t in p["ruler"]["tasks"] + p["ablations"]["tasks"] + sweep_tasks]
    budget = answer_budget(ruler_tasks)
    checks = [(f"{path}.ruler.lengths[{i}]", n, budget) for i, n in enumerate(p["ruler"]["lengths"])]
    for block in ("ablations", "sweeps"):
        if "length" in p.get(block, {}):  # set in the config (else ruler.lengths[0], checked above)
            checks.append((f"{path}.{block}.length", p[block]["length"], budget))
    blocks = [(f.block, f.task_names(p[f.block])) for f in FAMILIES.values() if f.block in p and not f.per_length]
    for block, tasks in blocks:
        if tasks and (p[block]["samples"] == "all" or p[block]["samples"] > 0):
            checks.append((f"{path}.{block}.max_length", p[block]["max_length"], answer_budget(tasks)))
    checks.append((f"{path}.estimation.length", p["estimation"]["length"], 0))  # a prefill, no answer
    # decode_bench.lengths are not checked: a throughput run may tile a cache beyond the trained context
    for where, n, budget in checks:
        if n + budget > context:
            answer = f" + {budget} answer tokens" if budget else ""
            out.append(f"{where}: {n}{answer} is beyond the context of {p['model']!r} ({context} tokens, {label}); "
                       f"allowed: at most {context - budget}")
    return out


# the pipeline's config files belong to the repository, not to the installed package: the checkout this package
# is loaded from (an editable install), else the current folder's
CONFIG_DIRS = (Path(__file__).resolve().parents[2] / "config", Path("config"))


def all_presets(config_dir: Path | None = None) -> dict[str, dict]:
    """Every preset block of the config files (``config/*.yaml`` of ``config_dir``, default the first of
    ``CONFIG_DIRS`` that exists), by name: what another preset runs."""
    import yaml

    if config_dir is None:
        config_dir = next((d for d in CONFIG_DIRS if d.is_dir()), CONFIG_DIRS[0])
    presets: dict[str, dict] = {}
    for path in sorted(config_dir.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(raw, dict) and isinstance(raw.get("presets"), dict):
            presets.update(raw["presets"])
    return presets
