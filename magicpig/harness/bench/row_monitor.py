"""What a decode row measures besides its time: peak memory, the CPU time other processes took (the
``under_load`` flag) and, with ``--diagnostics``, the machine's streaming bandwidth read between timed steps."""
from __future__ import annotations

import os
import threading
import time

import torch

from magicpig.harness.bench.table import is_under_load

STREAM_EVERY = 4  # --diagnostics: one timed step in this many is followed by a streaming read
IN_ROW_STREAM_MIN = 64 << 20  # that read's buffer: 4x the last-level cache, at least this


class RowMonitor:
    """Over one row: peak process RSS (sampled by a thread), peak device memory, and the cores' worth of CPU
    time OTHER processes took (system busy time minus this process's, over wall time); a row is
    ``under_load`` when that reaches into its threads' cores (``table.is_under_load``, every backend's rows:
    llama.cpp's threads are this process's too). ``diagnostics``: also the load averages, the
    hypervisor's steal and this process's share of CPU time in the kernel."""

    def __init__(self, device: torch.device, diagnostics: bool = False, interval: float = 0.05):
        import psutil

        self.device, self.diagnostics, self.interval = device, diagnostics, interval
        self.proc, self._stop = psutil.Process(), threading.Event()
        self.threads = torch.get_num_threads()  # the row's threads (llama.cpp rows are given as many)

    @staticmethod
    def _busy() -> float:
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    @staticmethod
    def _steal() -> float:
        import psutil

        return getattr(psutil.cpu_times(), "steal", 0.0)  # Linux only

    def _own(self) -> tuple[float, float]:
        t = self.proc.cpu_times()
        return t.user + t.system, t.system

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self):
        self.load_before = os.getloadavg()[0]
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.peak_rss = self.proc.memory_info().rss
        self._start = time.perf_counter(), self._busy(), self._own(), self._steal()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        t0, busy0, own0, steal0 = self._start
        wall = max(1e-9, time.perf_counter() - t0)
        own, own_sys = (b - a for a, b in zip(own0, self._own()))
        self.other_cpu_load = max(0.0, (self._busy() - busy0) - own) / wall
        self.steal_cpu = max(0.0, self._steal() - steal0) / wall
        self.own_sys_share = own_sys / own if own > 0 else 0.0
        self.load_after = os.getloadavg()[0]
        self.peak_device = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else 0
        return False

    def fields(self) -> dict:
        out = {"peak_host_mb": round(self.peak_rss / 2**20, 1),
               "peak_device_mb": round(self.peak_device / 2**20, 1) if self.device.type == "cuda" else "",
               "other_cpu_load": round(self.other_cpu_load, 2),
               "under_load": is_under_load(self.other_cpu_load, self.threads)}
        if self.diagnostics:
            out.update({"load_before": round(self.load_before, 2), "load_after": round(self.load_after, 2),
                        "steal_cpu": round(self.steal_cpu, 3), "own_sys_share": round(self.own_sys_share, 3)})
        return out


class StepBandwidth:
    """``--diagnostics``: the ``after_step`` of a CPU row. After every ``every``-th timed step (the first
    included), outside its time, one timed streaming read of ``buffer`` (larger than the last-level cache)
    with ``threads`` threads. ``gbps()``: bytes over the summed seconds of the reads; ``after_read(steps)``:
    the mean time of the steps right after a read over that of the other timed steps."""

    def __init__(self, buffer: torch.Tensor, threads: int, warmup: int, every: int = STREAM_EVERY):
        from magicpig import cpu

        self.read = cpu.load().stream_read
        self.buffer, self.threads, self.warmup, self.every = buffer, threads, warmup, every
        self.seconds: list[float] = []
        self.followed: set[int] = set()  # steps that came right after a read

    def __call__(self, step: int) -> None:
        if step < self.warmup or (step - self.warmup) % self.every:
            return
        t0 = time.perf_counter()
        self.read(self.buffer, self.threads)
        self.seconds.append(max(time.perf_counter() - t0, 1e-9))
        self.followed.add(step + 1)

    def gbps(self) -> float | None:
        nbytes = self.buffer.numel() * self.buffer.element_size()
        return nbytes * len(self.seconds) / sum(self.seconds) / 1e9 if self.seconds else None

    def after_read(self, step_seconds: list[float]) -> float | None:
        timed = range(self.warmup, len(step_seconds))
        after = [step_seconds[i] for i in timed if i in self.followed]
        other = [step_seconds[i] for i in timed if i not in self.followed]
        if not after or not other:
            return None
        return (sum(after) / len(after)) / (sum(other) / len(other))


def measure_stream_gbps() -> float:
    """This machine's streaming-read GB/s, measured as ``magicpig bench kernel`` does."""
    from magicpig.harness.bench import kernel

    return kernel.stream_read_gbps(torch.get_num_threads(), kernel.stream_bytes_for(kernel.llc_bytes()[0]))


def in_row_stream_buffer() -> torch.Tensor:
    """``StepBandwidth``'s buffer: larger than the last-level cache, read once here so its pages exist."""
    from magicpig import cpu
    from magicpig.harness.bench import kernel

    buffer = torch.ones(kernel.stream_bytes_for(kernel.llc_bytes()[0], IN_ROW_STREAM_MIN) // 8, dtype=torch.int64)
    cpu.load().stream_read(buffer, torch.get_num_threads())
    return buffer
