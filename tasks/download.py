"""Fetching benchmark data files into a local cache, with clear failures when offline.

Cache folder: ``$MAGICPIG_DATA`` or ``~/.cache/magicpig/data``. A failed download raises
``TaskUnavailable`` naming the URL, the reason and the local-file option.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from magicpig_tasks.common import TaskUnavailable


def cache_dir() -> Path:
    return Path(os.environ.get("MAGICPIG_DATA") or Path.home() / ".cache" / "magicpig" / "data")


def fetch(url: str, name: str, what: str, timeout: float = 20.0) -> Path:
    """The cached copy of ``url`` (downloaded on first use) as ``<cache>/<name>``."""
    dest = cache_dir() / name
    if dest.is_file():
        return dest
    if os.environ.get("MAGICPIG_OFFLINE") == "1":
        raise TaskUnavailable(f"{what}: MAGICPIG_OFFLINE=1 and {dest} is not cached; "
                              f"pass a local file (--data) or download {url}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=timeout) as resp, \
                tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
            shutil.copyfileobj(resp, tmp)
        os.replace(tmp.name, dest)
    except Exception as exc:  # noqa: BLE001 - any network failure means: unavailable here
        raise TaskUnavailable(f"{what}: could not download {url} ({exc.__class__.__name__}: {exc}); "
                              f"pass a local copy with --data") from exc
    return dest
