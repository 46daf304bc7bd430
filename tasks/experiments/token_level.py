"""Per-key and per-token experiments over a ``Capture`` (paper Figs. 2a, 5c, 10, 11); like ``experiments``,
each returns a pandas DataFrame and has a summary (``summary``).

1. ``mass_curve``    share of the attention mass held by the top fraction f of keys, for a grid of f, with and
                     without the sink (Fig. 2a as a curve; ``experiments.spread`` gives its f = 0.2 point).
2. ``sink_center``   cos(k_sink, k_avg) per (layer, kv-head): the sink key against the mean of the other prompt
                     keys (Fig. 5c).
3. ``value_output``  one decode step of a few heads: log ‖v_i − o‖ against the logit q·k_i/√d of every visible
                     key (Fig. 10); its summary is the rank correlation of the two per head.
4. ``value_norm``    ‖v_i‖ per prompt position (mean over kv-heads) of a few layers, the sink's beside the
                     others' (Fig. 11).
"""
from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from magicpig.methods import MagicPIG

from magicpig_tasks.experiments.capture import Capture
from magicpig_tasks.experiments.experiments import attention_probs, summarize
from magicpig_tasks.experiments.problems import layer_batch, query_subset, select_layers

# fractions of keys of the mass curve: log-spaced from 0.1% to all keys
MASS_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
TOKEN_EXPERIMENTS = ("mass-curve", "sink-center", "value-output", "value-norm")


def _dense_flag(capture: Capture, layer: int) -> bool:
    return layer in MagicPIG().dense_layer_set(capture.num_layers)


def spaced_sparse_layers(capture: Capture, layers: list[int] | None, count: int) -> list[int]:
    """Up to ``count`` of ``layers`` (default: the captured ones) evenly spaced, MagicPIG's sparse layers
    preferred (the layers whose attention it estimates)."""
    pool = select_layers(capture, layers)
    sparse = [i for i in pool if not _dense_flag(capture, i)] or pool
    if len(sparse) <= count:
        return sparse
    return sorted({sparse[round(j * (len(sparse) - 1) / max(1, count - 1))] for j in range(count)})


def mass_curve(capture: Capture, *, layers: list[int] | None = None, fractions=MASS_FRACTIONS,
               sink_tokens: int = 1, max_queries: int | None = None) -> pd.DataFrame:
    """Rows per (layer, head, fraction f): mean over queries of the mass in the top ceil(f·m) of a query's m
    visible keys, with every key (``mass_with_sink``) and with the first ``sink_tokens`` keys removed and the
    rest renormalised (``mass_without_sink``)."""
    fractions = [float(f) for f in fractions]
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise ValueError(f"fractions must lie in (0, 1], got {fractions}")
    rows = []
    for layer in select_layers(capture, layers):
        batch = layer_batch(capture, layer, queries=query_subset(capture, max_queries))
        probs = attention_probs(batch, capture.scale)  # (Q, H, n)
        count = batch.valid.sum(-1)[:, None].expand(probs.shape[:-1])
        curves = [_cumulative(probs), _cumulative(probs[..., sink_tokens:])]  # sorted once per layer
        for f in fractions:
            with_sink = _top(curves[0], f, count).mean(0)
            without = _top(curves[1], f, count - sink_tokens).mean(0)
            for h in range(capture.num_heads):
                rows.append({"layer": layer, "head": h, "dense_in_magicpig": _dense_flag(capture, layer),
                             "fraction": f, "mass_with_sink": float(with_sink[h]),
                             "mass_without_sink": float(without[h]), "queries": probs.shape[0]})
    return pd.DataFrame(rows)


def _cumulative(probs: torch.Tensor) -> torch.Tensor:
    """Each row of ``probs`` (..., n) renormalised, sorted largest first and summed cumulatively."""
    p = probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)
    return p.sort(-1, descending=True).values.cumsum(-1)


def _top(cum: torch.Tensor, frac: float, counts: torch.Tensor) -> torch.Tensor:
    """The mass of the top ceil(frac·m) keys from a ``_cumulative`` curve, m = ``counts`` (as
    ``experiments.top_mass``)."""
    k = torch.ceil(frac * counts.float()).clamp(1, cum.shape[-1]).long()
    return cum.gather(-1, (k - 1).unsqueeze(-1)).squeeze(-1)


def sink_center(capture: Capture, *, layers: list[int] | None = None, **_) -> pd.DataFrame:
    """Rows per (layer, kv-head): cos(k_0, k_avg), k_avg the mean of the prompt keys 1..n_prompt-1, and the
    mean cos(k_i, k_avg) of those keys for scale (``key_cos_center``), and ‖k_0‖ / mean ‖k_i‖."""
    rows = []
    for layer in select_layers(capture, layers):
        k = capture.keys[capture.layer_slot(layer), :, : capture.n_prompt].float()  # (Hkv, n, d)
        rest = k[:, 1:]
        avg = rest.mean(1)  # (Hkv, d)
        sink_cos = F.cosine_similarity(k[:, 0], avg, dim=-1, eps=1e-12)  # (Hkv,)
        key_cos = F.cosine_similarity(rest, avg[:, None], dim=-1, eps=1e-12).mean(-1)
        norm_ratio = k[:, 0].norm(dim=-1) / rest.norm(dim=-1).mean(-1).clamp_min(1e-12)
        for g in range(capture.num_kv_heads):
            rows.append({"layer": layer, "kv_head": g, "dense_in_magicpig": _dense_flag(capture, layer),
                         "sink_cos_center": float(sink_cos[g]), "key_cos_center": float(key_cos[g]),
                         "sink_norm_ratio": float(norm_ratio[g])})
    return pd.DataFrame(rows)


def value_output(capture: Capture, *, layers: list[int] | None = None, heads_per_layer: int = 2,
                 layer_count: int = 3, query: int | None = None, **_) -> pd.DataFrame:
    """One decode step (the capture's query ``query``, default the first decode step, else the last query) of
    ``heads_per_layer`` query heads (evenly spaced) in ``layer_count`` sparse layers: rows per visible key with
    its ``logit`` q·k_i·scale, ``log_dist`` = ln ‖v_i − o‖ (o the exact output of that head), its attention
    probability and whether it is the sink (key 0)."""
    nq = capture.queries.shape[1]
    decode = [j for j in range(nq) if int(capture.query_positions[j]) >= capture.n_prompt]
    j = query if query is not None else (decode[0] if decode else nq - 1)
    if not 0 <= j < nq:
        raise ValueError(f"query {j} outside the capture's {nq} queries")
    rows = []
    H = capture.num_heads
    heads = sorted({round(i * (H - 1) / max(1, heads_per_layer - 1)) for i in range(heads_per_layer)})
    for layer in spaced_sparse_layers(capture, layers, layer_count):
        batch = layer_batch(capture, layer, queries=[j])
        probs = attention_probs(batch, capture.scale)[0]  # (H, n)
        n = int(batch.valid[0].sum())
        group = H // capture.num_kv_heads
        for h in heads:
            k, v = batch.k[h // group, :n], batch.v[h // group, :n]  # (n, d)
            logits = (k @ batch.q[0, h]) * capture.scale
            p = probs[h, :n]
            out = p @ v
            dist = (v - out).norm(dim=-1).clamp_min(1e-12).log()
            rows += [{"layer": layer, "head": h, "query_position": int(capture.query_positions[j]), "key": i,
                      "logit": float(logits[i]), "log_dist": float(dist[i]), "prob": float(p[i]),
                      "is_sink": i == 0, "dense_in_magicpig": _dense_flag(capture, layer)} for i in range(n)]
    return pd.DataFrame(rows)


def value_norm(capture: Capture, *, layers: list[int] | None = None, layer_count: int = 4, **_) -> pd.DataFrame:
    """Rows per (layer, prompt position) of ``layer_count`` evenly spaced layers (sparse ones preferred):
    ‖v_i‖ and ‖k_i‖, each the mean over kv-heads."""
    rows = []
    for layer in spaced_sparse_layers(capture, layers, layer_count):
        s = capture.layer_slot(layer)
        v = capture.values[s, :, : capture.n_prompt].float().norm(dim=-1).mean(0)  # (n,)
        k = capture.keys[s, :, : capture.n_prompt].float().norm(dim=-1).mean(0)
        flag = _dense_flag(capture, layer)
        rows += [{"layer": layer, "position": i, "value_norm": float(v[i]), "key_norm": float(k[i]),
                  "is_sink": i == 0, "dense_in_magicpig": flag} for i in range(capture.n_prompt)]
    return pd.DataFrame(rows)


def run(name: str, capture: Capture, **kw) -> pd.DataFrame:
    """Experiment ``name`` of ``TOKEN_EXPERIMENTS`` on ``capture`` (keyword arguments of its function)."""
    fn = {"mass-curve": mass_curve, "sink-center": sink_center, "value-output": value_output,
          "value-norm": value_norm}.get(name)
    if fn is None:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(TOKEN_EXPERIMENTS)}")
    return fn(capture, **kw)


def _rank_correlation(g: pd.DataFrame) -> float:
    """Spearman's rho of logit and log_dist (Pearson's r of their ranks, ties averaged)."""
    return float(g["logit"].rank().corr(g["log_dist"].rank()))


def summary(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """The summary table of experiment ``name`` (means over MagicPIG's sparse layers and the prompts)."""
    if name == "mass-curve":
        return summarize(df, ["fraction"], ["mass_with_sink", "mass_without_sink"])
    if name == "sink-center":
        return summarize(df, ["kv_head"], ["sink_cos_center", "key_cos_center", "sink_norm_ratio"])
    if name == "value-output":
        by = [c for c in ("prompt", "layer", "head") if c in df]
        rho = df.groupby(by).apply(_rank_correlation, include_groups=False).rename("spearman_logit_log_dist")
        sink = df[df["is_sink"].astype(bool)].groupby(by)[["logit", "log_dist"]].first()
        rest = df[~df["is_sink"].astype(bool)].groupby(by)["log_dist"].median().rename("median_log_dist_others")
        out = pd.concat([rho, sink.add_prefix("sink_"), rest], axis=1).reset_index()
        return out
    if name == "value-norm":
        by = [c for c in ("prompt", "layer") if c in df]
        sink = df[df["is_sink"].astype(bool)].groupby(by)["value_norm"].first().rename("sink_value_norm")
        rest = df[~df["is_sink"].astype(bool)].groupby(by)["value_norm"].median().rename("median_value_norm")
        out = pd.concat([sink, rest], axis=1).reset_index()
        out["sink_over_median"] = out["sink_value_norm"] / out["median_value_norm"].clip(lower=1e-12)
        return out
    raise ValueError(f"unknown experiment {name!r}; known: {', '.join(TOKEN_EXPERIMENTS)}")
