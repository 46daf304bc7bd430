"""``self_check``: the offload decode path over the compiled layer against the torch reference, for every
ISA variant this CPU runs (``magicpig build`` runs it)."""
from __future__ import annotations

import os

import torch

from magicpig.cpu.env import ISA_ENV, supported_isas
from magicpig.cpu.layer import OffloadedLayer

CHECK_TOLERANCE = 1e-4  # max abs error of output and lse (float32 store)
CHECK_TIE = 1e-4  # check data has no key / query projection this close to 0 (see _check_data)


def self_check(seed: int = 0) -> dict[str, float]:
    """Run the decode path the offload backend runs -- a ``magicpig.decoders.OffloadDecoder`` over the
    compiled ``OffloadedLayer``: kernel 0 hashing keys and queries, the table build, retrieval and the
    attention kernel, merged by LSE with the exact static part -- against the torch reference
    ``MagicPIG.attend``, for every ISA variant this CPU runs (each decoder built under ``$MAGICPIG_ISA``).

    The layer is small and awkward: GQA with 3 query heads per kv-head, head_dim 36, K*L = 52 (not a
    multiple of kernel 0's column tile), one left-padded sequence and one holding generated keys; it is
    checked at the first decode step and after one appended key. Returns {isa: max abs error of output
    and lse}; raises RuntimeError naming the variant when it samples other keys than the reference or
    differs from it by more than ``CHECK_TOLERANCE``.
    """
    from magicpig.decoders import OffloadDecoder
    from magicpig.methods import MagicPIG

    method = MagicPIG(K=4, L=13, sinks=4, local=16)
    k, v, layout, steps = _check_data(method, seed)
    errors = {}
    saved = os.environ.get(ISA_ENV)
    try:
        for name in supported_isas():
            os.environ[ISA_ENV] = name
            decoder = OffloadDecoder(method, k, v, layout, 0, OffloadedLayer)
            if decoder.cpu_layer.isa != name:
                raise RuntimeError(f"self-check ({name}): the layer was planned for {decoder.cpu_layer.isa}")
            worst = 0.0
            for step, (q, ref, new_kv) in enumerate(steps):
                got = decoder.attend(q, None)
                if not (torch.equal(got.used, ref.used) and torch.equal(got.candidates, ref.candidates)):
                    raise RuntimeError(f"self-check ({name}, step {step}): sampled counts differ from the "
                                       "reference")
                err = float((got.output - ref.output).abs().max())
                lse_err = float((got.lse - ref.lse).abs().max())
                if not (err < CHECK_TOLERANCE and lse_err < CHECK_TOLERANCE):
                    raise RuntimeError(f"self-check ({name}, step {step}): output differs from the reference "
                                       f"by {err:.3g}, lse by {lse_err:.3g}")
                worst = max(worst, err, lse_err)
                if new_kv is not None:
                    decoder.append(*new_kv)
            errors[name] = worst
    finally:
        if saved is None:
            os.environ.pop(ISA_ENV, None)
        else:
            os.environ[ISA_ENV] = saved
    return errors


def _check_data(method, seed: int, tries: int = 100):
    """(k, v, layout, steps) of the self-check: steps = [(q, reference result, (k_new, v_new) or None)].

    Kernel 0 sums a projection in another order than torch, so a code bit may differ from the reference's
    where a projection is within rounding of 0 (``hash_keys``); such a tie would make a correct kernel
    sample another key. The data are therefore drawn (seed, seed + 1, ...) until no projection of an
    offloaded key or a query lies within ``CHECK_TIE`` of 0: any difference left is a fault."""
    from magicpig.methods import KeyLayout
    from magicpig.methods.base import masked_keys

    B, Hkv, G, d, n = 2, 2, 3, 36, 333
    layout = KeyLayout(n, torch.tensor([0, 31]), torch.tensor([n - 8, n]))  # left padding; generated keys
    for s in range(seed, seed + tries):
        gen = torch.Generator().manual_seed(s)
        k = torch.randn(B, Hkv, n, d, generator=gen) + 0.7
        v = torch.randn(B, Hkv, n, d, generator=gen)
        qs = [torch.randn(B, Hkv * G, d, generator=gen) * 2 for _ in range(2)]
        k_new, v_new = torch.randn(B, Hkv, 1, d, generator=gen) + 0.7, torch.randn(B, Hkv, 1, d, generator=gen)
        state = method.prepare(k, v, layout)
        proj = state.projections  # (Hkv, d, K*L)
        keys = (masked_keys(k, layout) - state.center[:, :, None]) @ proj[None]  # (B, Hkv, n, K*L)
        key_gap = keys.abs().amin(-1).masked_fill(~state.offloaded[:, None, :], float("inf")).min()
        query_gap = min(float((q.reshape(B, Hkv, G, d) @ proj[None]).abs().min()) for q in qs)
        if min(float(key_gap), query_gap) < CHECK_TIE:
            continue
        k2, v2 = torch.cat([k, k_new], 2), torch.cat([v, v_new], 2)
        steps = [(qs[0], method.attend(qs[0], k, v, layout, state=state), (k_new, v_new)),
                 (qs[1], method.attend(qs[1], k2, v2, layout.grow(1), state=state), None)]
        return k, v, layout, steps
    raise RuntimeError(f"self-check: no data without projection ties in {tries} draws")  # pragma: no cover
