"""Result files that a kill, a full disk or a second writer cannot leave torn or half-rewritten.

``write_text_atomic``: a whole file through a temporary beside it and ``os.replace`` (readers see the old
file or the new one; the temporary is removed when the write fails, a full disk included).
``append_line``: one line added with a single ``write`` on an ``O_APPEND`` descriptor (two writers
interleave whole lines, never bytes; a write cut short is a torn last line that readers drop).
``CsvAppender``: rows added to a CSV the same way, the header written once.
"""
from __future__ import annotations

import csv
import errno
import fcntl
import io
import os
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one step; on any error the old file stays and no
    temporary is left behind."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """``write_text_atomic`` for bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc  # named: the caller reports the file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` plus a newline to ``path`` with one ``write`` call (created if missing). A short
    write (a full disk) raises OSError(ENOSPC) after cutting the file back to where it was, when it can."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
        except OSError as exc:
            _cut_back(fd, start, start)
            raise OSError(exc.errno, exc.strerror, str(path)) from exc  # named: the caller reports the file
        if written != len(data):
            _cut_back(fd, start, start + written)
            raise OSError(errno.ENOSPC, f"only {written} of {len(data)} bytes of a line were written (disk full?)",
                          str(path))
    finally:
        os.close(fd)


def _cut_back(fd: int, size: int, own_end: int) -> None:
    """Drop our partly written last line, only when nothing was appended after it (another writer's line
    is never cut; then the torn line stays, and readers skip it)."""
    try:
        if os.fstat(fd).st_size == own_end and own_end > size:
            os.ftruncate(fd, size)
    except OSError:
        pass


class CsvAppender:
    """A CSV that several runs may add rows to, at once or one after another, none losing another's rows.

    ``start`` (call it before any work) writes the header into a new or empty file, or refuses (ValueError
    naming the file) one whose header is not ``columns``; each ``append`` adds one row as one ``O_APPEND``
    write, under an exclusive ``flock`` of the file; a write cut short (a full disk) is cut off again. A row
    after a torn last line (a writer of another kind, killed) starts on a new line, so the torn line stays
    one bad line that readers skip. The file is never rewritten.
    """

    def __init__(self, path: str | Path, columns: list[str], what: str = "--csv"):
        self.path, self.columns, self.what = Path(path), list(columns), what

    def _line(self, values: list) -> bytes:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        return buf.getvalue().encode("utf-8")

    def _locked(self, action) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            action(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)  # releases the flock

    def start(self) -> None:
        header = self._line(self.columns)

        def check(fd: int, size: int) -> None:
            if size == 0:
                os.write(fd, header)
                return
            first = os.pread(fd, len(header), 0)
            if first != header:
                raise ValueError(f"{self.what}: {self.path} already holds rows with other columns (another "
                                 "program or version wrote it); write to another file")

        self._locked(check)

    def append(self, row: dict) -> None:
        extra = set(row) - set(self.columns)
        if extra:
            raise ValueError(f"{self.path}: row has columns {sorted(extra)} that the header lacks")
        line = self._line([str(v).lower() if isinstance(v, bool) else v
                           for v in (row.get(c, "") for c in self.columns)])

        def add(fd: int, size: int) -> None:
            torn = size and os.pread(fd, 1, size - 1) != b"\n"
            data = (b"\n" if torn else b"") + line
            if os.write(fd, data) != len(data):
                os.ftruncate(fd, size)  # ours alone to cut: every writer appends under the flock
                raise OSError(errno.ENOSPC, f"{self.path}: a row was cut short (disk full?); it was removed")

        self._locked(add)
