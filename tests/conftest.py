"""Shared fixtures (the tiny models themselves live in tiny_models.py, importable by test modules), and each
pytest-xdist worker's share of the cores."""
import os

import pytest
import torch

from tiny_models import TINY_KINDS


def _share_the_cores_between_workers() -> None:
    """Under ``pytest -n N`` each of the N workers gets cores / N threads (torch's intra-op pool, which the CPU
    module's kernels follow, and OMP_NUM_THREADS for the commands tests start), instead of every worker
    spinning up threads for all the cores: on 2 cores 2 workers x 2 spinning OpenMP threads made the suite
    about 10% slower and the 4K needle test twice as slow. A thread count the user set is kept. Tests that
    need several threads (the kernels' work splitting) pass their thread count explicitly."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    share = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch.set_num_threads(share)


_share_the_cores_between_workers()


@pytest.fixture(params=TINY_KINDS)
def tiny_kind(request):
    return request.param
