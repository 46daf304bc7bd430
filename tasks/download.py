"""The one fetcher of benchmark data files: a local cache, offline mode, clear failures.

Every loader that needs a remote file (RULER QA's SQuAD / HotpotQA JSON, the LongBench and GSM8K hub
parquet files) calls ``fetch``: the file is downloaded once into ``$MAGICPIG_DATA`` (default
``~/.cache/magicpig/data``) and read from there afterwards. Offline mode (``MAGICPIG_OFFLINE=1``, or the
Hugging Face switches ``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``) never touches the network: a file
that is not cached raises ``TaskUnavailable`` naming the switch, the URL and the local-file option, as
does a failed download.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from magicpig_tasks.common import TaskUnavailable

OFFLINE_ENV = ("MAGICPIG_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
_TRUE = ("1", "true", "yes", "on")


def cache_dir() -> Path:
    return Path(os.environ.get("MAGICPIG_DATA") or Path.home() / ".cache" / "magicpig" / "data")


def offline_switch() -> str | None:
    """The environment variable that puts this process offline (``NAME=value``), or None."""
    for name in OFFLINE_ENV:
        value = os.environ.get(name, "").strip()
        if value.lower() in _TRUE:
            return f"{name}={value}"
    return None


def cache_name(url: str) -> str:
    """A cache file name for ``url``: its host and path, made filesystem-safe (suffix kept)."""
    parts = urllib.parse.urlsplit(url)
    text = urllib.parse.unquote(f"{parts.netloc}{parts.path}").strip("/")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def fetch(url: str, name: str | None, what: str, timeout: float = 20.0) -> Path:
    """The cached copy of ``url`` as ``<cache>/<name>`` (``name`` None: ``cache_name(url)``), downloaded on
    first use. Raises ``TaskUnavailable`` (for ``what``) when offline and not cached, or when the download
    fails."""
    dest = cache_dir() / (name or cache_name(url))
    if dest.is_file():
        return dest
    switch = offline_switch()
    if switch:
        raise TaskUnavailable(f"{what}: {switch} and {dest} is not cached; "
                              f"pass a local file (--data) or download {url}")
    tmp = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=timeout) as resp, \
                tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as out:
            tmp = out.name
            shutil.copyfileobj(resp, out)
        os.replace(tmp, dest)
    except Exception as exc:  # noqa: BLE001 - any network failure means: unavailable here
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise TaskUnavailable(f"{what}: could not download {url} ({exc.__class__.__name__}: {first}); "
                              f"pass a local copy with --data") from exc
    return dest
