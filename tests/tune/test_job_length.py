"""The job a one-time cost must repay: --job-steps, else the script's own end once a trial
saw it. The README's quick-start example ends after 32 steps (3 s of steps in all); tune
spent 44 s of its 5 minutes compiling it, for a saving that could never repay that."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_search import LOSSES, FakeKnob, Quiet, context, fake_registry  # noqa: F401

from torchpace.tune import baseline, ledger
from torchpace.tune.result import KnobStatus
from torchpace.tune.search import Tuner
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings

SCRIPT_STEPS = 32  # the script ends by itself after its 32nd step


class ShortScript:
    """A script that ends after SCRIPT_STEPS steps at 100 ms (80 ms compiled), each trial
    5 s; compiling costs ``compile_s`` once in the first step. A trial given less time than
    it needs (``settings.timeout_s``) times out there, as run_trial's would."""

    def __init__(self, compile_s: float):
        self.compile_s = compile_s
        self.timeouts: list[float | None] = []

    def __call__(self, settings, config, label, out_dir):
        compiled = bool(config)
        ms = 80.0 if compiled else 100.0
        warmup = [ms] * settings.warmup
        wall = 5.0
        if compiled:
            warmup[0] += 1000 * self.compile_s
            wall += self.compile_s
        self.timeouts.append(settings.timeout_s)
        if settings.timeout_s is not None and wall > settings.timeout_s:
            return TrialResult(label, dict(config), Outcome.TIMEOUT, wall_s=settings.timeout_s)
        timed = min(settings.steps, SCRIPT_STEPS - settings.warmup)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * timed,
                           losses=LOSSES, warmup_ms=warmup, wall_s=wall,
                           measured_from=settings.warmup)  # fmt: skip


def tune(monkeypatch, fake_registry, machine, **kw):  # noqa: F811
    knob = FakeKnob("compiled", [True])
    knob.pays_once = True
    fake_registry.add(knob)
    monkeypatch.setattr(ledger, "run_trial", machine)
    settings = TrialSettings("train.py", [], steps=40)
    return Tuner(settings, context(), Path("/nonexistent"), Quiet(), **kw).run()


def test_a_compilation_the_scripts_own_steps_cannot_repay_is_stopped_and_refused(
    monkeypatch,
    fake_registry,  # noqa: F811
):
    machine = ShortScript(compile_s=35.0)
    result = tune(monkeypatch, fake_registry, machine)
    knob = result.knobs[0]
    assert knob.status == KnobStatus.REJECTED and result.best == {}
    assert "not repaid within the job: stopped after" in knob.reason, knob.reason
    assert "the script ends by itself after 32" in knob.reason, knob.reason
    # stopped where the whole job's steps (32 x 100 ms) past its expected 5 s end, never
    # waited out: 1.1 x 5 s + 3.2 s + 5 s of slack
    capped = [t for t in machine.timeouts if t is not None]
    assert capped and max(capped) < 15.0


def test_a_one_time_cost_the_scripts_own_steps_repay_is_kept(monkeypatch, fake_registry):  # noqa: F811
    # 50 ms once (below what counts as a one-time cost), 20 ms a step saved: kept, and its
    # trials end within their cap
    machine = ShortScript(compile_s=0.05)
    result = tune(monkeypatch, fake_registry, machine)
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason


def test_given_job_steps_are_the_job_not_the_scripts_end(monkeypatch, fake_registry):  # noqa: F811
    # the user says the real job is long: 35 s of compilation at 20 ms a step saved is
    # repaid after ~2,000 steps, within 100,000
    machine = ShortScript(compile_s=35.0)
    result = tune(monkeypatch, fake_registry, machine, job_steps=100_000)
    knob = result.knobs[0]
    assert knob.status == KnobStatus.KEPT, knob.reason
    assert knob.one_time_s is not None and knob.one_time_s > 30


class LongScript(ShortScript):
    """A script whose trials stop at their timed steps; the cold run (``run_on_s``) goes on
    and sees it end by itself after ``length`` steps, or run past its run-on."""

    def __init__(self, compile_s: float, length: int, ends: bool = True):
        super().__init__(compile_s)
        self.length, self.ends = length, ends
        self.run_on: list[float] = []

    def __call__(self, settings, config, label, out_dir):
        self.run_on.append(settings.run_on_s)
        result = super().__call__(settings, config, label, out_dir)
        if settings.run_on_s and result.ok:
            result.script_steps, result.script_ended = self.length, self.ends
        return result


def test_the_cold_run_runs_on_to_the_scripts_end_and_that_is_the_job(
    monkeypatch,
    fake_registry,  # noqa: F811
):
    """moving_bottleneck's 200 steps run past every trial's timed steps: the job was unknown
    and torch.compile's 30 s were kept for a job they made 0.73x end to end. The cold run
    goes on after its timed steps and sees the script end: the job is its 200 steps."""
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)  # no trial sees the end itself
    machine = LongScript(compile_s=35.0, length=200)
    result = tune(monkeypatch, fake_registry, machine)
    assert machine.run_on[0] > 0 and not any(machine.run_on[1:])  # the cold run only
    knob = result.knobs[0]
    assert knob.status == KnobStatus.REJECTED and result.best == {}, knob.reason
    assert "the script ends by itself after 200" in knob.reason, knob.reason


def test_a_script_that_runs_past_the_run_on_is_a_long_job(monkeypatch, fake_registry):  # noqa: F811
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)
    machine = LongScript(compile_s=35.0, length=400, ends=False)
    result = tune(monkeypatch, fake_registry, machine)
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason


def test_given_job_steps_the_cold_run_does_not_run_on(monkeypatch, fake_registry):  # noqa: F811
    machine = LongScript(compile_s=35.0, length=200)
    tune(monkeypatch, fake_registry, machine, job_steps=100_000)
    assert not any(machine.run_on)


def test_a_kept_one_time_cost_says_how_far_the_script_ran(monkeypatch, fake_registry):  # noqa: F811
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)
    machine = LongScript(compile_s=35.0, length=400, ends=False)
    knob = tune(monkeypatch, fake_registry, machine).knobs[0]
    assert "the script ran past 400 steps (--job-steps N if the job is shorter)" in knob.reason


def test_the_first_trial_says_its_time_and_the_jobs_length(monkeypatch, fake_registry):  # noqa: F811
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)
    knob = FakeKnob("compiled", [True])
    fake_registry.add(knob)
    monkeypatch.setattr(ledger, "run_trial", LongScript(compile_s=35.0, length=200))
    notes: list[str] = []
    settings = TrialSettings("train.py", [], steps=40)
    Tuner(settings, context(), Path("/nonexistent"), Quiet(), note=notes.append).run()
    first = next(n for n in notes if "the first trial took" in n)
    assert "the first trial took 5.0 s" in first
    assert "the script ends by itself after 200 steps" in first


def _short_job_tune(monkeypatch, fake_registry, machine, budget):  # noqa: F811
    from torchpace.tune.ledger import Budget

    fake_registry.add(FakeKnob("compiled", [True]))
    monkeypatch.setattr(ledger, "run_trial", machine)
    notes: list[str] = []
    settings = TrialSettings("train.py", [], steps=40)
    tuner = Tuner(settings, context(), Path("/nonexistent"), Quiet(),
                  budget=Budget(**budget), note=notes.append)  # fmt: skip
    tuner.run()
    return tuner.ledger.budget, next(n for n in notes if "the first trial took" in n)


def test_without_a_time_budget_a_short_job_is_tuned_for_twenty_of_its_runs(
    monkeypatch,
    fake_registry,  # noqa: F811
):
    """The README's quick-start example runs 5 s in all: the default end is not 10 minutes
    (85 of its runs) but max(150 s, 20 runs)."""
    budget, said = _short_job_tune(monkeypatch, fake_registry, ShortScript(compile_s=0.0),
                                   {"seconds": 600.0, "default_seconds": True})  # fmt: skip
    assert budget.seconds == baseline.SHORT_JOB_MIN_S
    assert "a short job (5.0 s a run): tune ends by 150 s, 20 of its runs" in said


def test_a_long_run_of_a_short_job_gets_twenty_runs(monkeypatch, fake_registry):  # noqa: F811
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)
    machine = LongScript(compile_s=0.0, length=1000)
    real = machine.__call__

    def slower(settings, config, label, out_dir):  # the cold run ran on 5 s more: 10 s a run
        result = real(settings, config, label, out_dir)
        result.ran_on_s = 5.0 if settings.run_on_s else 0.0
        return result

    budget, _ = _short_job_tune(monkeypatch, fake_registry, slower,
                                {"seconds": 600.0, "default_seconds": True})  # fmt: skip
    assert budget.seconds == 200.0


@pytest.mark.parametrize(
    ("budget", "ends"),
    [({"seconds": 600.0, "default_seconds": False}, True),  # --time-budget 600: the user's
     ({"seconds": 600.0, "default_seconds": True}, False)],  # a long job: the default stays
)  # fmt: skip
def test_a_given_time_budget_or_a_long_job_keeps_its_end(monkeypatch, fake_registry, budget, ends):  # noqa: F811
    monkeypatch.setitem(globals(), "SCRIPT_STEPS", 1000)
    machine = LongScript(compile_s=0.0, length=1000, ends=ends)
    got, said = _short_job_tune(monkeypatch, fake_registry, machine, budget)
    assert got.seconds == 600.0 and "short job" not in said


def test_a_knob_that_pays_once_is_climbed_after_every_row(
    monkeypatch,
    fake_registry,  # noqa: F811
):
    """makemore's 300-step job: torch.compile's screen (20-25 s, stopped as not repaid) came
    before fused AdamW's decision, then before the loader workers' screen (the data row),
    which then no longer fit in the time left."""
    compiled = FakeKnob("compiled", [True])
    compiled.pays_once = True
    fake_registry.add(compiled)  # first in the registry
    fake_registry.add(FakeKnob("fused", [True]))
    workers = FakeKnob("workers", [0])
    workers.row = "data"
    fake_registry.add(workers)
    short = ShortScript(compile_s=35.0)

    def machine(settings, config, label, out_dir):  # only `compiled` compiles
        if config.get("compiled"):
            return short(settings, config, label, out_dir)
        result = short(settings, {}, label, out_dir)
        result.config = dict(config)
        return result

    monkeypatch.setattr(ledger, "run_trial", machine)
    settings = TrialSettings("train.py", [], steps=40)
    result = Tuner(settings, context(), Path("/nonexistent"), Quiet()).run()
    labels = [t.label for t in result.trials]
    first_compiled = next(i for i, t in enumerate(result.trials) if t.config.get("compiled"))
    others = [i for i, t in enumerate(result.trials) if t.config in ({"fused": True},
                                                                     {"workers": 0})]  # fmt: skip
    assert len(others) >= 2 and max(others) < first_compiled, labels
