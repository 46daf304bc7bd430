"""One decode step of a Llama-family model (Llama, Mistral, Qwen2) in one loop of our own, on the CPU.

Why: transformers runs a decode step module by module: per decoder layer about ten module calls and forty tensor
operations. ``DecodeForward`` computes the same step with three calls per layer: kernel 6's ``attention_in``
(RMSNorm, q/k/v as one kernel-4 region over the three weight matrices, no copy of the weights, the rotary
embedding of q and k), the cache's decoder (``MagicPIGCache``: the method decides, exactly as through the
attention hook; on an offloaded layer one call of the CPU module that also appends the step's key and value),
and kernel 6's ``mlp_residual`` with the attention output (o_proj added to the residual, RMSNorm, gate/up in one
region, SiLU-and-multiply, down added to the residual); after the last layer, kernel 6's ``norm_head`` (the
final RMSNorm and the output head). On a decode step's cold caches every call and tensor operation costs tens of
microseconds, so fewer of them is most of the gain. Where every layer's decoder runs on the CPU module, the
whole step is one call (``magicpig.decode_loop``: the same kernels in the same order, equal logits;
``whole_step=False`` keeps the layer-by-layer loop). Its logits equal transformers' up to float32 summation
order (tests/test_decode_forward.py).

What it supports (``unsupported_reason`` says why not, and ``Engine`` then keeps transformers' forward):
a float32 CPU model whose decoder layers are transformers' Llama / Mistral / Qwen2 classes with SiLU MLPs
and no forward hooks (accelerate offloading). Prefill always runs transformers' forward.

``FORWARD_IMPLS``: ``auto`` (this loop where it applies and kernel 4 computes the linear layers,
transformers' forward otherwise), ``magicpig`` (this loop; an error naming the reason where it does not
apply), ``transformers``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FORWARD_IMPLS = ("auto", "magicpig", "transformers")
ROTARY_BLOCK = 256  # positions per table of the rotary embedding (DecodeForward._rotary)
_FAMILIES = ("Llama", "Mistral", "Qwen2")  # class-name prefixes of the supported decoder layers


def check_forward_impl(impl: str) -> str:
    if impl not in FORWARD_IMPLS:
        raise ValueError(f"decode_forward must be one of {', '.join(FORWARD_IMPLS)} (who runs a decode step's "
                         f"layer loop), got {impl!r}")
    return impl


def _family(module) -> str | None:
    name = type(module).__name__
    return next((f for f in _FAMILIES if name.startswith(f)), None)


def unsupported_reason(model) -> str | None:
    """Why ``DecodeForward`` cannot run ``model`` (None: it can)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if inner is None or layers is None or getattr(model, "lm_head", None) is None:
        return f"{type(model).__name__} is not a decoder-only causal LM with model.layers and lm_head"
    config = model.config
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act={getattr(config, 'hidden_act', None)!r} (the loop implements SiLU MLPs)"
    for p in model.parameters():
        if p.device.type != "cpu" or p.dtype != torch.float32:
            return f"a parameter is {p.dtype} on {p.device} (the loop runs float32 CPU models)"
    for m in model.modules():
        if getattr(m, "_hf_hook", None) is not None or m._forward_hooks or m._forward_pre_hooks:
            return f"{type(m).__name__} has forward hooks (accelerate offloading or similar)"
    for layer in layers:
        family = _family(layer)
        parts = (getattr(layer, "self_attn", None), getattr(layer, "mlp", None),
                 getattr(layer, "input_layernorm", None), getattr(layer, "post_attention_layernorm", None))
        if family is None or any(p is None or _family(p) != family for p in parts):
            return (f"decoder layer {type(layer).__name__} is not a transformers {'/'.join(_FAMILIES)} layer "
                    "with their attention, MLP and RMSNorm modules")
        attn = layer.self_attn
        if any(getattr(attn, name, None) is None for name in ("q_proj", "k_proj", "v_proj", "o_proj")):
            return f"{type(attn).__name__} lacks q/k/v/o projections"
        if getattr(attn, "sliding_window", None):
            return "sliding-window attention layers"
    if _family(getattr(inner, "norm", None)) is None or getattr(inner, "rotary_emb", None) is None:
        return "the model has no transformers RMSNorm final norm or rotary embedding"
    return None


@dataclass
class _Layer:
    """One decoder layer's tensors, in the order the step uses them."""

    in_norm: torch.Tensor
    in_eps: float
    qkv: list[torch.Tensor]
    qkv_bias: list[torch.Tensor | None]
    o: list[torch.Tensor]
    o_bias: list[torch.Tensor | None]
    post_norm: torch.Tensor
    post_eps: float
    mlp: list[torch.Tensor]  # gate, up, down
    mlp_bias: list[torch.Tensor | None]
    scale: float


def _weights(fmt: str, *modules) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    from magicpig.decode_weights import decode_weight

    return ([decode_weight(m, fmt) for m in modules],
            [None if m.bias is None else m.bias.detach().float().contiguous() for m in modules])


class DecodeForward:
    """``DecodeForward(model, weights)(ids, positions, cache)``: one decode step.

    weights: how kernel 4 stores the linear weights (``magicpig.decode_weights.WEIGHT_FORMATS``). ids,
    positions: (B, 1) int64 (the next token of each sequence and its position); cache: a ``MagicPIGCache``
    whose decoders are built (``start_decoding``). Returns logits (B, V) float32. whole_step: run the
    step as one call of the module where the cache's decoders allow (``magicpig.decode_loop``).
    Raises ValueError (``unsupported_reason``) for a model it cannot run.
    """

    def __init__(self, model, weights: str = "model", whole_step: bool = True):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"decode_forward='magicpig' cannot run this model: {reason}")
        from magicpig import cpu

        self.module, self.isa, self.threads = cpu.load(), cpu.ISA_CODES[cpu.isa()], cpu.num_threads()
        self.whole_step = whole_step
        config = model.config
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.final_norm, self.final_eps = inner.norm.weight.detach(), float(inner.norm.variance_epsilon)
        rope_type = str(getattr(self.rotary, "rope_type", "default"))
        self.rotary_table_ok = "dynamic" not in rope_type and rope_type != "longrope"
        self.rotary_table: tuple = (0, None, None)  # (first position, cos (n, d), sin (n, d)): _rotary
        self.head, self.head_bias = _weights(weights, model.lm_head)
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            qkv, qkv_b = _weights(weights, a.q_proj, a.k_proj, a.v_proj)
            o, o_b = _weights(weights, a.o_proj)
            mlp, mlp_b = _weights(weights, m.gate_proj, m.up_proj, m.down_proj)
            self.layers.append(_Layer(
                layer.input_layernorm.weight.detach(), float(layer.input_layernorm.variance_epsilon), qkv, qkv_b,
                o, o_b, layer.post_attention_layernorm.weight.detach(),
                float(layer.post_attention_layernorm.variance_epsilon), mlp, mlp_b, float(a.scaling)))
        self.head_dim = int(self.layers[0].qkv[0].shape[0]) // self.heads  # rows: the same in every format

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        mod, isa, threads = self.module, self.isa, self.threads
        B = ids.shape[0]
        H, Hkv, d = self.heads, self.kv_heads, self.head_dim
        h = self.embed(ids)  # (B, 1, D)
        cos, sin = self._rotary(h, positions)
        h = h[:, 0].contiguous()
        loop = self._loop(cache, B)
        if loop is not None:  # every layer in one call of the module
            h = loop(h, cos, sin)
        else:
            for i, w in enumerate(self.layers):
                qkv = mod.attention_in(h, w.in_norm, w.in_eps, w.qkv, w.qkv_bias, cos, sin, H, Hkv, isa, threads)
                k = qkv[:, H * d:(H + Hkv) * d].view(B, Hkv, 1, d)
                v = qkv[:, (H + Hkv) * d:].view(B, Hkv, 1, d)
                cache.layers[i].decoder.append(k, v)
                out = cache.attend(i, qkv[:, :H * d].view(B, H, d), w.scale)  # (B, H, d) float32
                # h += o_proj(out), then h += MLP(RMSNorm(h))
                mod.mlp_residual(h, w.post_norm, w.post_eps, w.mlp, w.mlp_bias, isa, threads, out, w.o[0],
                                 w.o_bias[0])
        return mod.norm_head(h, self.final_norm, self.final_eps, self.head, self.head_bias, isa, threads)

    def _rotary(self, h: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (B, d) float32 of the rotary embedding at positions (B, 1). Where the embedding is a fixed
        function of the position (not transformers' dynamic or longrope types, which change with the length), read
        from a table of ``ROTARY_BLOCK`` consecutive positions computed by the model's module once per block: the
        module's products and cos / sin are element-wise, so the table holds its values bit for bit, at one
        indexing per step instead of its half-dozen tensor operations."""
        if not self.rotary_table_ok:
            cos, sin = self.rotary(h, positions)  # (B, 1, d) each
            return cos[:, 0].float().contiguous(), sin[:, 0].float().contiguous()
        at = positions[:, 0].tolist()
        lo, hi = min(at), max(at)
        first, cos_t, sin_t = self.rotary_table
        if cos_t is None or lo < first or hi >= first + cos_t.shape[0]:
            first = lo
            span = torch.arange(first, first + max(ROTARY_BLOCK, hi - lo + 1), device=positions.device)[None]
            cos_t, sin_t = self.rotary(h[:1], span)
            cos_t, sin_t = cos_t[0].float(), sin_t[0].float()
            self.rotary_table = (first, cos_t, sin_t)
        rows = [p - first for p in at]
        return cos_t[rows], sin_t[rows]

    def _loop(self, cache, batch: int):
        """The cache's ``DecodeLoop`` (built at its first step, None where a decoder needs the Python loop)."""
        if not self.whole_step:
            return None
        loop = cache.decode_loop
        if loop is None or (loop and loop.forward is not self):
            from magicpig.decode_loop import DecodeLoop

            loop = cache.decode_loop = DecodeLoop.build(self, cache, batch) or False
        return loop or None
