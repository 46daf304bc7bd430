"""The report's CPU decoders table (``magicpig.harness.report.tables_system``): each row beside its bytes-limit
and its share of it (issue 42 item 4)."""
from __future__ import annotations

import pandas as pd

from magicpig.harness.report.tables_system import cpu_baselines_section

COLUMNS = dict(device="cpu", batch=1, fits=True, search="", weights="q8_0")


def _write(root, rows):
    (root / "throughput").mkdir(parents=True)
    pd.DataFrame([{**COLUMNS, **r} for r in rows]).to_csv(root / "throughput" / "decode.csv", index=False)


def test_each_row_shows_its_bytes_limit_and_its_share_of_it(tmp_path):
    _write(tmp_path, [
        dict(method="dense", backend="llamacpp", context=4096, ms_per_token=20.0, tokens_per_s=50.0,
             bytes_limit_ms=8.0),
        dict(method="magicpig", backend="offload", context=4096, ms_per_token=12.2, tokens_per_s=82.0,
             bytes_limit_ms=7.625, under_load=True),
        dict(method="dense", backend="reference", context=4096, ms_per_token=30.0, tokens_per_s=33.3,
             bytes_limit_ms=None),  # a row without a bytes-limit keeps the bare ms/token
    ])
    text = "\n".join(cpu_baselines_section(tmp_path))
    assert "| 4096 | 20 (8.0, 2.5x) | 30 | 12.2 (7.6, 1.6x) (under load) | 1.64x |" in text
    assert "share of it: ms/token over the bytes-limit" in text
