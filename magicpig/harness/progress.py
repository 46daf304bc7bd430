"""Progress of long jobs in a form that suits where stderr goes.

On a terminal a tqdm bar; anywhere else (a pipeline log, a cluster job's output file) plain lines
``<label>: sample i of n, elapsed 0:01:05, ETA 0:04:10``, written after an item when ``interval`` seconds
have passed since the last line, and from a background thread while one item runs longer than that, so a log
never stays silent for more than ``interval`` seconds while work goes on.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TextIO

INTERVAL_S = 30.0


def _clock(seconds: float) -> str:
    return str(_dt.timedelta(seconds=round(seconds)))


class PlainProgress:
    """Iterate ``items`` and write plain progress lines to ``stream`` (see the module docstring)."""

    def __init__(self, items: Iterable, label: str, unit: str = "sample", interval: float = INTERVAL_S,
                 stream: TextIO | None = None):
        self.items = list(items)
        self.label, self.unit, self.interval = label, unit, interval
        self.stream = stream or sys.stderr
        self.done = 0
        self._start = self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def line(self, running: bool = False) -> str:
        n = len(self.items)
        elapsed = time.monotonic() - self._start
        text = f"{self.label}: {self.unit} {min(self.done + running, n)} of {n}"
        text += " running" if running else " done"
        text += f", elapsed {_clock(elapsed)}"
        if self.done:
            text += f", ETA {_clock(elapsed / self.done * (n - self.done))}"
        return text

    def _say(self, running: bool) -> None:
        with self._lock:
            print(self.line(running), file=self.stream, flush=True)
            self._last = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(max(0.05, self.interval - (time.monotonic() - self._last))):
            if time.monotonic() - self._last >= self.interval:
                self._say(running=True)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator:
        self._start = self._last = time.monotonic()
        print(f"{self.label}: {len(self.items)} {self.unit}s to run", file=self.stream, flush=True)
        beat = threading.Thread(target=self._beat, daemon=True)
        beat.start()
        try:
            for item in self.items:
                yield item
                self.done += 1
                if self.done == len(self.items) or time.monotonic() - self._last >= self.interval:
                    self._say(running=False)
        finally:
            self._stop.set()
            beat.join()

    def close(self) -> None:
        self._stop.set()


def progress(items, label: str, enabled: bool = True, unit: str = "sample", stream: TextIO | None = None):
    """``items`` wrapped for progress: a tqdm bar when ``stream`` (default stderr) is a terminal, plain lines
    otherwise (:class:`PlainProgress`), the bare items when ``enabled`` is false or there are none."""
    stream = stream or sys.stderr
    if not enabled or not items:
        return items
    if getattr(stream, "isatty", lambda: False)():
        try:
            from tqdm import tqdm
            return tqdm(items, desc=label, unit=unit, file=stream)
        except ImportError:  # pragma: no cover
            pass
    return PlainProgress(items, label, unit=unit, stream=stream)


@contextlib.contextmanager
def heartbeat(label: str, interval: float = INTERVAL_S, stream: TextIO | None = None):
    """While the block runs, write ``<label>: running, elapsed H:MM:SS`` every ``interval`` seconds (for a
    step with no natural unit to count, e.g. one long prefill or a whole benchmark)."""
    stream = stream or sys.stderr
    stop = threading.Event()
    start = time.monotonic()

    def beat():
        while not stop.wait(interval):
            print(f"{label}: running, elapsed {_clock(time.monotonic() - start)}", file=stream, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
