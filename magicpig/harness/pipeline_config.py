"""Load-time checks of the pipeline config (``config/config.yaml``), so a bad setting fails ``snakemake -n``
instead of a job hours later.

``validate_pipeline_config(config)`` runs the JSON schema (``workflow/schemas/config.schema.yaml``) and then
what a schema cannot express: method specs and duplicate / equivalent methods, task names, kernel-bench
(K, L) limits, and whether the model exists and its context holds every configured length. Every problem is
named by its config path (``presets.cpu.ruler.lengths[0]``) with the allowed values, all of them in one
ValueError.

Machine-independent checks run on every preset (``--configfile`` merges files, so all presets are loaded
anyway); the model checks only on the selected preset, whose model must exist on this machine. A hub id
that is not in the local Hugging Face cache cannot be checked without the network: it is accepted with a
warning (a GPU box downloads it).
"""
from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any, Callable

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
# method lists of each preset block, as config paths below the preset: (block, key, runs magicpig eval)
METHOD_LISTS = (("ruler", "methods", True), ("longbench", "methods", True), ("gsm8k", "methods", True),
                ("ablations", "centering_methods", True), ("ablations", "kl_grid", True),
                ("decode_bench", "methods", False))
# optional benchmark blocks (absent: not run): block -> the task-name prefix of its tasks
OPTIONAL_BLOCKS = {"lm_eval": "", "reasoning": "infini_igsm/"}
# prompt caps the rules pass as --length when a block leaves them out (the schema's defaults)
DEFAULT_MAX_LENGTH = {"longbench": 7680, "gsm8k": 4096, "lm_eval": 4096, "reasoning": 16384}


def validate_pipeline_config(config: dict, *, warn: Callable[[str], None] | None = None) -> None:
    """Raise ValueError listing every problem of ``config`` (one line each, by config path); return None
    when it is usable. ``warn`` receives what cannot be checked here (default: printed to stderr)."""
    warn = warn or (lambda msg: print(f"config warning: {msg}", file=sys.stderr))
    problems = schema_problems(config)
    if not problems:
        for name, preset in config["presets"].items():
            problems += preset_problems(f"presets.{name}", preset)
        selected = config["preset"]
        if selected not in config["presets"]:
            problems.append(f"preset: preset {selected!r} is not one of {sorted(config['presets'])}")
        else:
            problems += model_problems(f"presets.{selected}", config["presets"][selected], warn)
    if problems:
        raise ValueError(f"config: {len(problems)} problem(s):\n" + "\n".join(f"- {p}" for p in problems))


def schema_problems(config: Any) -> list[str]:
    """The schema's errors as 'config.path: message' lines (unknown keys get the allowed keys)."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    out = []
    for err in sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.path)):
        msg = err.message
        if err.validator == "additionalProperties" and isinstance(err.schema.get("properties"), dict):
            allowed = sorted(err.schema["properties"])
            extra = [k for k in err.instance if k not in allowed]
            hints = [f"{k!r} -> {m[0]!r}?" for k in extra for m in [difflib.get_close_matches(k, allowed, 1)] if m]
            msg += f"; allowed keys: {', '.join(allowed)}" + (f" (did you mean {', '.join(hints)})" if hints else "")
        elif err.validator == "anyOf":
            msg += "; allowed: " + " or ".join(_describe(s) for s in err.validator_value)
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


def method_problems(path: str, specs: list[str], *, eval_specs: bool) -> list[str]:
    """Unparsable specs and duplicate / equivalent ones in one method list. ``eval_specs``: the list goes to
    ``magicpig eval``; otherwise to ``bench decode``, which also takes SPEC@BACKEND."""
    from magicpig.backends import BENCH_BACKENDS as DECODE_BACKENDS
    from magicpig.methods import canonical_spec  # equal for equivalent specs ('magicpig', 'magicpig:K=10,L=150')

    out, seen = [], {}
    for i, raw in enumerate(specs):
        spec, backend = raw, ""
        if not eval_specs and "@" in raw:
            spec, _, backend = raw.rpartition("@")
            if backend not in DECODE_BACKENDS:
                out.append(f"{path}[{i}]: backend after '@' must be one of {', '.join(DECODE_BACKENDS)}, "
                           f"got {backend!r} in {raw!r}")
                continue
        try:
            key = (canonical_spec(spec), backend)  # one method on two decode backends: two measurements
        except ValueError as exc:
            out.append(f"{path}[{i}]: {exc}")
            continue
        if key in seen:
            j = seen[key]
            out.append(f"{path}[{i}]: {raw!r} is the same method as {path}[{j}] {specs[j]!r} "
                       f"(canonical spec {key[0]!r}); list each setting once")
        else:
            seen[key] = i
    return out


def preset_problems(path: str, p: dict) -> list[str]:
    """What the schema cannot check in one preset, machine-independent."""
    from magicpig_tasks.registry import TASK_NAMES

    from magicpig.lsh import check_kl, parse_kl

    out = []
    for block, key, eval_specs in METHOD_LISTS:
        out += method_problems(f"{path}.{block}.{key}", p[block][key], eval_specs=eval_specs)
    for block in OPTIONAL_BLOCKS:
        if block in p:
            out += method_problems(f"{path}.{block}.methods", p[block]["methods"], eval_specs=True)
    ruler_names = [t.removeprefix("ruler/") for t in TASK_NAMES if t.startswith("ruler/")]
    for block in ("ruler", "ablations"):
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
    return out


def answer_budget(tasks: list[str]) -> int:
    """The largest answer budget (max_new_tokens) of ``tasks`` (unknown names, reported elsewhere, skipped):
    prompt + answer must fit the context."""
    from magicpig_tasks.registry import TASK_NAMES, get_task

    return max((get_task(t).max_new_tokens for t in tasks if t in TASK_NAMES), default=0)


def model_problems(path: str, p: dict, warn: Callable[[str], None]) -> list[str]:
    """The selected preset's model exists and its context holds every configured length."""
    try:
        context, label = model_context(p["model"])
    except (ValueError, OSError) as exc:
        return [f"{path}.model: {exc}"]
    if context is None:
        warn(f"{path}.model: {label}; the lengths are not checked against its context")
        return []
    # RULER's lengths (the first one is also the ablations' unless they set one); a benchmark block that does not run is not checked
    ruler_tasks = [f"ruler/{t}" for t in p["ruler"]["tasks"] + p["ablations"]["tasks"]]
    budget = answer_budget(ruler_tasks)
    checks = [(f"{path}.ruler.lengths[{i}]", n, budget) for i, n in enumerate(p["ruler"]["lengths"])]
    if "length" in p["ablations"]:
        checks.append((f"{path}.ablations.length", p["ablations"]["length"], budget))
    blocks = [("longbench", [f"longbench/{t}" for t in p["longbench"]["tasks"]]), ("gsm8k", ["gsm8k"])]
    blocks += [(b, [prefix + t for t in p[b]["tasks"]]) for b, prefix in OPTIONAL_BLOCKS.items() if b in p]
    for block, tasks in blocks:
        if tasks and (p[block]["samples"] == "all" or p[block]["samples"] > 0):
            checks.append((f"{path}.{block}.max_length", p[block].get("max_length", DEFAULT_MAX_LENGTH[block]),
                           answer_budget(tasks)))
    checks.append((f"{path}.estimation.length", p["estimation"]["length"], 0))  # a prefill, no answer
    # decode_bench.lengths are not checked: a throughput run may tile a cache beyond the trained context
    out = []
    for where, n, budget in checks:
        if n + budget > context:
            answer = f" + {budget} answer tokens" if budget else ""
            out.append(f"{where}: {n}{answer} is beyond the context of {p['model']!r} ({context} tokens, {label}); "
                       f"allowed: at most {context - budget}")
    return out


def model_context(model: str) -> tuple[int | None, str]:
    """(trained context in tokens, where it was read) without loading weights; (None, why) for a hub id
    that is not in the local cache. Raises FileNotFoundError / ValueError for a local path that is not
    there or not a model."""
    from magicpig.models import resolve

    src = resolve(model)  # raises for a missing .gguf file or a path that is neither a folder nor a hub id
    if src.gguf_file:
        gguf = Path(src.path) / src.gguf_file
        return gguf_context_length(gguf), f"GGUF metadata of {gguf.name}"
    folder = Path(src.path).expanduser()
    if folder.is_dir():
        return config_context(folder / "config.json"), f"{folder / 'config.json'}"
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(src.path, "config.json")
    if isinstance(cached, str):
        return config_context(Path(cached)), f"cached config.json of {src.path}"
    return None, (f"{model!r} is taken as a hub id (no such local folder) and its config.json is not in the "
                  "local Hugging Face cache; it is downloaded when a job loads it")


def config_context(path: Path) -> int:
    """max_position_embeddings of a Hugging Face config.json (multimodal configs: of their text_config)."""
    cfg = json.loads(path.read_text(encoding="utf-8"))
    value = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{path} has no max_position_embeddings")
    return value


def gguf_context_length(path: Path) -> int:
    """``<architecture>.context_length`` from a GGUF file's key-value header (``models.gguf_metadata``:
    the header alone, the vocabulary arrays skipped)."""
    from magicpig.models import gguf_metadata

    try:
        meta = gguf_metadata(path)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    value = meta.get(f"{meta.get('general.architecture')}.context_length")
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: no context_length in its GGUF metadata")
    return value
