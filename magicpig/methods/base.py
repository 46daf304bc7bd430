"""Shared pieces of the attention methods: the result type, the key layout, masked attention.

One call of a method computes ONE decode step of one layer for a batch of sequences:

    q: (B, H, d)          the decode queries (float32 / bf16 / fp16)
    k, v: (B, H_kv, n, d) the layer's cached keys / values, H % H_kv == 0 (GQA: head h reads h // (H/H_kv))
    layout: KeyLayout     which of the n keys are valid, prompt, sinks, local, generated

and returns an AttentionResult with float32 output (B, H, d) and natural-log LSE (B, H).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch


@dataclass
class AttentionResult:
    """Output of one decode step of one layer.

    output: (B, H, d) float32; lse: (B, H) float32 natural-log log-sum-exp of the logits actually used
    (-inf for an empty key set, whose output is 0); used / candidates: (B, H) float32 counts of keys
    attended and of keys the method chose from (Cost2 = used / candidates); cost1: search cost as a
    fraction of dense attention (the paper's cost accounting, Sec. 5).
    """

    output: torch.Tensor
    lse: torch.Tensor
    used: torch.Tensor
    candidates: torch.Tensor
    cost1: float = 0.0

    @property
    def cost2(self) -> float:
        return float((self.used / self.candidates.clamp_min(1)).mean())

    @property
    def total_cost(self) -> float:
        return self.cost1 + self.cost2


@dataclass
class KeyLayout:
    """Where each of the n cached keys of each sequence sits.

    start: (B,) first valid index (left padding before it); prompt_end: (B,) one past the last prompt key;
    keys at or after prompt_end were generated during decoding. Checked when built (ValueError naming the
    field): n an int >= 0, start / prompt_end (B,) integer tensors with 0 <= start <= prompt_end <= n
    (``grow`` and ``to`` derive valid layouts from valid ones without checking again, so decoding does not
    read the tensors back each step).
    """

    n: int
    start: torch.Tensor
    prompt_end: torch.Tensor
    _max_start: int | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise ValueError(f"KeyLayout: n must be an int >= 0, got {self.n!r}")
        for name in ("start", "prompt_end"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool:
                raise ValueError(f"KeyLayout: {name} must be a (B,) integer tensor, got "
                                 f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        if self.start.shape != self.prompt_end.shape:
            raise ValueError(f"KeyLayout: start {tuple(self.start.shape)} and prompt_end "
                             f"{tuple(self.prompt_end.shape)} must have the same (B,) shape")
        if self.start.numel() and not bool(((self.start >= 0) & (self.start <= self.prompt_end)
                                            & (self.prompt_end <= self.n)).all()):
            raise ValueError(f"KeyLayout: need 0 <= start <= prompt_end <= n = {self.n} in every row, got start "
                             f"{self.start.tolist()} and prompt_end {self.prompt_end.tolist()}")

    @classmethod
    def _derived(cls, n: int, start: torch.Tensor, prompt_end: torch.Tensor) -> "KeyLayout":
        """A layout derived from a checked one (same rows, same or larger n): built without the checks."""
        layout = object.__new__(cls)
        layout.n, layout.start, layout.prompt_end, layout._max_start = n, start, prompt_end, None
        return layout

    @classmethod
    def simple(cls, batch: int, n: int, n_prompt: int | None = None,
               device: torch.device | str | None = None) -> "KeyLayout":
        """No padding; the first ``n_prompt`` keys (default all) are the prompt."""
        n_prompt = n if n_prompt is None else n_prompt
        if not 0 <= n_prompt <= n:
            raise ValueError(f"n_prompt must be in [0, n={n}], got {n_prompt}")
        z = torch.zeros(batch, dtype=torch.long, device=device)
        return cls(n, z, z + n_prompt)

    @property
    def batch(self) -> int:
        return int(self.start.shape[0])

    def to(self, device) -> "KeyLayout":
        return self._same_start(KeyLayout._derived(self.n, self.start.to(device), self.prompt_end.to(device)))

    def _same_start(self, other: "KeyLayout") -> "KeyLayout":
        other._max_start = self._max_start
        return other

    def padded_prefix(self) -> int:
        """How many leading positions are padding in at least one row (0: no padding anywhere). Read from
        the device once per layout family (``grow`` passes it on), so decoding does not sync per step."""
        if self._max_start is None:
            self._max_start = int(self.start.max()) if self.batch else 0
        return min(self._max_start, self.n)

    def index(self) -> torch.Tensor:
        return torch.arange(self.n, device=self.start.device).unsqueeze(0)  # (1, n)

    def valid(self) -> torch.Tensor:
        return self.index() >= self.start.unsqueeze(1)  # (B, n)

    def num_valid(self) -> torch.Tensor:
        return (self.n - self.start).to(torch.float32)

    def generated(self) -> torch.Tensor:
        return self.index() >= self.prompt_end.unsqueeze(1)

    def sinks(self, count: int) -> torch.Tensor:
        """The first ``count`` valid keys."""
        i = self.index()
        return (i >= self.start.unsqueeze(1)) & (i < (self.start + count).unsqueeze(1))

    def prompt_local(self, count: int) -> torch.Tensor:
        """The last ``count`` prompt keys."""
        i = self.index()
        lo = torch.maximum(self.prompt_end - count, self.start)
        return (i >= lo.unsqueeze(1)) & (i < self.prompt_end.unsqueeze(1))

    def recent(self, count: int) -> torch.Tensor:
        """The last ``count`` valid keys (prompt or generated)."""
        return self.valid() & (self.index() >= self.n - count)

    def grow(self, extra: int) -> "KeyLayout":
        """The layout after ``extra`` more generated keys were appended."""
        return self._same_start(KeyLayout._derived(self.n + extra, self.start, self.prompt_end))


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout) -> int:
    """Validate decode-step shapes; return the GQA group size H // H_kv."""
    if q.dim() != 3 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"expected q (B,H,d) and k, v (B,H_kv,n,d); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    B, H, d = q.shape
    if B == 0:
        raise ValueError(f"q: batch B=0 (shape {tuple(q.shape)}): a decode step needs at least one sequence")
    if k.shape[0] != B or k.shape[-1] != d or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not agree")
    if H % k.shape[1] != 0:
        raise ValueError(f"query heads H={H} is not a multiple of kv heads H_kv={k.shape[1]}")
    if k.shape[2] != layout.n or layout.batch != B:
        raise ValueError(f"layout (B={layout.batch}, n={layout.n}) does not match k {tuple(k.shape)}")
    return H // k.shape[1]


def grouped_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Scaled q·k in float32 as (B, H_kv, G, n)."""
    B, H, d = q.shape
    Hkv = k.shape[1]
    qg = q.float().reshape(B, Hkv, H // Hkv, d)
    return (qg @ k.float().transpose(-1, -2)) * scale


def attend_logits(logits: torch.Tensor, v: torch.Tensor,
                  layout: "KeyLayout | None" = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over logits (B, H_kv, G, n) with -inf for dropped keys, times v (B, H_kv, n, d).

    Returns output (B, H, d) and lse (B, H). A row with no finite logit yields output 0 and lse -inf,
    never NaN. ``layout``: the values of its padding positions are treated as 0 (they may hold NaN or inf,
    which a zero probability would not cancel); only the padded prefix of the cache is copied for that.
    """
    B, Hkv, G, n = logits.shape
    lse = torch.logsumexp(logits, dim=-1)  # -inf for empty rows
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    probs = torch.exp(logits - safe.unsqueeze(-1))  # exp(-inf) = 0 for dropped keys
    pad = layout.padded_prefix() if layout is not None else 0
    if pad:
        head = v[:, :, :pad].float().masked_fill(~layout.valid()[:, None, :pad, None], 0.0)
        out = probs[..., :pad] @ head + probs[..., pad:] @ v[:, :, pad:].float()
    else:
        out = probs @ v.float()
    return out.reshape(B, Hkv * G, -1), lse.reshape(B, Hkv * G)


def masked_keys(k: torch.Tensor, layout: "KeyLayout") -> torch.Tensor:
    """k as float32 with padding rows set to 0 (for statistics over keys: min/max, means)."""
    return k.float().masked_fill(~layout.valid()[:, None, :, None], 0.0)


def per_head(mask: torch.Tensor, H: int) -> torch.Tensor:
    """(B, n) or (B, H_kv, G, n) counts -> (B, H) float32."""
    if mask.dim() == 2:
        return mask.sum(-1, dtype=torch.float32).unsqueeze(1).expand(-1, H).contiguous()
    B = mask.shape[0]
    return mask.sum(-1, dtype=torch.float32).reshape(B, H)


LIST_SEP = "/"  # between the items of a list value in a spec (``dense_layers=0/16``); never ';' or ','
MAX_BUDGET = 2**31 - 1  # a key count beyond any context


def check_budget(method: str, budget: float) -> None:
    """Raise ValueError unless ``budget`` is a fraction in (0, 1) or an integer count in [1, MAX_BUDGET]."""
    ok = isinstance(budget, (int, float)) and math.isfinite(budget) and (
        0 < budget < 1 or (float(budget).is_integer() and 1 <= budget <= MAX_BUDGET))
    if not ok:
        raise ValueError(f"{method}: field 'budget' must be a fraction in (0, 1) or an integer key count in "
                         f"[1, {MAX_BUDGET}], got {budget!r}")


def check_min(method: "AttentionMethod", minimum: int, *fields: str) -> None:
    """Raise ValueError naming the method and the first of ``fields`` whose value is below ``minimum``."""
    for field in fields:
        value = getattr(method, field)
        if value < minimum:
            raise ValueError(f"{method.name}: field '{field}' must be >= {minimum}, got {value}")


def budget_count(budget: float, n_valid: torch.Tensor) -> torch.Tensor:
    """A budget given as a fraction (< 1) or a count (>= 1) -> per-row key counts in [1, n_valid]
    (0 for a row without valid keys)."""
    if budget >= 1:
        k = torch.full_like(n_valid, float(int(budget)))
    else:
        k = torch.ceil(budget * n_valid)
    return torch.minimum(k.clamp_min(1), n_valid).to(torch.long)


@dataclass(kw_only=True)
class AttentionMethod:
    """Base of the registered methods: a dataclass of hyperparameters with ``attend``.

    ``dense_layers``: layers that use exact attention; ``None`` means the method's paper default
    (``default_dense_layers``).

    Keyword-only: a method is ``@register @dataclass(kw_only=True) class M(AttentionMethod)`` and adds
    fields freely (with or without defaults, in any order); it is built from keywords only (as
    ``parse_method`` does). In spec strings and ``params`` a method's own fields come first, in their
    declared order, the base's (``dense_layers``) last, whatever the dataclass order of the fields.
    """

    name: ClassVar[str] = ""
    # the backend whose decoder is this method's own system path: "offload" for a method whose
    # ``make_decoder`` builds an offload decoder (MagicPIG), "reference" for one that decodes on the device
    system_backend: ClassVar[str] = "reference"
    dense_layers: tuple[int, ...] | None = None

    def __post_init__(self):
        """Checks shared by every method; subclasses call it first. ``dense_layers`` is normalised to a
        sorted tuple without repeats (so equivalent specs have one canonical form)."""
        if self.dense_layers is not None:
            layers = tuple(self.dense_layers)
            if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in layers):
                raise ValueError(f"{self.name}: field 'dense_layers' must list layer indices >= 0 "
                                 f"(e.g. 0/16, or none), got {self.dense_layers!r}")
            self.dense_layers = tuple(sorted(set(layers)))

    def default_dense_layers(self, num_layers: int) -> tuple[int, ...]:
        return (0, 1) if num_layers > 2 else tuple(range(num_layers))

    def dense_layer_set(self, num_layers: int) -> frozenset[int]:
        """The layers of a ``num_layers``-layer model that use exact attention; an explicit
        ``dense_layers`` naming a layer the model does not have is refused."""
        if self.dense_layers is None:
            return frozenset(i for i in self.default_dense_layers(num_layers) if 0 <= i < num_layers)
        bad = [i for i in self.dense_layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"{self.name}: field 'dense_layers' names layer(s) {bad} but the model has "
                             f"{num_layers} layers: valid indices are 0..{num_layers - 1}")
        return frozenset(self.dense_layers)

    def for_sample(self, sample_id: str) -> "AttentionMethod":
        """The method to decode sample ``sample_id`` with (evaluation runner); itself unless the method
        draws something per sample (MagicPIG's projections)."""
        return self

    def prepare(self, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int = 0) -> Any:
        """Per-layer state built once at the end of prefill (None when the method needs none)."""
        return None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, *,
               scale: float | None = None, state: Any = None, layer_idx: int = 0,
               generator: torch.Generator | None = None) -> AttentionResult:
        raise NotImplementedError

    def make_decoder(self, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout, layer_idx: int, ctx: Any):
        """The decoder of layer ``layer_idx`` at the end of prefill (``magicpig.cache`` asks each layer's).

        k, v: (B, H_kv, n0, d) prefill keys/values (not modified); layout: their KeyLayout; ctx: the
        cache's ``magicpig.decoders.DecoderContext`` (settings and decoder builders; handed in, so that the
        methods never import the decoders, which import the methods). Default, whatever the backend:
        the method's own ``attend`` on the device (``ctx.reference``), exact attention on the dense
        layers (``ctx.dense``). A method with a system path overrides this (``MagicPIG``).
        """
        if ctx.is_dense(layer_idx):
            return ctx.dense(k, v, layout, layer_idx)
        return ctx.reference(self, k, v, layout, layer_idx)

    # ---- spec strings -------------------------------------------------------------------------
    @classmethod
    def spec_fields(cls) -> list[dataclasses.Field]:
        """The hyperparameter fields in spec order: the method's own, in declared order, then the base's
        (``dense_layers``), so a spec reads the same whichever class declares a field first."""
        fields = dataclasses.fields(cls)
        base = {f.name for f in dataclasses.fields(AttentionMethod)}
        return [f for f in fields if f.name not in base] + [f for f in fields if f.name in base]

    def spec(self) -> str:
        """Canonical spec string: the name plus every field that differs from its default."""
        parts = []
        for f in self.spec_fields():
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{f.name}={format_value(value)}")
        return self.name + (":" + ",".join(parts) if parts else "")

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in self.spec_fields()}


@dataclass(kw_only=True)
class BudgetMethod(AttentionMethod):
    """Base of the methods that keep a budget of keys per row (TopK, oracle sampling): ``budget`` in (0, 1)
    is a fraction of the valid keys (rounded up), an integer >= 1 a key count (``budget_count``)."""

    budget: float = 0.02

    def __post_init__(self):
        super().__post_init__()
        check_budget(self.name, self.budget)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return LIST_SEP.join(str(x) for x in value) if value else "none"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return str(int(value))
    return str(value)


def default_scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
