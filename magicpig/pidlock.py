"""Locks between processes that say who holds them and cannot go stale.

A ``PidLock`` is a file locked with ``flock(2)``. The kernel drops the lock when the holding process ends,
however it ends (SIGKILL included), so a lock left behind by a dead process is simply free: the next
process takes it over. The file keeps the holder's pid only so that a waiting or refused process can say
whom it waits for. The file is left in place on release (removing it would race with a process that
already has it open and is about to lock it).
"""
from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Callable


class LockHeld(RuntimeError):
    """A live process holds the lock (the message names it)."""


class LockTimeout(LockHeld):
    """The lock stayed held by a live process for longer than the allowed wait."""


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class PidLock:
    """An exclusive lock on ``path`` (created if missing), recording the holder's pid."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> int | None:
        """Pid written by the current (or last) holder, None when unknown."""
        try:
            text = self.path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def try_acquire(self) -> bool:
        """Take the lock if it is free (or its holder is dead); False if a live process holds it."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def acquire(self, timeout: float, what: str, say: Callable[[str], None] = _stderr,
                poll: float = 0.2, remind: float = 60.0) -> None:
        """Take the lock, waiting up to ``timeout`` seconds for a live holder; ``what`` names the
        protected work in the messages. Says once that it waits (and for whom), then every ``remind``
        seconds; raises LockTimeout naming the holder when the time is up."""
        start = time.monotonic()
        next_note = start
        while not self.try_acquire():
            now = time.monotonic()
            pid = self.holder()
            who = f"pid {pid}" if pid else "another process"
            if now - start >= timeout:
                raise LockTimeout(f"timed out after {now - start:.0f} s waiting for {who} ({what}; lock "
                                  f"{self.path}); if that process is stuck, end it and retry")
            if now >= next_note:
                waited = f" (waited {now - start:.0f} s of {timeout:.0f} s)" if now > start else ""
                say(f"waiting for {who}: {what}{waited}")
                next_note = now + remind
            time.sleep(poll)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
