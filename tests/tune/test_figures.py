"""One set of figures (issue 22, item 5): the ladder, the final check, torchpace.toml's
[measured], tune_report.json and the HTML show the same speedup, computed once; a one-time
cost only where the candidate paid it and its reference did not; --time-budget held, its
stop named; tables that keep their columns off a terminal (item 8)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from test_search import LOSSES, FakeKnob, Quiet, context
from test_search import fake_registry as fake_registry  # the fixture

from torchpace.tune import ledger, output, report
from torchpace.tune.result import KnobOutcome, KnobStatus, Rung, TuneResult
from torchpace.tune.search import Budget, Tuner
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings


def _tuner(monkeypatch, run, **kw) -> Tuner:
    monkeypatch.setattr(ledger, "run_trial", run)
    return Tuner(TrialSettings("train.py", []), context(), Path("/nonexistent"), Quiet(), **kw)


def test_the_tomls_speedup_is_the_ladders_and_the_reports(monkeypatch, fake_registry):
    """Seen: ladder 1.07x, final check 1.20x (its pair against a 38.6 ms baseline when the
    others ran 28.5-32.6), the toml's speedup 1.196 beside its own 32.405 / 29.32 ms."""
    fake_registry.add(FakeKnob("a", [True]))
    calls = []

    def run(settings, config, label, out_dir):
        calls.append(label)
        ms = 29.3 if config else 32.4
        if label.startswith("reference baseline") and len(calls) % 3 == 0:
            ms = 38.6  # a slow baseline now and then, not slow enough to be disturbed
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 8, losses=LOSSES,
                           samples_per_step=32)  # fmt: skip

    result = _tuner(monkeypatch, run).run()
    assert result.best == {"a": True}
    figures = result.figures
    last = result.ladder[-1]
    assert last.speedup == figures["speedup"] == result.final_speedup
    measured = output._measured(result)
    assert measured["speedup"] == last.speedup
    # the toml's own two numbers give its speedup
    ratio = measured["baseline_ms_per_step"] / measured["tuned_ms_per_step"]
    assert ratio == pytest.approx(measured["speedup"], abs=0.002)
    assert measured["baseline_ms_per_step"] == result.ladder[0].median_ms
    assert measured["tuned_ms_per_step"] == last.median_ms
    settings = TrialSettings("train.py", [])
    as_json = report.to_dict(result, ["python", "train.py"], {}, settings)
    assert as_json["figures"]["speedup"] == as_json["ladder"][-1]["speedup"] == last.speedup
    text = io.StringIO()
    report.render(result, Console(file=text, width=200))
    assert f"{last.speedup:.2f}x" in text.getvalue().split("final check")[1].splitlines()[0]


def test_a_one_time_cost_the_baseline_paid_too_is_not_charged(monkeypatch, fake_registry):
    """Seen: "one-time cost 1.1 s" charged to a knob whose reference paid it too: the
    script's first evaluation at step 5, in the longer (drained) warm-up of a trial with
    loader workers, and in the measured steps of its reference."""
    fake_registry.add(FakeKnob("num-workers", [2]))
    fake_registry.add(FakeKnob("compile", [True]))

    def run(settings, config, label, out_dir):
        ms = 80.0 if config else 100.0
        warm = settings.warmup + (4 if config.get("num-workers") else 0)
        every = [ms] * (warm + 8)
        every[5] += 1100.0  # the first evaluation, every run, at step 5
        if config.get("compile"):
            every[0] += 20_000.0  # compilation: only the candidate pays it
        return TrialResult(label, dict(config), Outcome.OK, step_ms=every[warm:],
                           warmup_ms=every[:warm], losses=LOSSES,
                           measured_from=warm)  # fmt: skip

    result = _tuner(monkeypatch, run).run()
    by = {k.knob: k for k in result.knobs}
    assert by["num-workers"].status == KnobStatus.KEPT
    assert by["num-workers"].one_time_s is None, by["num-workers"].reason
    assert "one-time" not in by["num-workers"].reason
    assert by["compile"].one_time_s == pytest.approx(20.0, abs=0.1)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_time_budget_holds_and_says_which_limit_stopped(monkeypatch, fake_registry):
    """Seen: --time-budget 450 ran 495 s, said "(--budget)", and a knob marked "not tried:
    budget" had run."""
    for name in ("a", "b", "c", "d", "e"):
        fake_registry.add(FakeKnob(name, [True]))
    clock = FakeClock()
    clock.now = 40.0  # the doctor's run, before the search: counted

    def run(settings, config, label, out_dir):
        clock.now += 12.0  # each trial: 12 s
        ms = 100.0 + 3.0 * (len(label) % 3)  # nothing is faster: every knob takes pairs
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 8, losses=LOSSES,
                           wall_s=12.0)  # fmt: skip

    tuner = _tuner(monkeypatch, run, budget=Budget(trials=500, seconds=200.0), clock=clock,
                   started=0.0)  # fmt: skip
    result = tuner.run()
    assert result.stopped == "time-budget"
    assert result.stopped_by == "--time-budget 200 s"
    assert clock.now <= 200.0 * 1.05
    for k in result.knobs:
        ran = [r for r in result.trials if k.knob in r.config]
        if k.status == KnobStatus.NOT_TRIED:
            assert not ran, f"{k.knob} is 'not tried' and ran {len(ran)} trials"
            assert k.reason == "not tried: --time-budget 200 s"
    text = io.StringIO()
    report.render(result, Console(file=text, width=200))
    assert "stopped: --time-budget 200 s ran out" in text.getvalue()
    # the trial budget names itself too
    result = _tuner(monkeypatch, run, budget=Budget(trials=9)).run()
    assert (result.stopped, result.stopped_by) == ("budget", "--budget 9 trials")


def test_a_trial_far_slower_than_expected_is_stopped_where_the_time_budget_ends(
    monkeypatch, fake_registry
):
    """Seen under a doubled load: one trial of 15 ms steps ran at 1 s a step, 119 s, and a
    --time-budget 300 tune ended at 344 s. The trial's timeout is what the budget leaves."""
    fake_registry.add(FakeKnob("a", [True]))
    clock = FakeClock()
    timeouts = []

    def run(settings, config, label, out_dir):
        timeouts.append(settings.timeout_s)
        if config:  # the knob's trial stalls: it runs until its timeout stops it
            clock.now += settings.timeout_s
            return TrialResult(label, dict(config), Outcome.TIMEOUT, wall_s=settings.timeout_s)
        clock.now += 10.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[100.0] * 8, losses=LOSSES,
                           wall_s=10.0)  # fmt: skip

    tuner = _tuner(monkeypatch, run, budget=Budget(trials=50, seconds=200.0), clock=clock,
                   started=0.0)  # fmt: skip
    result = tuner.run()
    assert (result.stopped, result.stopped_by) == ("time-budget", "--time-budget 200 s")
    assert clock.now <= 200.0
    assert timeouts[-1] == pytest.approx(200.0 - 40.0)  # four baselines of 10 s before it
    assert result.verdicts[len(result.trials) - 1] == "stopped: the time budget ran out during it"
    assert result.knobs[0].status != KnobStatus.REJECTED  # the budget's doing, not the knob's


def _a_result() -> TuneResult:
    result = TuneResult()
    result.ladder = [
        Rung("baseline", {}, 100.0, 320.0, 1.0, 2**30, False),
        Rung("+ anomaly-detection-off", {"anomaly-detection": False}, 50.0, 640.0, 2.0,
             2**30, False),
    ]  # fmt: skip
    result.knobs = [
        KnobOutcome("anomaly-detection-off", KnobStatus.KEPT, "alone: " + "x " * 150, True,
                    100.0),
        KnobOutcome("persistent-workers", KnobStatus.NOT_APPLICABLE, "no loader workers"),
    ]  # fmt: skip
    return result


def test_tables_keep_their_columns_off_a_terminal(monkeypatch, capsys):
    """Seen: with output to a file, knob names broken across lines ("anomaly-detection-of" /
    "f"): rich wraps at 80 columns when stdout is not a terminal."""
    console = report.report_console()  # pytest's stdout is not a terminal
    assert not console.is_terminal and console.width == report.WIDE
    for width in (report.WIDE, 80):  # and even squeezed, a name is never broken
        text = io.StringIO()
        report.render(_a_result(), Console(file=text, width=width))
        lines = text.getvalue().splitlines()
        assert any("anomaly-detection-off" in line for line in lines), width
        assert not any(line.rstrip().endswith("anomaly-detection-of") for line in lines)


def test_the_tomls_comment_says_when_no_final_check_paired_the_speedup():
    """A time budget that ends before the final check: the toml's speedup is the rungs'
    gains chained, and its comment no longer says "paired with it (0 pairs)"."""
    result = TuneResult(best={"a": True}, figures={"speedup": 1.48})
    assert output._comments(result)[1] == (
        "1.48x the script as written, its rungs' gains chained; the final check did not run"
    )
    result.final_gains_pct = [40.0, 51.0]
    assert output._comments(result)[1] == "1.48x the script as written, paired with it (2 pairs)"
