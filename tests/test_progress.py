"""Long jobs write progress a log can show: plain lines off a terminal, at least every interval.

The background writers are waited for by what they have written (``_wait_for_lines``), with a deadline far above the
intervals, so a loaded machine slows these tests down but does not fail them."""
import io
import re
import time

from magicpig.harness.progress import PlainProgress, heartbeat, progress


class Tty(io.StringIO):
    def isatty(self):
        return True


def _wait_for_lines(out: io.StringIO, wanted, count: int, deadline_s: float = 60.0) -> None:
    """Return once ``out`` holds ``count`` lines for which ``wanted(line)`` holds, or ``deadline_s`` has passed."""
    end = time.monotonic() + deadline_s
    while sum(map(wanted, out.getvalue().splitlines())) < count and time.monotonic() < end:
        time.sleep(0.02)


def test_off_a_terminal_progress_is_plain_lines_with_count_elapsed_and_eta():
    out = io.StringIO()
    wrapped = progress(list(range(3)), "ruler/vt@1024", stream=out)
    assert isinstance(wrapped, PlainProgress)
    wrapped.interval = 0.0  # a line after every sample
    assert list(wrapped) == [0, 1, 2]
    lines = out.getvalue().splitlines()
    assert lines[0] == "ruler/vt@1024: 3 samples to run"
    assert re.fullmatch(r"ruler/vt@1024: sample 1 of 3 done, elapsed \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d", lines[1]), lines
    assert lines[-1].startswith("ruler/vt@1024: sample 3 of 3 done")
    assert "\r" not in out.getvalue()  # no bar redraws in a log


def test_a_slow_sample_still_gets_a_line_every_interval():
    out = io.StringIO()
    bar = PlainProgress(["a", "b"], "gsm8k@4096", interval=0.1, stream=out)
    for item in bar:
        if item == "a":  # one sample longer than several intervals: it lasts until three lines said it runs
            _wait_for_lines(out, lambda line: "sample 1 of 2 running" in line, 3)
    running = [line for line in out.getvalue().splitlines() if "sample 1 of 2 running" in line]
    assert len(running) >= 3, out.getvalue()
    assert out.getvalue().splitlines()[-1].startswith("gsm8k@4096: sample 2 of 2 done"), out.getvalue()


def test_terminal_gets_a_bar_and_no_progress_gets_the_bare_items():
    from tqdm import tqdm

    items = [1, 2]
    bar = progress(items, "x", stream=Tty())
    assert isinstance(bar, tqdm)
    bar.close()
    assert progress(items, "x", enabled=False, stream=io.StringIO()) is items


def test_heartbeat_writes_while_a_step_runs_and_stops_after_it():
    out = io.StringIO()
    with heartbeat("capture smollm2 @ 1024", interval=0.1, stream=out):
        _wait_for_lines(out, lambda line: True, 2)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(re.fullmatch(r"capture smollm2 @ 1024: running, elapsed \d+:\d\d:\d\d", x)
                                   for x in lines), lines
    time.sleep(0.5)  # five intervals
    assert out.getvalue().splitlines() == lines  # nothing once the block has ended
