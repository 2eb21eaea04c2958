"""A default end (issue 35): without --time-budget a tune ends within 10 minutes, and its
first line says so; the estimate follows the doctor's run."""

from __future__ import annotations

import types
from pathlib import Path

from test_search import FakeKnob, Machine, Quiet, context
from test_search import fake_registry as fake_registry  # the fixture

from torchpace.facts.run import RunFacts, Status, StepRecord
from torchpace.tune import ledger, session
from torchpace.tune.options import DEFAULT_TIME_BUDGET_S, DEFAULT_TRIALS, TuneOptions
from torchpace.tune.result import KnobStatus
from torchpace.tune.search import Tuner
from torchpace.tune.trial import TrialSettings


class _Display:
    def __init__(self):
        self.lines = []

    def line(self, text):
        self.lines.append(text)

    def stop(self):
        pass


def test_without_a_time_budget_the_default_end_is_the_limit():
    budget = session._budget(TuneOptions(target="train.py"))
    assert DEFAULT_TIME_BUDGET_S == 600.0
    assert (budget.seconds, budget.default_seconds) == (600.0, True)
    assert budget.says("time-budget") == (
        "the default 600 s time budget (--time-budget S to change it)"
    )
    given = session._budget(TuneOptions(target="train.py", time_budget=120.0))
    assert (given.seconds, given.default_seconds) == (120.0, False)
    assert given.says("time-budget") == "--time-budget 120 s"
    # the doctor's phase ends within it too
    assert session._doctor_timeout(TuneOptions(target="train.py")) == 600.0
    assert session._doctor_timeout(TuneOptions(target="train.py", trial_timeout=60.0)) == 60.0


def test_the_first_line_says_when_tune_ends(monkeypatch, tmp_path):
    """tune_script shows it first, on the display the verb hands it (derived before anything
    else)."""
    from torchpace.capture import target

    display = _Display()
    monkeypatch.setattr(session, "_diagnosis", lambda *a: (None, set(), None, []))
    start = types.SimpleNamespace(out_dir=tmp_path)
    monkeypatch.setattr(target, "start_run", lambda *a: start)
    assert session.tune_script(TuneOptions(target="train.py"), display) == 1
    assert display.lines[0] == (
        f"tune ends within 10 min (the default; --time-budget S to change it), "
        f"at most {DEFAULT_TRIALS} trials"
    )
    display.lines.clear()
    session.tune_script(TuneOptions(target="train.py", time_budget=90.0), display)
    assert display.lines[0].startswith("tune ends within 1.5 min (--time-budget)")


def test_the_estimate_follows_the_doctors_run(monkeypatch):
    facts = RunFacts(["python", "train.py"], "optimizer", [], 1.0, 3, 5, Status.COMPLETE)
    facts.steps = [StepRecord(i, 100.0, 0.0, False) for i in range(5)]
    facts.startup_s = 2.0
    monkeypatch.setattr(session.time, "perf_counter", lambda: 100.0)
    line = session._estimate_line(TuneOptions(target="train.py"), facts, started=67.0)
    # 2 s start-up + 3 warm-up and 10 timed steps of 100 ms: 3.3 s; 567 s left: 171 trials,
    # of which the trial budget allows 60
    assert line == (
        "estimate: ~3 s a trial (the doctor's run): about 60 trials in the 567 s left; "
        "tune ends by 600 s"
    )


def test_a_tune_stops_at_the_default_end_and_says_which_limit(monkeypatch, fake_registry):
    """Trials of 100 s: the default 600 s holds five; the knob being decided is closed as
    undecided by the default end, named as such."""
    fake_registry.add(FakeKnob("small", [True]))
    machine = Machine(lambda c: 96.0 if c else 100.0, jitter=[0.0, 3.0, -3.0, 2.0, -2.0])
    result = _tune_by_default(monkeypatch, machine, trial_s=100.0)
    assert result.stopped == "time-budget"
    assert result.stopped_by == "the default 600 s time budget (--time-budget S to change it)"
    assert result.wall_s <= 600.0
    (small,) = result.knobs
    assert small.status == KnobStatus.UNDECIDED
    assert "the default 600 s time budget" in small.reason


def test_the_default_end_leaves_the_final_check_its_runs(monkeypatch, fake_registry):
    """Trials of 50 s: a knob worth 2x is kept in its pairs, a second one's screen and pairs
    would run on to the default end. The search holds the final check's two pairs (4
    trials) back from the budget: the kept configuration is still paired with the script as
    it is, within the 600 s (before, the default end met the search and the top went out
    unchecked)."""
    fake_registry.add(FakeKnob("big", [True]))
    fake_registry.add(FakeKnob("small", [True]))

    def ms(config):
        return (50.0 if config.get("big") else 100.0) * (0.98 if config.get("small") else 1.0)

    machine = Machine(ms, jitter=[0.0, 3.0, -3.0, 2.0, -2.0])
    result = _tune_by_default(monkeypatch, machine, trial_s=50.0)
    assert result.stopped == "time-budget" and result.wall_s <= 600.0
    assert result.best == {"big": True}
    finals = [t for t in result.trials if "final configuration" in t.label]
    assert len(finals) >= 2, [t.label for t in result.trials]
    assert result.final_speedup is not None and result.final_speedup > 1.8
    by = {k.knob: k for k in result.knobs}
    assert by["small"].status == KnobStatus.NOT_TRIED  # the limit came first: said so
    assert "the default 600 s time budget" in by["small"].reason


def test_the_default_trials_are_named_as_the_default():
    """A tune that ran out of the default 60 trials says so, not "--budget 60" (never given)."""
    budget = session._budget(TuneOptions(target="train.py"))
    assert budget.says("budget") == f"the default {DEFAULT_TRIALS} trials (--budget N to change it)"
    given = session._budget(TuneOptions(target="train.py", budget=12))
    assert given.says("budget") == "--budget 12 trials"


def test_the_hold_is_what_the_final_check_of_the_top_runs(monkeypatch, fake_registry):
    """A top of one switchable knob is checked in two switched processes (the example's
    glibc malloc: 2 x 6.8 s, where two pairs of processes held 29 s of its 150 s back and
    starved bf16's decision); any other top in two pairs of processes."""
    from test_search import switchable, tuner

    from torchpace.tune.final import final_needs

    fake_registry.add(switchable("fused", [True]))
    fake_registry.add(FakeKnob("env", [True]))
    held = tuner(monkeypatch, Machine(lambda c: 10.0)).ledger
    monkeypatch.setattr(
        held, "expected_s", lambda config, switch="", arms=2: 7.0 if switch else 5.0
    )
    assert final_needs(held, {"fused": True}) == (2, 14.0)
    assert final_needs(held, {"env": True}) == (4, 20.0)
    assert final_needs(held, {"fused": True, "env": True}) == (4, 20.0)
    assert held.final_needs is final_needs  # the Tuner's ledger holds back what it says


def _tune_by_default(monkeypatch, machine, trial_s: float):
    """A tune with the default budget whose every trial takes ``trial_s`` on its clock."""
    clock = types.SimpleNamespace(now=0.0)

    def run(settings, config, label, out_dir):
        clock.now += trial_s
        result = machine(settings, config, label, out_dir)
        result.wall_s = trial_s
        return result

    monkeypatch.setattr(ledger, "run_trial", run)
    budget = session._budget(TuneOptions(target="train.py"))
    tuner = Tuner(TrialSettings("train.py", []), context(), Path("/nonexistent"), Quiet(),
                  budget=budget, clock=lambda: clock.now, started=0.0)  # fmt: skip
    return tuner.run()
