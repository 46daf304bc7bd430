"""Shared fixtures (the tiny models themselves live in tiny_models.py, importable by test modules)."""
import pytest

from tiny_models import TINY_KINDS


@pytest.fixture(params=TINY_KINDS)
def tiny_kind(request):
    return request.param
