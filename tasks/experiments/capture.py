"""Capture decode queries and the KV cache of one exact prefill (+ a few greedy decode steps) of a model.

A recording attention function is registered through transformers' ``AttentionInterface`` under the name
``estimation_record``: it stores what the model's attention layers receive (queries after RoPE, and the
keys/values after the cache update, i.e. exactly as the KV cache holds them: post-RoPE, un-repeated
kv-heads) and then computes ordinary SDPA attention, so the model's outputs are unchanged. This is
independent of the MagicPIG decode engine.

What is kept (``Capture``):
    queries: (Lc, Q, H, d)    the queries at ``query_positions`` (Q positions) of the Lc captured layers
    keys, values: (Lc, H_kv, n, d)  the whole cache after the last step (n = n_prompt + decode_steps)
Query at position p attends to keys [0, p]; keys at positions >= n_prompt were generated.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

ATTN_NAME = "estimation_record"
KV_DTYPES = ("float16", "float32", "bfloat16")  # what capture_for_model stores queries/keys/values in
# 2: safetensors, tensors + a JSON header (1 was a pickle, which loading could make run code: refused)
FORMAT_VERSION = 2
HEADER_KEY = "magicpig_capture"  # the safetensors metadata entry that holds the JSON header
TENSOR_FIELDS = ("queries", "keys", "values", "query_positions")
HEADER_TYPES = {"layers": list, "n_prompt": int, "num_layers": int, "scale": float, "meta": dict}


@dataclass
class Capture:
    """Queries, keys and values of chosen layers of one prompt (see the module docstring for shapes).

    ``layers``: model layer indices of the Lc captured layers; ``scale``: softmax scale of the model
    (1/sqrt(d) for Llama); ``n_prompt``: prompt length; ``meta``: model, prompt and software facts.
    """

    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    query_positions: torch.Tensor
    layers: list[int]
    n_prompt: int
    num_layers: int
    scale: float
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        Lc, Q, H, d = self.queries.shape
        if self.keys.shape[0] != Lc or self.keys.shape != self.values.shape or self.keys.shape[-1] != d:
            raise ValueError(f"capture: queries {tuple(self.queries.shape)}, keys {tuple(self.keys.shape)} and "
                             f"values {tuple(self.values.shape)} do not agree")
        if H % self.keys.shape[1]:
            raise ValueError(f"capture: {H} query heads is not a multiple of {self.keys.shape[1]} kv heads")
        if len(self.layers) != Lc:
            raise ValueError(f"capture: {len(self.layers)} layer indices for {Lc} captured layers")
        if (self.query_positions.numel() != Q or not Q or int(self.query_positions.max()) >= self.n_keys
                or int(self.query_positions.min()) < 0):
            raise ValueError("capture: query_positions do not match the queries or exceed the cache length")

    @property
    def n_keys(self) -> int:
        return int(self.keys.shape[2])

    @property
    def num_heads(self) -> int:
        return int(self.queries.shape[2])

    @property
    def num_kv_heads(self) -> int:
        return int(self.keys.shape[1])

    @property
    def head_dim(self) -> int:
        return int(self.keys.shape[3])

    def layer_slot(self, layer: int) -> int:
        """Index into the captured tensors of model layer ``layer``."""
        if layer not in self.layers:
            raise ValueError(f"layer {layer} was not captured; captured layers: {self.layers}")
        return self.layers.index(layer)

    def save(self, path: str | Path) -> Path:
        """Write the capture as a safetensors file: the four tensors, and every other field as JSON in the
        file's metadata (``HEADER_KEY``). No pickle: reading it back runs no code (``load``)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fields = asdict(self)
        tensors = {name: fields.pop(name).contiguous() for name in TENSOR_FIELDS}
        header = json.dumps({"format": FORMAT_VERSION, **fields}, allow_nan=False)
        tmp = path.with_name(path.name + ".tmp")
        try:
            save_file(tensors, str(tmp), metadata={HEADER_KEY: header})
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Capture":
        """Read a capture written by ``save``: tensors and a JSON header, checked field by field. A file of the
        pickle-based format that came before (a torch zip or pickle) is refused unread: loading it could run
        code."""
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"capture file {path} does not exist (run `magicpig estimate capture` first)")
        rerun = "write it again with `magicpig estimate capture`"
        with open(path, "rb") as f:
            head = f.read(8)
        if head[:2] == b"PK" or head[:1] == b"\x80":
            raise ValueError(f"capture file {path} is a pickle-based capture of an older magicpig: such files are "
                             f"no longer read, because loading one can run code it carries; {rerun}")
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                metadata = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ValueError(f"capture file {path} cannot be read ({type(exc).__name__}: {exc}); {rerun}") from None
        return cls._from_parts(path, tensors, metadata, rerun)

    @classmethod
    def _from_parts(cls, path: Path, tensors: dict, metadata: dict, rerun: str) -> "Capture":
        """A Capture from a file's tensors and metadata, every field checked for its type."""
        try:
            header = json.loads(metadata.get(HEADER_KEY, "null"))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"capture file {path}: its header is not JSON ({type(exc).__name__}); {rerun}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path} is not a capture file of format {FORMAT_VERSION}; {rerun}")
        header.pop("format")
        if sorted(tensors) != sorted(TENSOR_FIELDS) or sorted(header) != sorted(HEADER_TYPES):
            raise ValueError(f"capture file {path} holds tensors {sorted(tensors)} and fields {sorted(header)}; "
                             f"expected {sorted(TENSOR_FIELDS)} and {sorted(HEADER_TYPES)}; {rerun}")
        for name, kind in HEADER_TYPES.items():
            if not _header_field_ok(name, header[name]):
                shown = repr(header[name])
                shown = shown if len(shown) <= 80 else f"{shown[:80]}..."
                raise ValueError(f"capture file {path}: field {name!r} is {shown}, not a valid {kind.__name__}; "
                                 f"{rerun}")
        for name in ("queries", "keys", "values"):
            t = tensors[name]
            if t.ndim != 4 or not t.is_floating_point() or not t.numel():
                raise ValueError(f"capture file {path}: {name} must be a non-empty 4-d float tensor, got "
                                 f"{t.dtype} of shape {tuple(t.shape)}; {rerun}")
            if not torch.isfinite(t).all():
                raise ValueError(f"capture file {path}: {name} hold NaN or infinite values; {rerun}")
        positions = tensors["query_positions"]
        if positions.ndim != 1 or positions.is_floating_point() or positions.is_complex():
            raise ValueError(f"capture file {path}: query_positions must be a 1-d integer tensor; {rerun}")
        n_keys = tensors["keys"].shape[2]
        if any(i >= header["num_layers"] for i in header["layers"]) or header["n_prompt"] > n_keys:
            raise ValueError(f"capture file {path}: its layers or n_prompt ({header['n_prompt']}) do not fit "
                             f"num_layers ({header['num_layers']}) and its {n_keys} keys; {rerun}")
        try:
            return cls(**tensors, **header)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"capture file {path}: {exc}; {rerun}") from None


def _header_field_ok(name: str, value: Any) -> bool:
    """Whether ``value`` is a valid ``name`` of a capture's JSON header (``HEADER_TYPES``)."""
    kind = HEADER_TYPES[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        return False
    if name == "layers":
        return all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    if name == "scale":
        return math.isfinite(value) and value > 0
    if name in ("n_prompt", "num_layers"):
        return value >= 1
    return True


class _Recorder:
    """Collects per-layer queries and the latest keys/values while active."""

    def __init__(self, layers: set[int], prompt_queries: int):
        self.layers = layers
        self.prompt_queries = prompt_queries
        self.queries: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def observe(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if layer not in self.layers:
            return
        q_len = query.shape[2]
        take = min(q_len, self.prompt_queries) if q_len > 1 else 1
        if take:
            self.queries[layer].append(query[0, :, q_len - take:].detach().float().transpose(0, 1).cpu())
        self.kv[layer] = (key[0].detach(), value[0].detach())


_ACTIVE: _Recorder | None = None


def _record_attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if _ACTIVE is not None:
        _ACTIVE.observe(int(module.layer_idx), query, key, value)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def register_recording_attention() -> str:
    """Register the recording attention function with transformers; returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, _record_attention)
    return ATTN_NAME


def parse_layers(spec: str | None, num_layers: int) -> list[int]:
    """``all`` / None, ``every:N``, or a comma list like ``0,2,5-9`` -> sorted layer indices."""
    if spec is None or spec == "all":
        return list(range(num_layers))
    if spec.startswith("every:"):
        step = int(spec.split(":", 1)[1])
        if step < 1:
            raise ValueError(f"layers: 'every:N' needs N >= 1, got {spec!r}")
        return list(range(0, num_layers, step))
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, dash, hi = part.partition("-")
        try:
            rng = range(int(lo), int(hi) + 1) if dash else [int(lo)]
        except ValueError:
            raise ValueError(f"layers: expected 'all', 'every:N' or a list like '0,2,5-9', got {spec!r}") from None
        out.update(rng)
    bad = [i for i in out if not 0 <= i < num_layers]
    if bad or not out:
        raise ValueError(f"layers: {sorted(bad) or spec!r} outside the model's layers 0..{num_layers - 1}")
    return sorted(out)


def _output_cache(out):
    """The KV cache of a model output (``cache`` in transformers 5, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@torch.inference_mode()
def capture_model(model, tokenizer, text: str | None, *, layers: list[int] | None = None, decode_steps: int = 15,
                  prompt_queries: int = 1, dtype: torch.dtype = torch.float16,
                  meta: dict[str, Any] | None = None, input_ids: torch.Tensor | None = None) -> Capture:
    """Prefill ``text`` (or the token ids ``input_ids``, (1, n)) exactly, then decode ``decode_steps`` tokens
    greedily, recording attention.

    Queries kept: the last ``prompt_queries`` prompt positions and every decode step's query.
    Keys/values are stored in ``dtype`` (float16 halves the file; every experiment takes its exact
    reference from the same stored tensors, so the rounding does not bias comparisons); queries float32.
    """
    global _ACTIVE
    if decode_steps < 0 or prompt_queries < 0 or decode_steps + prompt_queries < 1:
        raise ValueError("decode_steps and prompt_queries must be >= 0 and keep at least one query")
    num_layers = int(model.config.num_hidden_layers)
    layers = list(range(num_layers)) if layers is None else sorted(layers)
    previous = model.config._attn_implementation
    model.set_attn_implementation(register_recording_attention())
    device = next(model.parameters()).device
    if (text is None) == (input_ids is None):
        raise ValueError("capture_model takes either text or input_ids")
    ids = (tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"] if input_ids is None
           else input_ids.reshape(1, -1)).to(device)
    n_prompt = int(ids.shape[1])
    if n_prompt <= prompt_queries:
        raise ValueError(f"prompt_queries={prompt_queries} must be smaller than the prompt ({n_prompt} tokens)")
    rec = _Recorder(set(layers), prompt_queries)
    generated: list[int] = []
    t0 = time.time()
    try:
        _ACTIVE = rec
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)  # not (n, vocab) logits: 10 GB at 16K
        t_prefill = time.time() - t0
        nxt = out.logits[:, -1].argmax(-1)
        generated.append(int(nxt))
        cache = _output_cache(out)
        for _ in range(decode_steps):
            out = model(input_ids=nxt[:, None], cache=cache, use_cache=True, logits_to_keep=1)
            cache = _output_cache(out)
            nxt = out.logits[:, -1].argmax(-1)
            generated.append(int(nxt))
    finally:
        _ACTIVE = None
        model.set_attn_implementation(previous)
    queries = torch.stack([torch.cat(rec.queries[i], 0) for i in layers])  # (Lc, Q, H, d)
    keys = torch.stack([rec.kv[i][0].to("cpu", dtype) for i in layers])
    values = torch.stack([rec.kv[i][1].to("cpu", dtype) for i in layers])
    positions = torch.cat([torch.arange(n_prompt - prompt_queries, n_prompt),
                           torch.arange(n_prompt, n_prompt + decode_steps)])
    attn = model.model.layers[0].self_attn
    info = dict(meta or {})
    info.update({
        "generated_text": tokenizer.decode(generated), "prefill_seconds": round(t_prefill, 2),
        "seconds": round(time.time() - t0, 2), "device": str(device), "kv_dtype": str(dtype).replace("torch.", ""),
    })  # the machine and software versions: the harness adds magicpig.harness.machine.machine_record()
    return Capture(queries=queries, keys=keys, values=values, query_positions=positions, layers=layers,
                   n_prompt=n_prompt, num_layers=num_layers, scale=float(attn.scaling), meta=info)


def default_capture_path(model: str, context: int, root: str | Path = "results/estimation/captures") -> Path:
    """Where ``magicpig estimate capture`` stores the capture of ``model`` at ``context`` tokens."""
    label = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in Path(model).stem or model)
    return Path(root) / f"{label}_{int(context)}.safetensors"


def capture_for_model(model: str, context: int, *, layers: str | None = None, decode_steps: int = 15,
                      prompt_queries: int = 1, depth: float = 0.5, seed: int = 0, haystack_offset: int = 0,
                      kv_dtype: torch.dtype = torch.float16, device: str | None = None,
                      progress=None) -> Capture:
    """Load ``model`` (see magicpig.models.resolve), build a haystack prompt of ``context`` tokens (its text
    starting ``haystack_offset`` tokens into the essays) and capture. ``kv_dtype``: one of KV_DTYPES."""
    from magicpig.models import load_model, max_context

    from magicpig_tasks.experiments.haystack import build_prompt

    say = progress or (lambda msg: None)
    if not isinstance(context, int) or context < 64:
        raise ValueError(f"context must be an integer >= 64, got {context!r}")
    if str(kv_dtype).removeprefix("torch.") not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    say(f"loading {model}")
    net, tok = load_model(model, device=device)
    limit = max_context(net.config)
    if limit and context + decode_steps > limit:
        raise ValueError(f"context={context} + decode_steps={decode_steps} exceeds the model's trained "
                         f"context of {limit} tokens")
    layer_list = parse_layers(layers, int(net.config.num_hidden_layers))
    prompt = build_prompt(tok, context, depth=depth, seed=seed, offset=haystack_offset)
    say(f"prefill of {prompt.n_tokens} tokens + {decode_steps} decode steps")
    cap = capture_model(net, tok, prompt.text, layers=layer_list, decode_steps=decode_steps,
                        prompt_queries=prompt_queries, dtype=kv_dtype,
                        meta={"model": model, "context": context, "needle_key": prompt.key,
                              "needle_value": prompt.value, "depth": depth, "seed": seed,
                              "haystack_offset": haystack_offset})
    cap.meta["needle_found"] = prompt.value in cap.meta["generated_text"]
    return cap
