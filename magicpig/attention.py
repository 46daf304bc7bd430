"""The Hugging Face hook: ``attn_implementation="magicpig"`` through transformers' AttentionInterface.

How it plugs in (no modeling file is copied or edited):

* ``register()`` adds the function ``magicpig_attention`` to ``transformers.AttentionInterface`` under the
  name ``"magicpig"`` and transformers' own ``sdpa_mask`` to ``AttentionMaskInterface`` under the same
  name, so the model builds the same boolean 4D mask (or ``None`` for a plain causal pattern) as it does
  for ``sdpa``; a later chunk of a prefill without padding gets ``None`` too (``_mask_for``).
  ``import magicpig`` registers (at once, or when transformers' model code loads).
* Prefill (a query block longer than one token) is exact attention: SDPA over query blocks of
  ``PREFILL_BLOCK`` rows so a long prompt never materialises a full (n, n) score matrix, or kernel 8 for
  a bfloat16 block without a mask on a CPU with AVX512-BF16 (``magicpig.cpu.prefill``).
* Decode (one query token) is computed by the layer's decoder held in a ``magicpig.cache.MagicPIGCache``:
  the configured method (reference backend) or the heterogeneous device + CPU split (offload backend).
  The cache's ``update`` runs right before the attention call of the same layer and marks that layer as
  active for the current thread (``magicpig.active_layer``); the attention function reads it from there.
* ``patch(model, method, backend=...)`` switches a loaded model to the hook and makes ``model.generate``
  create a ``MagicPIGCache`` with that method when the caller passes none; as a context manager it
  switches the model back when the block ends.

Usage::

    import magicpig
    model = AutoModelForCausalLM.from_pretrained(path)
    with magicpig.patch(model, "magicpig:K=10,L=150", backend="offload"):
        out = model.generate(input_ids, max_new_tokens=32)
    # or, at load time, with an explicit cache:
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="magicpig")
    out = model.generate(input_ids, max_new_tokens=32, cache=magicpig.MagicPIGCache(model, "magicpig"))
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import sys
from typing import Any

import torch
import torch.nn.functional as F

from magicpig.active_layer import get_active
from magicpig.backends import DEFAULT_BACKEND
from magicpig.methods import AttentionMethod
from magicpig.options import DecodeOptions

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
    Without a mask, bfloat16 blocks (bfloat16 inputs, or any under bfloat16 autocast, where SDPA would
    attend them in bfloat16) on a CPU with AVX512-BF16 go to kernel 8 in one call (``magicpig.cpu.prefill``),
    the rest to SDPA.
    """
    if mask is None and query.device.type == "cpu" and (
            query.dtype == torch.bfloat16 or torch.get_autocast_dtype("cpu") == torch.bfloat16
            and torch.is_autocast_enabled("cpu")):
        from magicpig.cpu.prefill import prefill_attention, prefill_kernel_usable

        if prefill_kernel_usable():  # else no bfloat16 copies: SDPA casts for itself under autocast
            bf16 = [t.to(torch.bfloat16) for t in (query, key, value)]  # what autocast's SDPA would attend
            fast = prefill_attention(*bf16, scaling)
            if fast is not None:
                return fast.to(torch.bfloat16)
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
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, magicpig_attention)
    # class-wide: ALL_MASK_ATTENTION_FUNCTIONS sees it
    AttentionMaskInterface.register(NAME, _mask_for(sdpa_mask))
    _registered = True


def _mask_for(sdpa_mask):
    """transformers' ``sdpa_mask``, except that a plain causal pattern over the last ``q_length`` of
    ``kv_length`` positions without padding (a later chunk of a chunked prefill) gives None:
    ``exact_attention`` reads None as exactly that pattern, so such a chunk builds no (q, kv) mask and may
    reach kernel 8."""
    from transformers.masking_utils import causal_mask_function

    def magicpig_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=causal_mask_function,
                      attention_mask=None, local_size=None, allow_is_causal_skip=True, **kwargs):
        plain = (allow_is_causal_skip and mask_function is causal_mask_function and local_size is None
                 and isinstance(q_offset, int) and kv_offset == 0 and q_offset + q_length == kv_length
                 and (attention_mask is None or bool(attention_mask.all())))
        if plain:
            return None
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
                         local_size=local_size, allow_is_causal_skip=allow_is_causal_skip, **kwargs)

    return magicpig_mask


_INTERFACE_MODULE = "transformers.modeling_utils"  # defines AttentionInterface; every model class imports it


def register_when_transformers_loads() -> None:
    """``register()`` now if transformers' model code is loaded, else right after it loads (an import hook
    that removes itself), so that ``attn_implementation="magicpig"`` works after ``import magicpig``
    while that import stays free of transformers (whose model code takes seconds to import)."""
    if _INTERFACE_MODULE in sys.modules:
        register()
    elif not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands ``transformers.modeling_utils`` a loader that registers after it runs."""

    def find_spec(self, name, path, target=None):
        if name != _INTERFACE_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):  # get_source, get_filename, ... of the wrapped loader
        return getattr(self.inner, name)

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        try:
            register()
        except ImportError:  # a transformers without these interfaces: use_hook() reports it when used
            pass


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


# ---- magicpig.patch: switch a loaded model, and switch it back ------------------------------------------
_MISSING = object()
_CONFIG_ATTRS = ("magicpig_method", "magicpig_backend")  # written on the config, so a saved config says so
_UNDO, _ENTERED = "_magicpig_undo", "_magicpig_entered"  # the saved states, the `with` blocks' indices in it


class _Patched:
    """Mixed in front of a patched model's class (``_patched_class``): ``generate`` gets a
    ``MagicPIGCache`` with the patch's method and options when the caller passes no cache, and a
    ``with`` block around ``patch`` restores the model on exit."""

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        if model_kwargs.get("cache") is None and model_kwargs.get("past_key_values") is None \
                and generation_config.use_cache is not False:
            from magicpig.cache import MagicPIGCache

            settings = self._magicpig
            key = "cache" if "cache" in inspect.signature(self.forward).parameters else "past_key_values"
            model_kwargs[key] = MagicPIGCache(self, settings["method"], options=settings["options"],
                                              generator=settings["generator"])
        return super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def __enter__(self):
        self.__dict__.setdefault(_ENTERED, []).append(len(self.__dict__[_UNDO]) - 1)
        return self

    def __exit__(self, *exc) -> bool:
        index = self.__dict__[_ENTERED].pop()
        undo = self.__dict__[_UNDO]
        state = undo[index]
        del undo[index:]
        _restore(self, state)
        return False


_patched_classes: dict[type, type] = {}


def _patched_class(cls: type) -> type:
    """``cls`` with ``_Patched`` in front, under the same name and module (so ``save_pretrained`` records
    the original architecture and transformers' checks of the class's source file read the model's)."""
    if issubclass(cls, _Patched):
        return cls
    if cls not in _patched_classes:
        _patched_classes[cls] = type(cls.__name__, (_Patched, cls),
                                     {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _patched_classes[cls]


def _snapshot(model) -> dict:
    """What ``patch`` changes on ``model``: its class, attention implementation, the config attributes it
    writes and the model's ``_magicpig*`` attributes (but the undo records themselves)."""
    return {"class": type(model), "attn": model.config._attn_implementation,
            "config": {name: model.config.__dict__.get(name, _MISSING) for name in _CONFIG_ATTRS},
            "attrs": {name: value for name, value in model.__dict__.items()
                      if name.startswith("_magicpig") and name not in (_UNDO, _ENTERED)}}


def _restore(model, state: dict) -> None:
    model.__class__ = state["class"]
    if model.config._attn_implementation != state["attn"]:
        model.set_attn_implementation(state["attn"])
    for name, value in state["config"].items():
        if value is _MISSING:
            model.config.__dict__.pop(name, None)
        else:
            setattr(model.config, name, value)
    for name in [n for n in model.__dict__ if n.startswith("_magicpig") and n not in (_UNDO, _ENTERED)]:
        del model.__dict__[name]
    model.__dict__.update(state["attrs"])
    if not model.__dict__.get(_UNDO) and not model.__dict__.get(_ENTERED):
        model.__dict__.pop(_UNDO, None)
        model.__dict__.pop(_ENTERED, None)


def patch(model, method: AttentionMethod | str = "magicpig", backend: str = DEFAULT_BACKEND, *,
          generator: torch.Generator | None = None, offload_impl: str = "auto", concurrent: bool = True,
          offload_dtype: Any = None, options: DecodeOptions | None = None):
    """Make ``model.generate`` decode with ``method`` (an AttentionMethod or spec string); returns ``model``.

    backend: ``reference`` (everything on the model's device, pure torch) or ``offload`` (MagicPIG's
    heterogeneous split: offloaded keys/values and hash tables in CPU memory, computed by the CPU module);
    offload_impl / concurrent / offload_dtype: see ``DecodeOptions`` (or pass ``options``; its ``linear``
    and ``forward`` do not apply to ``generate``); generator: for randomised methods (oracle).

    The model switches to the ``"magicpig"`` attention implementation and ``generate`` creates a
    ``MagicPIGCache`` whenever the caller passes no cache. Used as a context manager, the patch is undone
    when the block ends: the model's class, attention implementation, config and attributes are as before.
    Called alone it stays in place. The patched model is an instance of a subclass of its class with the
    same name (``type(model)`` differs; ``isinstance`` holds).

    >>> import torch, transformers, magicpig
    >>> _ = torch.manual_seed(0)
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    >>> model = transformers.LlamaForCausalLM(config).eval()
    >>> ids = torch.randint(3, 64, (1, 200))
    >>> with magicpig.patch(model, "magicpig:K=4,L=8,sinks=2,local=8"):
    ...     out = model.generate(ids, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    >>> type(out.past_key_values).__name__, out.sequences.shape[1]
    ('MagicPIGCache', 204)
    >>> model.config._attn_implementation  # restored
    'sdpa'
    """
    from magicpig.methods import parse_method

    options = DecodeOptions.of(options, backend=backend, offload_impl=offload_impl, concurrent=concurrent,
                               offload_dtype=offload_dtype)
    method = parse_method(method)
    state = _snapshot(model)
    use_hook(model)
    model.__class__ = _patched_class(type(model))
    model.__dict__.setdefault(_UNDO, []).append(state)
    model._magicpig = {"method": method, "options": options, "generator": generator}
    model.config.magicpig_method = method.spec()
    model.config.magicpig_backend = options.backend
    return model
