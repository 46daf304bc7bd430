"""The decode-time KV cache: a transformers ``Cache`` whose layers decode with an attention method.

Prefill fills each layer like transformers' DynamicCache (full keys/values on the model's device). At the
end of prefill each layer gets a decoder (``magicpig.decoders``), chosen by the method itself
(``AttentionMethod.make_decoder``) from the cache's ``DecoderContext``: backend ``reference`` decodes
every layer with the method's own ``attend``; backend ``offload`` runs MagicPIG's system path (the
dense layers fused and exact, the sparse ones split between the device and the CPU).

Cost accounting: each decode step of each sparse layer records used/candidates per row;
``pop_step()`` returns the step's mean over sparse layers and ``CostMeter`` sums those steps per row
(the one accumulator: ``Engine.decode`` reports it).
"""
from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

from magicpig.active_layer import set_active
from magicpig.backends import DEFAULT_BACKEND
from magicpig.cpu.torch_twin import offload_layer_class
from magicpig.decoders import TIMING_KEYS, DecoderContext
from magicpig.methods import AttentionMethod, KeyLayout, parse_method
from magicpig.options import DecodeOptions


class MagicPIGLayer(DynamicLayer):
    """One layer: a DynamicLayer during prefill, a decoder afterwards."""

    def __init__(self, cache: "MagicPIGCache", layer_idx: int):
        super().__init__()
        self.cache = cache
        self.layer_idx = layer_idx
        self.decoder = None  # a magicpig.decoders decoder once decoding starts
        self.pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        set_active(self.cache, self.layer_idx)  # read by this layer's attention call, right after
        if self.decoder is not None:
            if key_states.shape[2] != 1:
                raise RuntimeError("MagicPIGCache: after prefill only one token per step can be appended")
            self.decoder.append(key_states, value_states)
            return key_states, value_states
        if (key_states.shape[2] == 1 and not self.cache.prefill_only and self.get_seq_length() > 0):
            self.pending = (key_states, value_states)  # first decode step; decoder built in attend()
            return key_states, value_states
        return super().update(key_states, value_states, *args, **kwargs)

    def get_seq_length(self) -> int:
        if self.decoder is not None:
            return self.decoder.n
        return super().get_seq_length()


class MagicPIGCache(Cache):
    """transformers Cache that decodes with ``method``.

    model: a transformers model (or its config); method: AttentionMethod or spec string; options: the
    decode's ``DecodeOptions`` (or its fields ``backend``, ``offload_impl``, ``concurrent``,
    ``offload_dtype`` as keyword arguments: the CPU layer class is resolved at the first offloaded layer;
    see ``magicpig.decoders.OffloadDecoder``); generator: torch.Generator for randomised methods (oracle);
    prefill_only: never switch to decoding (the engine's prefill cache).

    Each layer's decoder is the method's choice (``method.make_decoder``); ``layer_decoders`` names them.

    ``timings``: seconds summed over the decode steps (keys ``TIMING_KEYS``): ``hash`` (query hashing),
    ``cpu_attend`` (the CPU module's wall time: retrieval + attention), ``cpu_retrieve`` (its retrieval),
    ``cpu_wait`` (the main thread held by the CPU part; it runs there, so equal to ``cpu_attend``),
    ``transfer`` (host <-> device copies; on a GPU the wait for the query's copies), ``exact`` (the fused
    exact parts: static tokens and dense layers; on a GPU the time to queue them).

    Cost accounting: each decode step of each sparse layer (not in ``method.dense_layer_set``) records
    used/candidates per row, averaged over heads; ``pop_step()`` returns the mean over sparse layers.
    """

    def __init__(self, model, method: AttentionMethod | str = "magicpig", backend: str = DEFAULT_BACKEND, *,
                 generator: torch.Generator | None = None, prefill_only: bool = False,
                 offload_impl: str = "auto", concurrent: bool = True, offload_dtype: Any = None,
                 options: DecodeOptions | None = None):
        self.options = DecodeOptions.of(options, backend=backend, offload_impl=offload_impl, concurrent=concurrent,
                                        offload_dtype=offload_dtype)
        config = getattr(model, "config", model)
        config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        self.num_layers = int(config.num_hidden_layers)
        windowed = "sliding_attention" in (getattr(config, "layer_types", None) or ())
        if windowed or (type(config).__name__.startswith("Mistral") and getattr(config, "sliding_window", None)):
            raise ValueError(
                f"model config has sliding_window={getattr(config, 'sliding_window', None)} (sliding-window "
                "attention layers); MagicPIG decodes full-attention layers only: load the model with "
                "sliding_window=None (and use_sliding_window=False for Qwen2)")
        self.method = parse_method(method)
        self.generator = generator
        self.prefill_only = prefill_only
        self.timings: dict[str, float] = {key: 0.0 for key in TIMING_KEYS}
        self.dense_layers = self.method.dense_layer_set(self.num_layers)
        impl = self.options.offload_impl
        self.context = DecoderContext(options=self.options, dense_layers=self.dense_layers, generator=generator,
                                      offload_layer=lambda: offload_layer_class(impl), timings=self.timings)
        self._step: list[tuple[torch.Tensor, torch.Tensor, Any]] = []  # (used, candidates, cost1) per layer
        self._whole_step: tuple[torch.Tensor, torch.Tensor, float] | None = None  # record_step's
        self.decode_loop: Any = None  # DecodeForward's whole-step loop over these decoders (False: none applies)
        super().__init__(layers=[MagicPIGLayer(self, i) for i in range(self.num_layers)])

    @property
    def backend(self) -> str:
        return self.options.backend

    # -- building decoders -----------------------------------------------------------------------------
    def is_sparse(self, layer_idx: int) -> bool:
        return layer_idx not in self.dense_layers

    @property
    def has_sparse_layers(self) -> bool:
        return len(self.dense_layers) < self.num_layers

    def build_decoder(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor, layout: KeyLayout):
        """The method's decoder for one layer: k, v (B, H_kv, n0, d) prefill keys/values (not modified)."""
        return self.method.make_decoder(k, v, layout, layer_idx, self.context)

    @property
    def layer_decoders(self) -> list[str]:
        """The kind of each layer's decoder, one per layer: ``reference``, ``exact`` or ``offload``
        (``magicpig.decoders.DECODER_KINDS``), ``""`` for a layer that has not started decoding."""
        return [layer.decoder.kind if layer.decoder is not None else "" for layer in self.layers]

    def start_decoding(self, keys: list[torch.Tensor], values: list[torch.Tensor], layout: KeyLayout) -> None:
        """Build every layer's decoder from prefill keys/values (B, H_kv, n0, d) per layer (not modified)."""
        if len(keys) != self.num_layers:
            raise ValueError(f"expected keys for {self.num_layers} layers, got {len(keys)}")
        for i, layer in enumerate(self.layers):
            layer.decoder = self.build_decoder(i, keys[i], values[i], layout.to(keys[i].device))
            layer.keys = layer.values = None
            layer.is_initialized = True
            layer.pending = None
        self.decode_loop = None

    def is_decoding(self, layer_idx: int) -> bool:
        layer = self.layers[layer_idx]
        return layer.decoder is not None or layer.pending is not None

    # -- one decode step of one layer (called by the attention function) -------------------------------
    def attend(self, layer_idx: int, q: torch.Tensor, scale: float | None,
               mask: torch.Tensor | None = None) -> torch.Tensor:
        """q: (B, H, d) -> output (B, H, d) float32. Records the layer's cost for the current step."""
        if layer_idx == 0:
            self.pop_step()  # generate() path: a new step begins (the engine pops after every forward)
        layer = self.layers[layer_idx]
        if layer.decoder is None:  # generate() path: prefill just ended; padding read from the mask
            k0, v0 = layer.keys, layer.values
            n0 = k0.shape[2]
            start = torch.zeros(k0.shape[0], dtype=torch.long, device=k0.device)
            if mask is not None:
                m = mask[:, 0, -1, :n0]
                m = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
                first = m.to(torch.int8).argmax(-1)
                start = torch.where(m.any(-1), first, start).to(k0.device)
            layout = KeyLayout(n0, start, torch.full_like(start, n0))
            layer.decoder = self.build_decoder(layer_idx, k0, v0, layout)
            self.decode_loop = None
            layer.keys = layer.values = None
            k_new, v_new = layer.pending
            layer.pending = None
            layer.decoder.append(k_new, v_new)
        res = layer.decoder.attend(q, scale)
        if self.is_sparse(layer_idx):
            self._step.append((res.used, res.candidates, res.cost1))  # reduced once per step in pop_step
        return res.output

    def record_step(self, used: torch.Tensor, candidates: torch.Tensor, cost1: float) -> None:
        """A whole step's records at once (the decode loop's, which runs no ``attend``): used and candidates
        (sparse layers, B, H) float32 in layer order, cost1 their mean; ``pop_step`` reads them as it reads
        the per-layer records of ``attend``."""
        self._step, self._whole_step = [], (used, candidates, cost1)

    def pop_step(self) -> tuple[torch.Tensor, float] | None:
        """Mean over sparse layers of this step's (cost2 per row (B,), cost1); None if no sparse layer ran.
        Clears the step's records (sums over steps: ``CostMeter``)."""
        if self._step:
            device = self._step[0][0].device
            used = torch.stack([u.detach().to(device, torch.float32) for u, _, _ in self._step])  # (layers, B, H)
            candidates = torch.stack([c.detach().to(device, torch.float32) for _, c, _ in self._step])
            cost1 = sum(float(c) for _, _, c in self._step) / len(self._step)
        elif self._whole_step is not None and len(self._whole_step[0]):
            used, candidates, cost1 = self._whole_step
        else:
            self._whole_step = None
            return None
        self._step, self._whole_step = [], None
        cost2 = (used / candidates.clamp_min(1)).mean(-1).mean(0).cpu()  # per layer over heads, then layers
        return cost2, cost1


class CostMeter:
    """Per-row sums over the decode steps of one batch: the one cost accumulator of a decode.

    ``add(step, active)`` after every decode forward: step = ``MagicPIGCache.pop_step()``, active (B,)
    bool = the rows that consumed a real token in it (only those count, and count a step even when no
    sparse layer ran). ``row(b, sparse)`` -> (cost, cost1, steps) of row b: the means of cost2 and
    cost1 over its steps; a model without sparse layers costs 1 (dense) per step, 0 without steps.
    """

    def __init__(self, batch: int):
        self.cost2 = torch.zeros(batch)
        self.cost1 = torch.zeros(batch)
        self.steps = torch.zeros(batch)

    def add(self, step: tuple[torch.Tensor, float] | None, active: torch.Tensor) -> None:
        if step is not None:
            cost2, cost1 = step
            self.cost2 += torch.where(active, cost2, torch.zeros_like(cost2))
            self.cost1 += active.float() * cost1
        self.steps += active.float()

    def row(self, b: int, sparse: bool) -> tuple[float, float, int]:
        s = float(self.steps[b])
        cost = float(self.cost2[b] / s) if s and sparse else (1.0 if s and not sparse else 0.0)
        cost1 = float(self.cost1[b] / s) if s and sparse else 0.0
        return cost, cost1, int(s)
