"""tune's progress on stderr, drawn by the doctor's display (report/progress.py): one plain
line per trial off a terminal plus a line per verdict, a spinner on a terminal, nothing with
--quiet, and nothing after the display stops (the report follows on stdout)."""

import io

from rich.console import Console

from torchpace.report.progress import ProgressDisplay
from torchpace.tune.progress import TrialProgress
from torchpace.tune.trial import Outcome, TrialResult


def progress(quiet=False, terminal=False):
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=120)
    display = ProgressDisplay("tune", quiet=quiet, console=console)
    return TrialProgress(display), display, out


def result(label, ms, outcome=Outcome.OK):
    steps = [ms] * 5 if outcome == Outcome.OK else []
    return TrialResult(label=label, config={}, outcome=outcome, step_ms=steps)


def run_two_trials(shown: TrialProgress) -> None:
    shown.trial_started(0, "baseline")
    shown.trial_started(1, "num-workers=2")  # a verdict may come after the next start
    shown.trial_done(result("baseline", 20.0), "reference", 1.0)
    shown.trial_done(result("num-workers=2", 0.0, Outcome.CRASHED), "rejected: crashed", 1.0)


def test_plain_lines_off_a_terminal():
    shown, display, out = progress()
    run_two_trials(shown)
    display.stop()
    shown.trial_started(2, "late")  # after the stop: the report has the terminal
    lines = out.getvalue().splitlines()
    assert lines[0] == "2/2 trials, each a fresh process, timed unprofiled"
    assert lines[1:3] == [
        "torchpace tune: trial 0: baseline",
        "torchpace tune: trial 1: num-workers=2",
    ]
    assert lines[3].split()[:3] == ["baseline", "20.0", "ms/step"] and "reference" in lines[3]
    assert "crashed" in lines[4] and "rejected: crashed" in lines[4]
    assert len(lines) == 5 and "\x1b" not in out.getvalue()  # no control codes in a CI log


def test_a_terminal_gets_the_spinner_and_the_verdicts():
    shown, display, out = progress(terminal=True)
    run_two_trials(shown)
    assert display._status is not None  # the trial running now is on the spinner
    display.stop()
    text = out.getvalue()
    assert "torchpace tune: trial" not in text  # no plain per-trial lines on a terminal
    assert "reference" in text and "rejected: crashed" in text


def test_quiet_shows_nothing():
    shown, display, out = progress(quiet=True, terminal=True)
    run_two_trials(shown)
    display.stop()
    assert out.getvalue() == ""
