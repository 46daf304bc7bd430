"""The five attention-level experiments over a ``Capture``; each returns a pandas DataFrame with one row
per (layer, head) or (layer, method setting), averaged over the captured decode queries.

1. ``spread``     share of attention mass in the top 20% of keys, with and without the sink token.
2. ``error``      relative output error ‖ô − o‖/‖o‖ vs budget: TopK, oracle sampling, MagicPIG (K, L),
                  and TopK / oracle at the key count each MagicPIG setting actually used.
3. ``kl_grid``    sampled fraction of MagicPIG on real keys over a (K, L) grid, beside the formula for
                  well-spread keys, the prediction from the measured cosine distribution, and Table 9.
4. ``centering``  sampled fraction and output error with and without key centering.
5. ``geometry``   cosines of queries and keys to the sink key and to the key mean.
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd
import torch

from magicpig import lsh
from magicpig.methods import MagicPIG, parse_method, split_static_offloaded

from magicpig_tasks import paper

from magicpig_tasks.experiments.capture import Capture
from magicpig_tasks.experiments.problems import (LayerBatch, StateCache, iter_problems, layer_batch, query_subset, relative_error,
                       run_method, select_layers)

GRID_K = (7, 8, 9, 10, 11)
GRID_L = (75, 100, 120, 150, 200, 300)
DEFAULT_BUDGETS = (0.005, 0.01, 0.02, 0.04, 0.1)


def _dense_flag(capture: Capture, layer: int) -> bool:
    return layer in MagicPIG().dense_layer_set(capture.num_layers)


# ---- 1. attention spread ----------------------------------------------------------------------------------
def attention_probs(batch: LayerBatch, scale: float) -> torch.Tensor:
    """Exact softmax of every query of a LayerBatch over its visible keys: (Q, H, n) float32."""
    qg = batch.grouped_queries()  # (Hkv, Q, G, d)
    logits = torch.einsum("gqhd,gnd->gqhn", qg, batch.k) * scale
    logits = logits.masked_fill(~batch.valid[None, :, None, :], float("-inf"))
    probs = torch.softmax(logits, -1)  # (Hkv, Q, G, n)
    Hkv, Q, G, n = probs.shape
    return probs.permute(1, 0, 2, 3).reshape(Q, Hkv * G, n)


def top_mass(probs: torch.Tensor, frac: float, counts: torch.Tensor | None = None) -> torch.Tensor:
    """Share of each row's mass (rows of ``probs`` (..., n), renormalised to sum 1) held by its top
    ceil(frac·m) entries, m = ``counts`` (the row's number of candidate keys, broadcastable to
    probs.shape[:-1]; default n). Entries outside a row's candidates must be 0."""
    n = probs.shape[-1]
    m = torch.full(probs.shape[:-1], float(n)) if counts is None else counts.float().expand(probs.shape[:-1])
    k = torch.ceil(frac * m).clamp(1, n).long()  # (...,)
    p = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)
    cum = p.sort(-1, descending=True).values.cumsum(-1)
    return cum.gather(-1, (k - 1).unsqueeze(-1)).squeeze(-1)


def keys_for_mass(probs: torch.Tensor, mass: float, counts: torch.Tensor | None = None) -> torch.Tensor:
    """Fraction of a row's ``counts`` keys (largest first) needed to cover ``mass`` of it (renormalised)."""
    n = probs.shape[-1]
    m = torch.full(probs.shape[:-1], float(n)) if counts is None else counts.float().expand(probs.shape[:-1])
    p = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)
    cum = p.sort(-1, descending=True).values.cumsum(-1)
    return ((cum < mass).sum(-1) + 1).float().clamp(max=m) / m


def spread(capture: Capture, *, layers: list[int] | None = None, top_frac: float = 0.2,
           sink_tokens: int = 1, max_queries: int | None = None) -> pd.DataFrame:
    """Rows per (layer, head): mean over queries of the top-``top_frac`` mass with all visible keys
    (``top_mass_with_sink``) and with the first ``sink_tokens`` keys removed and the rest renormalised
    (``top_mass_without_sink``), the sink's mass, the top-2% mass without the sink and the fraction of
    keys covering 90% of the mass without the sink."""
    if not 0 < top_frac <= 1:
        raise ValueError(f"top_frac must be in (0, 1], got {top_frac}")
    if sink_tokens < 0:
        raise ValueError(f"sink_tokens must be >= 0, got {sink_tokens}")
    rows = []
    for layer in select_layers(capture, layers):
        batch = layer_batch(capture, layer, queries=query_subset(capture, max_queries))
        probs = attention_probs(batch, capture.scale)  # (Q, H, n)
        count = batch.valid.sum(-1)[:, None]  # (Q, 1)
        rest = probs[..., sink_tokens:]
        stats = {
            "top_mass_with_sink": top_mass(probs, top_frac, count),
            "top_mass_without_sink": top_mass(rest, top_frac, count - sink_tokens),
            "sink_mass": probs[..., :sink_tokens].sum(-1),
            "top2pct_mass_without_sink": top_mass(rest, 0.02, count - sink_tokens),
            "keys_for_90pct_without_sink": keys_for_mass(rest, 0.9, count - sink_tokens),
        }
        means = {k: v.mean(0) for k, v in stats.items()}  # (H,)
        for h in range(capture.num_heads):
            rows.append({"layer": layer, "head": h, "dense_in_magicpig": _dense_flag(capture, layer),
                         "top_frac": top_frac, "sink_tokens": sink_tokens,
                         **{k: float(v[h]) for k, v in means.items()}, "queries": probs.shape[0]})
    return pd.DataFrame(rows)


# ---- 2. output error vs budget ----------------------------------------------------------------------------
def _method_rows(capture, layer, specs, dense_out, states, gen, queries):
    """One row per (spec, meta) of ``specs``: cost and relative error over the problems of ``layer``."""
    rows = []
    for spec, meta in specs:
        method = parse_method(spec)
        errs, costs, used = [], [], []
        for pb, exact in zip(iter_problems(capture, layer, queries), dense_out):
            res = run_method(method, pb, capture.scale, states=states, generator=gen)
            if not torch.isfinite(res.output).all():
                raise RuntimeError(f"{spec} produced a non-finite output at layer {layer}")
            errs.append(relative_error(res.output, exact)[0])
            used.append(res.used[0].float())
            costs.append(res.cost2)
        e = torch.stack(errs)  # (Q, H)
        u = torch.stack(used)  # (Q, H)
        rows.append({"layer": layer, "dense_in_magicpig": _dense_flag(capture, layer), "spec": method.spec(),
                     "method": method.name, "setting": _setting(method.name, meta), **meta,
                     "cost2": sum(costs) / len(costs),
                     "keys_used": float(u.mean()), "rel_error_mean": float(e.mean()),
                     "rel_error_median": float(e.median()), "queries": e.shape[0],
                     "head_rel_error": _join(e.mean(0)), "head_keys_used": _join(u.mean(0))})
    return rows


def _join(x: torch.Tensor) -> str:
    """Per-head values as one CSV cell: ';'-separated, head 0 first (``split_heads`` reads them back)."""
    return ";".join(f"{float(v):.6g}" for v in x)


def split_heads(cell: str) -> list[float]:
    return [float(v) for v in str(cell).split(";")]


def _setting(name: str, meta: dict) -> str:
    """A label that is the same across layers: ``topk@0.02``, ``magicpig(10,150)``, ``topk=magicpig(10,150)``
    (the pair as magicpig.lsh.format_kl writes it)."""
    if meta.get("matched_to"):
        m = parse_method(meta["matched_to"])
        return f"{name}=magicpig({lsh.format_kl(m.K, m.L)})"
    if name == "magicpig":
        tail = "" if meta.get("centering", True) else ",uncentered"
        return f"magicpig({lsh.format_kl(meta['K'], meta['L'])}{tail})"
    return f"{name}@{meta.get('budget')}"


def paper_kl() -> list[tuple[int, int]]:
    """The paper's RULER/LongBench (K, L) settings (the paper's Sec. 5, config/paper_reference.yaml)."""
    return [(m.K, m.L) for m in paper.kl_settings("ruler_longbench")]


def _mp_spec(K, L, sinks, local, seed, centering=True) -> str:
    return (f"magicpig:K={K},L={L},sinks={sinks},local={local},seed={43 + seed},"
            f"centering={str(bool(centering)).lower()}")


def error(capture: Capture, *, layers: list[int] | None = None, budgets: Iterable[float] = DEFAULT_BUDGETS,
          kl: Iterable[tuple[int, int]] | None = None, seed: int = 0, sinks: int = 4, local: int = 64,
          matched: bool = True, max_queries: int | None = None) -> pd.DataFrame:
    """Relative output error per (layer, method setting), mean and median over queries × heads.

    TopK and oracle sampling run at each fraction of ``budgets``; MagicPIG at each (K, L) of ``kl`` (default:
    the paper's RULER/LongBench settings).
    With ``matched``, TopK and oracle also run at the number of keys each MagicPIG setting attended in
    that layer (sampled + static, rounded; column ``matched_to`` names the setting). ``cost2`` is the
    measured fraction (MagicPIG: sampled / offloaded; TopK: kept / valid; oracle: unique draws / valid);
    ``keys_used`` the mean count (MagicPIG: sampled keys only).
    """
    budgets = [float(b) for b in budgets]
    kl = [(int(K), int(L)) for K, L in (paper_kl() if kl is None else kl)]
    bad = [b for b in budgets if not b > 0]
    if bad:
        raise ValueError(f"budgets must be > 0 (fractions < 1 or counts >= 1), got {bad}")
    for K, L in kl:
        lsh.check_kl(K, L)
    queries = query_subset(capture, max_queries)
    rows = []
    for layer in select_layers(capture, layers):
        gen = torch.Generator().manual_seed(seed * 1000 + layer)
        states = StateCache()
        dense_out = [run_method("dense", pb, capture.scale).output for pb in iter_problems(capture, layer, queries)]
        mp_specs = [(_mp_spec(K, L, sinks, local, seed), {"budget": None, "K": K, "L": L, "matched_to": ""})
                    for K, L in kl]
        mp_rows = _method_rows(capture, layer, mp_specs, dense_out, states, gen, queries)
        specs = []
        for b in budgets:
            specs += [(f"topk:budget={b}", {"budget": b, "K": None, "L": None, "matched_to": ""}),
                      (f"oracle:budget={b}", {"budget": b, "K": None, "L": None, "matched_to": ""})]
        if matched:
            n_static = _mean_static(capture, layer, sinks, local, queries)
            for r in mp_rows:
                count = max(1, int(round(r["keys_used"] + n_static)))
                tag = f"magicpig:K={r['K']},L={r['L']}"
                specs += [(f"topk:budget={count}", {"budget": count, "K": None, "L": None, "matched_to": tag}),
                          (f"oracle:budget={count}", {"budget": count, "K": None, "L": None, "matched_to": tag})]
        rows += mp_rows + _method_rows(capture, layer, specs, dense_out, states, gen, queries)
    return pd.DataFrame(rows)


def topk_vs_oracle(df: pd.DataFrame) -> pd.DataFrame:
    """TopK against oracle sampling at the same number of distinct keys, per layer.

    For each oracle row of an ``error`` table (budget given as a fraction), TopK's error at the oracle's
    mean number of unique keys is interpolated (log-log, between the TopK rows of the same layer; rows
    outside TopK's range are dropped). Returns layer, oracle budget, unique keys, both errors and their
    ratio ``topk_over_oracle`` (> 1: TopK is worse at equal key count).
    """
    import numpy as np

    rows = []
    plain = df[df["matched_to"].fillna("") == ""] if "matched_to" in df else df
    for layer, g in plain.groupby("layer"):
        tk = g[g["method"] == "topk"].sort_values("keys_used")
        if len(tk) < 2:
            continue
        x, y = np.log(tk["keys_used"].to_numpy()), np.log(tk["rel_error_mean"].clip(lower=1e-12).to_numpy())
        for r in g[g["method"] == "oracle"].itertuples():
            if not x[0] <= np.log(r.keys_used) <= x[-1]:
                continue
            topk_err = float(np.exp(np.interp(np.log(r.keys_used), x, y)))
            rows.append({"layer": layer, "dense_in_magicpig": bool(r.dense_in_magicpig), "oracle_budget": r.budget,
                         "unique_keys": r.keys_used, "oracle_error": r.rel_error_mean, "topk_error": topk_err,
                         "topk_over_oracle": topk_err / max(r.rel_error_mean, 1e-12)})
    return pd.DataFrame(rows)


def topk_vs_oracle_heads(df: pd.DataFrame, spread_df: pd.DataFrame, long_tail_below: float = 0.9) -> pd.DataFrame:
    """TopK against oracle sampling per query head, at the oracle's number of distinct keys of that head.

    ``df``: an ``error`` table (its per-head columns ``head_rel_error`` / ``head_keys_used``); ``spread_df``: the
    ``spread`` table of the same capture. A head is long-tailed when its top-20% mass without the sink
    (``top_mass_without_sink``) is below ``long_tail_below``: the paper's case where TopK loses to sampling.
    Rows: layer, head, dense_in_magicpig, top_mass_without_sink, long_tailed, oracle_budget, unique_keys,
    oracle_error, topk_error, topk_over_oracle (TopK's error interpolated log-log between its budgets)."""
    import numpy as np

    mass = {(int(r.layer), int(r.head)): float(r.top_mass_without_sink) for r in spread_df.itertuples()}
    plain = df[df["matched_to"].fillna("") == ""] if "matched_to" in df else df
    rows = []
    for layer, g in plain.groupby("layer"):
        tk = g[g["method"] == "topk"]
        if len(tk) < 2 or "head_rel_error" not in g:
            continue
        tk_err = np.array([split_heads(c) for c in tk["head_rel_error"]])  # (budgets, H)
        tk_keys = np.array([split_heads(c) for c in tk["head_keys_used"]])
        for r in g[g["method"] == "oracle"].itertuples():
            o_err, o_keys = split_heads(r.head_rel_error), split_heads(r.head_keys_used)
            for h, (oe, ok) in enumerate(zip(o_err, o_keys)):
                order = np.argsort(tk_keys[:, h])
                x = np.log(np.clip(tk_keys[order, h], 1e-12, None))
                y = np.log(np.clip(tk_err[order, h], 1e-12, None))
                if not ok > 0 or not x[0] <= np.log(ok) <= x[-1]:
                    continue
                topk_err = float(np.exp(np.interp(np.log(ok), x, y)))
                m = mass.get((int(layer), h), float("nan"))
                rows.append({"layer": layer, "head": h, "dense_in_magicpig": bool(r.dense_in_magicpig),
                             "top_mass_without_sink": m, "long_tailed": bool(m < long_tail_below),
                             "oracle_budget": r.budget, "unique_keys": ok, "oracle_error": oe,
                             "topk_error": topk_err, "topk_over_oracle": topk_err / max(oe, 1e-12)})
    return pd.DataFrame(rows)


def _mean_static(capture, layer, sinks, local, queries) -> float:
    counts = [float(split_static_offloaded(pb.layout, sinks, local)[0].sum())
              for pb in iter_problems(capture, layer, queries)]
    return sum(counts) / len(counts)


# ---- 3. sampled fraction over the (K, L) grid ---------------------------------------------------------------
def centered_cosines(capture: Capture, layer: int, *, sinks: int = 4, local: int = 64, centering: bool = True,
                     max_queries: int | None = None) -> torch.Tensor:
    """cos(q, k_i - c) of every captured query head against its offloaded keys, flattened (float32).
    ``c`` is the query's mean offloaded key (no centering: c = 0)."""
    batch = layer_batch(capture, layer, sinks=sinks, local=local, queries=query_subset(capture, max_queries))
    cos = batch.cosines(centering)  # (Hkv, Q, G, n)
    return cos[batch.offloaded[None, :, None, :].expand_as(cos)]


def predicted_fraction(cos: torch.Tensor, K: int, L: int, min_collisions: int = 2) -> float:
    """Expected sampled fraction: the mean of u(cos; K, L) over the given cosines."""
    return float(lsh.collision_probability(cos.double(), K, L, min_collisions).mean())


def nested_sampled_fractions(batch: LayerBatch, projections: torch.Tensor, K: int, Ls: list[int], *,
                             centering: bool = True, min_collisions: int = 2, chunk: int = 1024) -> dict[int, float]:
    """Sampled fraction (mean over query heads of sampled / offloaded) for each L of ``Ls``, where the
    (K, L) tables are the first L tables of ``projections`` ((H_kv, d, K*max(Ls)), one set per kv-head).

    Uses MagicPIG's rule exactly (centered keys, query un-centered, >= ``min_collisions`` equal codes);
    with L = max(Ls) and the method's own projections it equals ``MagicPIG.attend(...).cost2``.
    """
    Lmax = max(Ls)
    qg = batch.grouped_queries()  # (Hkv, Q, G, d)
    Hkv, Q, G, d = qg.shape
    fractions = {L: [] for L in Ls}
    for key in sorted({tuple(r.tolist()) for r in batch.offloaded}, key=lambda t: sum(t)):  # query groups
        mask = torch.tensor(key, dtype=torch.bool)
        rows = [j for j in range(Q) if torch.equal(batch.offloaded[j], mask)]
        keys = batch.k[:, mask]  # (Hkv, m, d)
        if centering:
            keys = keys - keys.mean(1, keepdim=True)
        kcodes = lsh.hash_codes(keys, projections, K, Lmax)  # (Hkv, m, Lmax)
        qcodes = lsh.hash_codes(qg[:, rows].reshape(Hkv, len(rows) * G, d), projections, K, Lmax)
        hits = torch.zeros(len(Ls), Hkv, len(rows) * G, dtype=torch.float64)
        for lo in range(0, keys.shape[1], chunk):
            eq = kcodes[:, None, lo:lo + chunk] == qcodes[:, :, None]  # (Hkv, R, c, Lmax)
            count = torch.zeros(eq.shape[:-1], dtype=torch.int32)
            prev = 0
            for i, L in enumerate(Ls):  # tables prev..L-1 added to the running collision count
                count += eq[..., prev:L].sum(-1, dtype=torch.int32)
                prev = L
                hits[i] += (count >= min_collisions).sum(-1)
        m = max(1, keys.shape[1])
        for i, L in enumerate(Ls):
            fractions[L] += (hits[i] / m).flatten().tolist()
    return {L: sum(v) / len(v) for L, v in fractions.items()}


def kl_grid(capture: Capture, *, layers: list[int] | None = None, Ks: Iterable[int] = GRID_K,
            Ls: Iterable[int] = GRID_L, seed: int = 0, sinks: int = 4, local: int = 64,
            centering: bool = True, max_queries: int | None = None) -> pd.DataFrame:
    """Rows per (layer, K, L): ``measured`` sampled fraction on the real keys (mean over queries × heads
    of sampled / offloaded; the L tables of (K, L) are the first L of one (K, max L) draw seeded like the
    method's), ``formula`` (expected_sampled_fraction, well-spread keys), ``predicted`` (mean collision
    probability over the layer's measured centered cosines) and ``paper_table9`` (fractions)."""
    Ks, Ls = [int(k) for k in Ks], sorted(int(x) for x in Ls)
    for K in Ks:
        for L in Ls:
            lsh.check_kl(K, L)
    queries = query_subset(capture, max_queries)
    table9 = paper.table9()
    rows = []
    for layer in select_layers(capture, layers):
        batch = layer_batch(capture, layer, sinks=sinks, local=local, queries=queries)
        cos = batch.cosines(centering)
        cos = cos[batch.offloaded[None, :, None, :].expand_as(cos)]
        for K in Ks:
            proj = MagicPIG(K=K, L=max(Ls), seed=43 + seed).projections(layer, capture.num_kv_heads, capture.head_dim)
            measured = nested_sampled_fractions(batch, proj, K, Ls, centering=centering)
            for L in Ls:
                paper_frac = table9.get(K, {}).get(L)
                rows.append({"layer": layer, "dense_in_magicpig": _dense_flag(capture, layer), "K": K, "L": L,
                             "centering": centering, "measured": measured[L],
                             "predicted": predicted_fraction(cos, K, L),
                             "formula": lsh.expected_sampled_fraction(K, L),
                             "paper_table9": paper_frac})
    return pd.DataFrame(rows)


# ---- 4. centering ablation ------------------------------------------------------------------------------------
def centering(capture: Capture, *, layers: list[int] | None = None, kl: Iterable[tuple[int, int]] | None = None,
              seed: int = 0, sinks: int = 4, local: int = 64, max_queries: int | None = None) -> pd.DataFrame:
    """Rows per (layer, K, L, centering): sampled fraction (cost2), mean/median relative output error, and
    the mean and std of the cosines the hash sees (cos(q, k_i - c), or cos(q, k_i) without centering).
    ``kl``: default the paper's RULER/LongBench settings."""
    kl = [(int(K), int(L)) for K, L in (paper_kl() if kl is None else kl)]
    for K, L in kl:
        lsh.check_kl(K, L)
    queries = query_subset(capture, max_queries)
    rows = []
    for layer in select_layers(capture, layers):
        dense_out = [run_method("dense", pb, capture.scale).output for pb in iter_problems(capture, layer, queries)]
        batch = layer_batch(capture, layer, sinks=sinks, local=local, queries=queries)
        for flag in (True, False):
            states = StateCache()
            cos = batch.cosines(flag)
            cos = cos[batch.offloaded[None, :, None, :].expand_as(cos)]
            specs = [(_mp_spec(K, L, sinks, local, seed, flag), {"K": K, "L": L, "centering": flag}) for K, L in kl]
            for r in _method_rows(capture, layer, specs, dense_out, states, None, queries):
                r["cos_mean"], r["cos_std"] = float(cos.mean()), float(cos.std())
                r["predicted"] = predicted_fraction(cos, r["K"], r["L"])
                rows.append(r)
    return pd.DataFrame(rows)


# ---- 5. geometry ----------------------------------------------------------------------------------------------
def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` (..., n) over ``mask`` (broadcastable) along the last axis."""
    x, m = torch.broadcast_tensors(x, mask.float())
    return (x * m).sum(-1) / m.sum(-1).clamp_min(1)


def geometry(capture: Capture, *, layers: list[int] | None = None, sinks: int = 4, local: int = 64,
             max_queries: int | None = None) -> pd.DataFrame:
    """Rows per (layer, kv-head), means over queries (and that kv-head's query heads) and offloaded keys:
    cos(q, k_sink), cos(q, c), cos(k_i, k_sink), cos(k_i, c), cos(q, k_i) before and after centering (mean
    and std), and ‖c‖ / mean ‖k_i‖. ``c`` = mean of the offloaded keys; k_sink = key 0."""
    rows = []
    for layer in select_layers(capture, layers):
        b = layer_batch(capture, layer, sinks=sinks, local=local, queries=query_subset(capture, max_queries))
        qg = b.grouped_queries()  # (Hkv, Q, G, d)
        c = b.centers()  # (Hkv, Q, d)
        sink = b.k[:, :1]  # (Hkv, 1, d)
        off = b.offloaded[None, :, None, :]  # (1, Q, 1, n)
        raw, cen = b.cosines(False), b.cosines(True)
        k_sink = lsh.cosine(sink, b.k)[:, None]  # (Hkv, 1, 1, n)
        k_c = lsh.cosine(c, b.k)[:, :, None]  # (Hkv, Q, 1, n)
        knorm = b.k.norm(dim=-1)[:, None, None, :]

        def std(x):
            mu = _masked_mean(x, off)
            return (_masked_mean((x - mu[..., None]) ** 2, off)).sqrt()

        vals = {
            "q_cos_sink": lsh.cosine(qg, sink[:, None]).squeeze(-1),
            "q_cos_center": lsh.cosine(qg, c[:, :, None]).squeeze(-1),
            "k_cos_sink": _masked_mean(k_sink, off),
            "k_cos_center": _masked_mean(k_c, off),
            "qk_cos_mean": _masked_mean(raw, off), "qk_cos_std": std(raw),
            "qk_cos_centered_mean": _masked_mean(cen, off), "qk_cos_centered_std": std(cen),
            "center_norm_ratio": c.norm(dim=-1)[..., None] / _masked_mean(knorm, off),
        }
        for g in range(capture.num_kv_heads):
            rows.append({"layer": layer, "kv_head": g, "dense_in_magicpig": _dense_flag(capture, layer),
                         **{k: float(v[g].mean()) for k, v in vals.items()}, "queries": qg.shape[1]})
    return pd.DataFrame(rows)


def geometry_hist(capture: Capture, *, layers: list[int] | None = None, sinks: int = 4, local: int = 64,
                  max_queries: int | None = None, bins: int = 40) -> pd.DataFrame:
    """The per-key distributions behind Fig. 5: histograms on [-1, 1] (``bins`` bins) of cos(k_i, k_sink),
    cos(k_i, c), cos(q, k_i) and cos(q, k_i - c) over the offloaded keys (every query and head of the layer).
    Rows: layer, dense_in_magicpig, quantity, bin_lo, bin_hi, count."""
    edges = torch.linspace(-1, 1, bins + 1)
    rows = []
    for layer in select_layers(capture, layers):
        b = layer_batch(capture, layer, sinks=sinks, local=local, queries=query_subset(capture, max_queries))
        off = b.offloaded[None, :, None, :]  # (1, Q, 1, n)
        per_key = {
            "k_cos_sink": lsh.cosine(b.k[:, :1], b.k)[:, None],  # (Hkv, 1, 1, n)
            "k_cos_center": lsh.cosine(b.centers(), b.k)[:, :, None],
            "qk_cos": b.cosines(False),
            "qk_cos_centered": b.cosines(True),
        }
        for quantity, x in per_key.items():
            x, m = torch.broadcast_tensors(x, off)
            counts = torch.histc(x[m].float().clamp(-1, 1), bins=bins, min=-1, max=1)
            rows += [{"layer": layer, "dense_in_magicpig": _dense_flag(capture, layer), "quantity": quantity,
                      "bin_lo": float(edges[i]), "bin_hi": float(edges[i + 1]), "count": int(counts[i])}
                     for i in range(bins)]
    return pd.DataFrame(rows)


def summary(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """The summary table of experiment ``name`` (means over MagicPIG's sparse layers)."""
    if name == "spread":
        return summarize(df, ["top_frac", "sink_tokens"],
                         ["top_mass_with_sink", "top_mass_without_sink", "sink_mass", "top2pct_mass_without_sink",
                          "keys_for_90pct_without_sink"])
    if name == "error":
        return summarize(df, ["setting"], ["cost2", "keys_used", "rel_error_mean", "rel_error_median"])
    if name == "kl-grid":
        return summarize(df, ["K", "L"], ["measured", "predicted", "formula", "paper_table9"])
    if name == "centering":
        return summarize(df, ["K", "L", "centering"],
                         ["cost2", "predicted", "rel_error_mean", "rel_error_median", "cos_mean", "cos_std"])
    if name == "geometry":
        return summarize(df, ["kv_head"], [c for c in df.columns if c not in
                                           ("layer", "kv_head", "dense_in_magicpig", "queries", "model",
                                            "n_prompt", "capture", "seed", "prompt")])
    raise ValueError(f"unknown experiment {name!r}; known: spread, error, kl-grid, centering, geometry")


def summarize(df: pd.DataFrame, by: list[str], cols: list[str], *, sparse_only: bool = True) -> pd.DataFrame:
    """Mean of ``cols`` grouped by ``by`` over layers (only MagicPIG's sparse layers by default)."""
    if sparse_only and "dense_in_magicpig" in df:
        df = df[~df["dense_in_magicpig"].astype(bool)]
    return df.groupby(by, dropna=False, sort=False)[cols].mean().reset_index()
