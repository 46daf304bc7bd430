"""The Hugging Face hook: ``attn_implementation="magicpig"`` through transformers' AttentionInterface.

How it plugs in (no modeling file is copied or edited):

* ``register()`` adds the function ``magicpig_attention`` to ``transformers.AttentionInterface`` under the
  name ``"magicpig"`` and registers transformers' own ``sdpa_mask`` for that name in
  ``ALL_MASK_ATTENTION_FUNCTIONS``, so the model builds the same boolean 4D mask (or ``None`` for a plain
  causal pattern) as it does for ``sdpa``.
* Prefill (a query block longer than one token) is exact attention: SDPA over query blocks of
  ``PREFILL_BLOCK`` rows so a long prompt never materialises a full (n, n) score matrix.
* Decode (one query token) is computed by the layer's decoder held in a ``magicpig.cache.MagicPIGCache``:
  the configured method (reference backend) or the heterogeneous device + CPU split (offload backend).
  The cache's ``update`` runs right before the attention call of the same layer and marks that layer as
  active for the current thread (``magicpig.active_layer``); the attention function reads it from there.
* ``patch(model, method, backend=...)`` switches a loaded model to the hook and makes ``model.generate``
  create a ``MagicPIGCache`` with that method when the caller passes none.

Usage::

    import magicpig
    model = AutoModelForCausalLM.from_pretrained(path)
    magicpig.patch(model, "magicpig:K=10,L=150", backend="offload")
    out = model.generate(input_ids, max_new_tokens=32)
"""
from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

from magicpig.active_layer import get_active
from magicpig.backends import DEFAULT_BACKEND, check_backend

NAME = "magicpig"
PREFILL_BLOCK = 1024  # query rows per SDPA call during prefill

_registered = False


# ---- exact attention for prefill -------------------------------------------------------------------
def exact_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    mask: torch.Tensor | None, scaling: float | None = None,
                    block: int = PREFILL_BLOCK) -> torch.Tensor:
    """Exact causal attention computed in query blocks.

    query: (B, H, q, d); key, value: (B, H_kv, kv, d) with the q queries being the last q positions;
    mask: None (plain causal) or a 4D mask (B or 1, 1, q, kv), boolean (True = attend) or additive float.
    Returns (B, q, H, d) in the query dtype (the layout transformers' attention functions return).
    Query rows whose mask is entirely False (left-padding positions) get output 0 instead of NaN.
    """
    B, H, q, d = query.shape
    Hkv, kv = key.shape[1], key.shape[2]
    if H % Hkv:
        raise ValueError(f"query heads H={H} is not a multiple of kv heads H_kv={Hkv}")
    gqa = H != Hkv
    out = torch.empty(B, H, q, d, dtype=query.dtype, device=query.device)
    offset = kv - q
    for lo in range(0, q, block):
        hi = min(q, lo + block)
        end = offset + hi  # keys visible to the last query of the block
        qb = query[:, :, lo:hi]
        kb, vb = key[:, :, :end], value[:, :, :end]
        if mask is None:
            if lo == 0 and offset == 0 and hi == q:
                ob = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=scaling, enable_gqa=gqa)
            else:
                rows = torch.arange(lo, hi, device=query.device)[:, None] + offset
                m = torch.arange(end, device=query.device)[None, :] <= rows
                ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=m, scale=scaling, enable_gqa=gqa)
        else:
            m = mask[:, :, lo:hi, :end]
            ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=m, scale=scaling, enable_gqa=gqa)
            if m.dtype == torch.bool:
                ob = torch.where(m.any(-1, keepdim=True), ob, torch.zeros((), dtype=ob.dtype, device=ob.device))
        out[:, :, lo:hi] = ob
    return out.transpose(1, 2).contiguous()


# ---- the registered attention function ------------------------------------------------------------
def magicpig_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, scaling: float | None = None,
                       dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention function: query (B, H, q, d), key/value (B, H_kv, kv, d) as returned by the
    cache; returns ((B, q, H, d), None). Exact for q > 1; the layer's decoder for q == 1."""
    if dropout and module.training:
        raise ValueError("magicpig attention is for inference; dropout must be 0")
    layer_idx = getattr(module, "layer_idx", None)
    cache = get_active(layer_idx)
    q_len = query.shape[2]
    if q_len == 1 and cache is not None and cache.is_decoding(layer_idx):
        out = cache.attend(layer_idx, query[:, :, 0], scaling, attention_mask)  # (B, H, d) float32
        return out.to(query.dtype).unsqueeze(1), None
    if q_len == 1 and key.shape[2] > 1 and cache is None:
        raise RuntimeError(
            "magicpig attention: a decode step ran without a MagicPIGCache, so there is no sparse cache to "
            "decode from. Call magicpig.patch(model, method) before model.generate (it supplies the cache), "
            "or pass cache=magicpig.cache.MagicPIGCache(model, method).")
    return exact_attention(query, key, value, attention_mask, scaling), None


def register() -> None:
    """Register ``"magicpig"`` with transformers' attention and mask interfaces (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, magicpig_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    if NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:  # pragma: no cover - older layouts
        ALL_MASK_ATTENTION_FUNCTIONS._global_mapping[NAME] = sdpa_mask
    _registered = True


def use_hook(model) -> None:
    """Switch ``model`` (a loaded transformers model) to the ``"magicpig"`` attention implementation."""
    register()
    if getattr(model.config, "_attn_implementation", None) == NAME:
        return
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(NAME)
    if getattr(model.config, "_attn_implementation", None) != NAME:
        raise ValueError(f"model {model.__class__.__name__} does not accept a custom attention implementation "
                         "(it does not use transformers' AttentionInterface)")


def patch(model, method: Any = "magicpig", backend: str = DEFAULT_BACKEND, **cache_kwargs):
    """One line to make ``model.generate`` decode with ``method`` (an AttentionMethod or spec string).

    backend: ``reference`` (everything on the model's device, pure torch) or ``offload`` (MagicPIG's
    heterogeneous split: offloaded keys/values and hash tables in CPU memory, computed by the CPU module).
    Extra keyword arguments go to ``MagicPIGCache``. Returns the model.
    """
    from magicpig.cache import MagicPIGCache
    from magicpig.methods import parse_method

    check_backend(backend)
    method = parse_method(method)
    use_hook(model)
    model._magicpig = {"method": method, "backend": backend, **cache_kwargs}
    model.config.magicpig_method = method.spec()
    model.config.magicpig_backend = backend
    if not getattr(model, "_magicpig_patched", False):
        original = model._prepare_cache_for_generation

        def _prepare_cache(self, generation_config, model_kwargs, *args, **kwargs):
            if model_kwargs.get("cache") is None and model_kwargs.get("past_key_values") is None \
                    and generation_config.use_cache is not False:
                settings = dict(self._magicpig)
                model_kwargs["cache"] = MagicPIGCache(self, settings.pop("method"), settings.pop("backend"),
                                                      **settings)
            return original(generation_config, model_kwargs, *args, **kwargs)

        model._prepare_cache_for_generation = types.MethodType(_prepare_cache, model)
        model._magicpig_patched = True
    return model
