"""The doctor's progress: the child's lines over the pipe, never blocking the training step,
and their display: plain lines once per phase off a terminal, nothing with --quiet."""

import io
import os
import time

from rich.console import Console

from torchpace.capture.progress import CaptureProgress, ProgressPipe, ProgressReporter, parse
from torchpace.report.progress import ProgressDisplay


def test_progress_travels_from_the_child_end_to_the_callback():
    events = []
    pipe = ProgressPipe(events.append)
    child_end = os.dup(pipe.write_fd)  # what the child process inherits
    pipe.child_started()
    reporter = ProgressReporter(child_end)
    reporter.say("warmup", 1, 3)
    reporter.say("window", 2, 5)
    reporter.say("probes", 1, None)
    os.close(child_end)  # the child exits
    pipe.close()
    assert events == [
        CaptureProgress("warmup", 1, 3),
        CaptureProgress("window", 2, 5),
        CaptureProgress("probes", 1, None),
    ]


def test_a_parent_that_does_not_read_never_blocks_the_step():
    read_fd, write_fd = os.pipe()
    reporter = ProgressReporter(write_fd)
    start = time.perf_counter()
    for i in range(50_000):  # far more than a pipe holds
        reporter.say("window", i, 50_000)
    assert time.perf_counter() - start < 5.0
    os.close(read_fd)
    reporter.say("window", 1, 1)  # the parent has gone: no error, and no more writes
    assert reporter._fd is None
    os.close(write_fd)


def test_a_phases_first_line_is_never_lost_when_the_pipe_is_full():
    # A one-step phase (the FLOP count) has one line: dropped while the parent was behind,
    # the parent never showed the phase. It waits and goes with the next step's line.
    read_fd, write_fd = os.pipe()
    reporter = ProgressReporter(write_fd)
    filled = 0
    try:
        while True:
            filled += os.write(write_fd, b"x" * 512)
    except BlockingIOError:
        pass
    reporter.say("warmup", 1, 2)
    reporter.say("count", 0, None)  # no room for either
    reporter.say("window", 0, 3)
    reporter.say("window", 1, 3)
    assert [phase for phase, _ in reporter._unsent] == ["warmup", "count", "window"]
    drained = b""
    while len(drained) < filled:
        drained += os.read(read_fd, 65536)
    reporter.say("window", 2, 3)  # room again: what waited goes first, in order
    lines = os.read(read_fd, 65536).decode().splitlines()
    assert lines == ["warmup 1 2", "count 0 -", "window 2 3"]
    assert reporter._unsent == []
    os.close(read_fd)
    os.close(write_fd)


def test_garbage_lines_are_ignored():
    assert parse(b"window 3 5\n") == CaptureProgress("window", 3, 5)
    assert parse(b"not a progress line\n") is None
    assert parse(b"window x 5\n") is None


def display(quiet=False, terminal=False):
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=100)
    return ProgressDisplay("doctor", quiet=quiet, console=console), out


def test_plain_lines_once_per_phase_off_a_terminal():
    shown, out = display()
    for i in range(3):
        shown.capture(CaptureProgress("warmup", i, 3))
    for i in range(5):
        shown.capture(CaptureProgress("window", i, 5))
    shown.capture(CaptureProgress("done", 0, None))
    shown.show("analysing the trace", "analyse")
    shown.stop()
    assert out.getvalue().splitlines() == [
        "torchpace doctor: warming up (3 steps)",
        "torchpace doctor: profiling (5 steps)",
        "torchpace doctor: analysing the trace",
    ]


def test_quiet_shows_nothing():
    shown, out = display(quiet=True, terminal=True)
    shown.capture(CaptureProgress("window", 1, 5))
    shown.show("analysing the trace", "analyse")
    shown.stop()
    assert out.getvalue() == ""


def test_on_a_terminal_a_transient_spinner_counts_the_steps():
    shown, out = display(terminal=True)
    shown.capture(CaptureProgress("window", 2, 5))
    assert shown._status is not None
    shown.stop()
    assert "profiling: step 3/5" in out.getvalue()


def test_a_long_line_stays_one_line_in_a_pipe():
    # a pipe or a CI log is 80 columns to rich: a trial's row must not be cut in two
    out = io.StringIO()
    display = ProgressDisplay("tune", console=Console(file=out, width=40, force_terminal=False))
    row = "  uint8 batches; resize, flips, float and Normalize on the device   74.4 ms/step"
    display.line(row)
    display.show("x" * 90, "window")
    lines = out.getvalue().splitlines()
    assert lines == [row, "torchpace tune: " + "x" * 90]
