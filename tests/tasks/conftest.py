"""Fixtures for the task tests: the embedded model's tokenizer (loaded once per session) and the
fixture-file folder."""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="session")
def tokenizer():
    from magicpig.models import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No downloads: an empty data cache and MAGICPIG_OFFLINE=1."""
    monkeypatch.setenv("MAGICPIG_OFFLINE", "1")
    monkeypatch.setenv("MAGICPIG_DATA", str(tmp_path / "cache"))
