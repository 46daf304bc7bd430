"""Synthetic results of the budget sweeps and of the per-token / short-input experiments, in the shapes their
writers produce (``magicpig eval`` metrics, ``magicpig estimate all`` / ``estimate inputs`` CSVs); used by the
report-figure tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

SWEEP_LENGTH = 2048


def write_sweep_runs(root: Path, write_run) -> None:
    """``root``/sweeps: dense, TopK and oracle at three budgets, MagicPIG with / without centering at two L and
    one more (K, L), on NIAH, CWE and FWE. ``write_run(root, task, length, method, scores, cost)``."""
    sweeps = root / "sweeps"
    for task in ("ruler/niah_single_1", "ruler/cwe", "ruler/fwe"):
        write_run(sweeps, task, SWEEP_LENGTH, "dense", [100, 100, 80], 1.0)
        for b, c in ((32, 32 / SWEEP_LENGTH), (0.02, 0.02), (0.1, 0.1)):
            write_run(sweeps, task, SWEEP_LENGTH, f"topk:budget={b:g}", [60, 40, 50 + 400 * c], c)
            write_run(sweeps, task, SWEEP_LENGTH, f"oracle:budget={b:g}", [90, 80, 70], c * 0.8)
        for L, c in ((150, 0.02), (300, 0.06)):
            write_run(sweeps, task, SWEEP_LENGTH, f"magicpig:K=10,L={L}", [90, 100, 80], c)
            write_run(sweeps, task, SWEEP_LENGTH, f"magicpig:K=10,L={L},centering=false", [0, 20, 0], c / 50)
        write_run(sweeps, task, SWEEP_LENGTH, "magicpig:K=8,L=75", [100, 90, 90], 0.05)


def write_token_tables(est: Path, prompts=("capture_2048_p0", "capture_2048_p1")) -> None:
    """The CSVs of the per-token experiments (two prompts) and of ``estimate inputs`` into ``est``."""
    rng = np.random.default_rng(0)
    fr = (0.001, 0.01, 0.1, 1.0)
    pd.DataFrame([{"prompt": p, "layer": l, "head": h, "dense_in_magicpig": l == 0, "fraction": f,
                   "mass_with_sink": min(1.0, 0.5 + f), "mass_without_sink": f ** 0.5 * (0.8 + 0.1 * h)}
                  for p in prompts for l in range(3) for h in range(2) for f in fr]).to_csv(est / "mass_curve.csv",
                                                                                           index=False)
    pd.DataFrame([{"prompt": p, "layer": l, "kv_head": g, "dense_in_magicpig": l == 0, "sink_cos_center": -0.6,
                   "key_cos_center": 0.7, "sink_norm_ratio": 0.5} for p in prompts for l in range(3) for g in range(2)]
                 ).to_csv(est / "sink_center.csv", index=False)
    pd.DataFrame([{"prompt": p, "layer": l, "head": 0, "query_position": 99, "key": i, "logit": x,
                   "log_dist": -0.3 * x + rng.normal(0, 0.1), "prob": 0.01, "is_sink": i == 0,
                   "dense_in_magicpig": False} for p in prompts for l in (1, 2) for i, x in
                  enumerate(rng.normal(0, 1, 100))]).to_csv(est / "value_output.csv", index=False)
    pd.DataFrame([{"prompt": p, "layer": l, "position": i, "value_norm": 0.2 if i == 0 else 1 + 0.01 * i,
                   "key_norm": 3.0, "is_sink": i == 0, "dense_in_magicpig": False}
                  for p in prompts for l in (1, 2) for i in range(50)]).to_csv(est / "value_norm.csv", index=False)
    pd.DataFrame([{"quantity": q, "layer": l, "kv_head": g, "mean_cos": m, "min_cos": m - 0.2, "inputs": n,
                   "dense_in_magicpig": l == 0}
                  for q, m, n in (("sink_key", 0.95, 32), ("key_mean", 0.9, 50), ("other_key", 0.2, 32))
                  for l in range(3) for g in range(2)]).to_csv(est / "inputs_similarity.csv", index=False)
    pd.DataFrame([{"quantity": q, "layer": 1, "kv_head": 0, "i": i, "j": j, "cos": 1.0 if i == j else 0.9}
                  for q, n in (("sink_key", 32), ("key_mean", 50)) for i in range(n) for j in range(n)]
                 ).to_csv(est / "inputs_matrix.csv", index=False)
