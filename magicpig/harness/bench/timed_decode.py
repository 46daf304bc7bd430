"""One row's decode, timed step by step: stock transformers (``time_stock``) or the engine (``time_engine``);
llama.cpp's is ``llamacpp.time_llamacpp``. Each returns the same dict: the seconds of every step, warmup
included, the set-up time, the sampled fraction, the engine's time breakdown and who ran the linear layers
and the layer loop."""
from __future__ import annotations

import inspect
import time

import torch

from magicpig.harness.bench.decode_options import WEIGHTS


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def time_stock(net, pre, steps: int, warmup: int, after_step=None) -> dict:
    """Stock transformers decode (SDPA + DynamicCache holding ``pre``'s context): per step the forward of
    one token per sequence, the greedy pick and the mask update, as ``model.generate`` does them.
    after_step(i): called after step i (0-based) is timed, outside its time."""
    from transformers import DynamicCache

    from magicpig import attention as _attention

    device = next(net.parameters()).device
    previous = getattr(net.config, "_attn_implementation", None)
    net.set_attn_implementation("sdpa")
    try:
        t0 = time.perf_counter()
        cache = DynamicCache(config=net.config)
        for i, (k, v) in enumerate(zip(pre.keys, pre.values)):
            cache.update(k, v, i)  # DynamicLayer concatenates: the batch copies are made here
        B, n = pre.batch, pre.n
        cache_kw = "cache" if "cache" in inspect.signature(net.forward).parameters else "past_key_values"
        mask = torch.ones(B, n, dtype=torch.long, device=device)
        tokens = pre.logits.argmax(-1)[:, None]
        _sync(device)
        setup = time.perf_counter() - t0
        step_seconds = []
        for t in range(warmup + steps):
            t_step = time.perf_counter()
            mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
            pos = torch.full((B, 1), n + t, dtype=torch.long, device=device)
            out = net(input_ids=tokens, attention_mask=mask, position_ids=pos, **{cache_kw: cache},
                      cache_position=torch.tensor([n + t], device=device), use_cache=True, logits_to_keep=1)
            tokens = out.logits[:, -1].argmax(-1)[:, None]
            _sync(device)
            step_seconds.append(time.perf_counter() - t_step)
            if after_step is not None:
                after_step(t)
        del cache, out
    finally:
        if previous == _attention.NAME:
            _attention.use_hook(net)
        elif previous:
            net.set_attn_implementation(previous)
    return {"step_seconds": step_seconds, "setup_seconds": setup, "sampled_fraction": 1.0, "timings": None,
            "linear": "torch", "forward": "transformers"}


def time_engine(net, tokenizer, pre, spec: str, backend: str, steps: int, warmup: int,
                offload_dtype: str | None = None, linear: str = "auto", forward: str = "auto",
                weights: str = WEIGHTS, after_step=None) -> dict:
    """Decode ``pre`` with ``Engine`` (backend ``reference`` / ``offload``) for warmup + steps forwards;
    linear / forward / weights: the engine's ``linear_impl`` / ``decode_forward`` / ``decode_weights``;
    after_step: ``Engine.decode``'s."""
    from magicpig.engine import Engine, GenerationConfig

    engine = Engine(net, tokenizer, backend=backend, allow_long_context=True, offload_dtype=offload_dtype,
                    linear_impl=linear, decode_forward=forward, decode_weights=weights)
    # n new tokens take n - 1 decode forwards (the first comes from the prefill's logits)
    res = engine.decode(pre, spec, GenerationConfig(max_new_tokens=warmup + steps + 1, ignore_eos=True),
                        after_step=after_step)[0]
    return {"step_seconds": res.step_seconds, "setup_seconds": res.setup_seconds, "sampled_fraction": res.cost,
            "timings": getattr(res, "timings", None), "linear": res.linear, "forward": res.forward}
