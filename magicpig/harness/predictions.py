"""predictions.jsonl of one (task, length, method): the rows already finished, and appending new ones.

Each row is one line, appended with one write (``magicpig.atomic_io.append_line``). On loading, a line that
is not a JSON object with a string ``id`` (a torn last line from a kill or a full disk, cut anywhere, even
inside a multi-byte UTF-8 character; or a foreign or corrupt line) is skipped with a warning naming the file
and the line number, and never counted. A torn last line (no final newline) is cut off the file, so the
next row starts on a line of its own (a whole row lacking only the newline gets one); every other line is
left as it is.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from magicpig.atomic_io import append_line


NUMBER_FIELDS = ("score", "cost", "cost1", "prompt_tokens", "new_tokens")  # of a row, when present


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


class Predictions:
    """The finished rows of one predictions.jsonl, by sample id (module docstring)."""

    def __init__(self, path: Path, warn: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        warn = warn or _warn
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        torn_tail = lines.pop()  # b"" when the file ends with a newline
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            row, why = _parse(raw)
            if why:
                warn(f"{self.path}: line {number} skipped ({why})")
                continue
            if row["id"] in self.rows:
                warn(f"{self.path}: line {number} skipped (id {row['id']!r} already at an earlier line)")
                continue
            self.rows[row["id"]] = row
        if torn_tail:
            row, _ = _parse(torn_tail)
            if row is not None and row["id"] not in self.rows:  # a whole row that lacks only its newline
                self.rows[row["id"]] = row
                with open(self.path, "ab") as f:
                    f.write(b"\n")
                return
            warn(f"{self.path}: line {len(lines) + 1} skipped (torn last line without a newline, "
                 f"{len(torn_tail)} bytes, from an interrupted write); it is cut off the file")
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(torn_tail))
                os.fsync(f.fileno())

    def __contains__(self, sample_id: str) -> bool:
        return sample_id in self.rows

    def append(self, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, json.dumps(row, ensure_ascii=False))
        self.rows[row["id"]] = row


def read_rows(path: Path, warn: Callable[[str], None] | None = None) -> dict[str, dict]:
    """The rows of a predictions.jsonl by sample id, read only: a line that is not a row (a torn last line
    included) is skipped with a warning, and the file is never changed (``compare``, ``rescore``)."""
    warn = warn or _warn
    rows: dict[str, dict] = {}
    for number, raw in enumerate(Path(path).read_bytes().split(b"\n"), 1):
        if not raw.strip():
            continue
        row, why = _parse(raw)
        if why or row["id"] in rows:
            warn(f"{path}: line {number} skipped ({why or 'id ' + repr(row['id']) + ' already at an earlier line'})")
            continue
        rows[row["id"]] = row
    return rows


def _parse(raw: bytes) -> tuple[dict | None, str]:
    """(row, '') or (None, why the line is not a row)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 at byte {exc.start}"
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, "JSON nested too deeply"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not an object"
    if not isinstance(row.get("id"), str):
        return None, "no string 'id'"
    for key in NUMBER_FIELDS:  # averaged into metrics.json: a row holding text there is not one of ours
        if key in row and (not isinstance(row[key], (int, float)) or isinstance(row[key], bool)):
            return None, f"field {key!r} is a {type(row[key]).__name__}, not a number"
    return row, ""
