"""The search's decisions on scripted trial results: no process is started here.

Each fake trial's step time comes from a table keyed by the configuration, with a little
alternating jitter, so that noise, confirmation, combination and the final check are
exercised exactly as on a real machine, but in milliseconds.
"""

from __future__ import annotations

import itertools
import math
import random
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from test_replay import ReplayKnob

import torchpace.knobs as registry
from torchpace.capture.switching import BLOCK_PAIRS, SETTLE_STEPS, block_steps
from torchpace.env.cpu import CpuFacts
from torchpace.facts.run import RunFacts, Status
from torchpace.knobs.base import Knob, TuneContext
from torchpace.report.memory_model import BatchHeadroom
from torchpace.tune import ledger, noise
from torchpace.tune import report as tune_report
from torchpace.tune.disturbed import MAX_RERUNS
from torchpace.tune.noise import (
    UNMEASURED_THRESHOLD_PCT,
    faster,
    gain_pct,
    measure_noise,
)
from torchpace.tune.result import KnobStatus
from torchpace.tune.search import Budget, Tuner
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings, arm_configs


class FakeKnob(ReplayKnob):
    """A scripted knob; "workers" answers the doctor's TP101."""

    def __init__(self, name, values, applicable=True, numerics=False, depends_on=(), opt_in=None):
        answers = ("TP101",) if name == "workers" else ()
        super().__init__(name, values, applicable=applicable, numerics=numerics,
                         depends_on=depends_on, opt_in=opt_in, answers=answers)  # fmt: skip


@pytest.fixture
def fake_registry(monkeypatch):
    """Installs fake knobs under the registry's API; returns a function to add them."""
    knobs: dict[str, Knob] = {}

    def add(knob: Knob) -> None:
        knobs[knob.name] = knob

    monkeypatch.setattr(registry, "get", lambda name: knobs[name])
    holder = types.SimpleNamespace(add=add, knobs=knobs)
    monkeypatch.setattr(registry, "NAMES", _Names(knobs))
    return holder


class _Names(tuple):
    """A live view of the fake registry's names, in the order they were added."""

    def __new__(cls, knobs):
        obj = super().__new__(cls)
        obj._knobs = knobs
        return obj

    def __iter__(self):
        return iter(list(self._knobs))

    def index(self, name):
        return list(self._knobs).index(name)

    def __contains__(self, name):
        return name in self._knobs


def context(**kw) -> TuneContext:
    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=["SGD"],
        optimizer_steps_per_step=1.0, warmup=3, steps_requested=5, status=Status.COMPLETE,
    )  # fmt: skip
    cpu = CpuFacts("cpu", 2, 2, 2, 1, ("AVX2",), "AVX2")
    return TuneContext(facts, cpu, "cpu", None, False, (2, 14), **kw)


class Machine:
    """Scripted trials: ms/step per configuration, jitter alternating +-jitter_pct."""

    def __init__(self, times, jitter_pct=1.0, losses=None, failures=None, jitter=None):
        self.times = times  # function config -> ms/step
        # jitter: a cycle of signed % per trial; alternating +-jitter_pct by default
        pattern = jitter or [jitter_pct, -jitter_pct]
        self.jitter = itertools.cycle([1 + j / 100 for j in pattern])
        self.losses = losses or (lambda config: [2.3, 2.3, 2.3])  # steps 0, 1, 2
        self.failures = failures or {}
        self.configs: list[dict] = []

    def __call__(self, settings, config, label, out_dir):
        self.configs.append(dict(config))
        key = tuple(sorted(config.items()))
        if key in self.failures:
            return TrialResult(
                label, dict(config), self.failures[key], error="boom\nRuntimeError: x"
            )
        ms = self.times(config) * next(self.jitter)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5,
                           losses=dict(enumerate(self.losses(config))),
                           samples_per_step=32)  # fmt: skip


LOSSES = {0: 2.3, 1: 2.3, 2: 2.3}  # the loss of steps 0-2 in every scripted trial


class Quiet:
    def trial_started(self, index, label):
        pass

    def trial_done(self, result, verdict, best_speedup):
        pass


def tuner(monkeypatch, machine, ctx=None, **kw) -> Tuner:
    monkeypatch.setattr(ledger, "run_trial", machine)
    settings = TrialSettings("train.py", [])
    return Tuner(settings, ctx or context(), Path("/nonexistent"), Quiet(), **kw)


def test_noise_and_gain_arithmetic():
    noise = measure_noise([100.0, 110.0])
    assert math.isclose(noise.pct, 100 * 10 / 105, rel_tol=1e-3)
    assert gain_pct(80.0, 100.0) == 25.0
    assert faster(80.0, 100.0, noise) and not faster(95.0, 100.0, noise)
    # one run has no spread: the noise is unknown (never 0%), and a clear win needs more
    single = measure_noise([100.0])
    assert single.pct is None and single.threshold_pct == UNMEASURED_THRESHOLD_PCT


def test_keeps_the_faster_knob_and_rejects_the_slower(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [1, 2]))
    fake_registry.add(FakeKnob("slow", [True]))
    times = {(): 100.0, (("workers", 1),): 70.0, (("workers", 2),): 60.0, (("slow", True),): 130.0}

    def ms(config):
        return times.get(tuple(sorted(config.items())), 100.0)

    result = tuner(monkeypatch, Machine(ms)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT and by["workers"].value == 2
    assert by["slow"].status == KnobStatus.REJECTED and "slower" in by["slow"].reason
    assert result.best == {"workers": 2}
    assert [r.label for r in result.ladder] == ["baseline", "+ workers=2"]
    assert result.final_speedup == pytest.approx(100 / 60, rel=0.05)


def test_a_first_run_in_a_slow_phase_gets_a_second_look_and_the_win_is_kept(
    monkeypatch, fake_registry
):
    """gpt.py on the shared VM: fused AdamW, 1.27x faster over whole runs, screened at -10%
    in one run that fell in a slow phase of the machine and was refused on it."""
    fake_registry.add(FakeKnob("fused", [True]))

    def ms(config):
        if config.get("fused"):
            slow_phase = not any(c.get("fused") for c in machine.configs[:-1])
            return 140.0 if slow_phase else 78.0  # the first run only: 40 ms/step steps
        return 100.0

    machine = Machine(ms)
    result = tuner(monkeypatch, machine).run()
    knob = result.knobs[0]
    assert knob.status == KnobStatus.KEPT, knob.reason
    assert result.best == {"fused": True}
    verdicts = list(result.verdicts.values())
    assert any("one more pair" in v for v in verdicts), verdicts
    assert any("second look" in t.label for t in result.trials)


def test_values_screened_within_the_margin_are_ranked_in_one_more_block(monkeypatch, fake_registry):
    """makemore on the shared VM: num_workers=0 (1.62x over whole runs) screened in a slow
    phase just behind workers=2 and was never paired. Values whose single screens lie within
    the clear margin of the best run once more beside a fresh reference; the best mean wins."""
    fake_registry.add(FakeKnob("workers", [0, 2]))

    def ms(config):
        if "workers" not in config:
            return 100.0
        if config["workers"] == 0:
            first = sum(1 for c in machine.configs if c.get("workers") == 0) == 1
            return 93.0 if first else 60.0  # its screen fell in a slow phase
        return 90.0

    machine = Machine(ms)
    result = tuner(monkeypatch, machine).run()
    knob = result.knobs[0]
    assert knob.status == KnobStatus.KEPT and knob.value == 0, knob.reason
    ranking = [t for t in result.trials if "(ranking)" in t.label]
    assert sorted(str(t.config) for t in ranking) == ["{'workers': 0}", "{'workers': 2}", "{}"]


def test_no_ranking_when_the_trial_budget_could_not_then_confirm(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [0, 2]))
    machine = Machine(lambda c: {0: 26.0, 2: 26.3}.get(c.get("workers"), 100.0))
    # 4 baselines and 2 screens leave 6 of 12: the block (3) and two pairs (4) do not fit
    result = tuner(monkeypatch, machine, budget=Budget(trials=12)).run()
    assert not [t for t in result.trials if "(ranking)" in t.label], [
        t.label for t in result.trials
    ]
    assert "workers" in result.best  # the best screen, confirmed within the budget
    result = tuner(monkeypatch, Machine(machine.times), budget=Budget(trials=13)).run()
    assert [t for t in result.trials if "(ranking)" in t.label]


def test_a_value_clearly_best_in_its_screen_needs_no_ranking(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [1, 2]))
    machine = Machine(lambda c: {1: 80.0, 2: 60.0}.get(c.get("workers"), 100.0))
    result = tuner(monkeypatch, machine).run()
    assert result.best == {"workers": 2}
    assert not [t for t in result.trials if "(ranking)" in t.label]


def test_a_knob_slower_in_two_runs_is_refused_after_the_second_look(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("slow", [True]))
    machine = Machine(lambda c: 130.0 if c else 100.0)
    result = tuner(monkeypatch, machine).run()
    knob = result.knobs[0]
    assert knob.status == KnobStatus.REJECTED
    assert "in its first two runs" in knob.reason, knob.reason
    assert sum(1 for c in machine.configs if c) == 2


def test_within_noise_is_not_a_win(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("tiny", [True]))
    # the baseline swings by 10% from one run to the next; the knob is worth 2%: it looks
    # promising now and then, more pairs are run, and their estimate stays below what a
    # change is worth
    jitter = [0, 5, -5, 5, -1.70, 0, 1.03, 0, -3.73, 0, 5.20, 0, 1.03, 0]
    machine = Machine(lambda c: 98.0 if c else 100.0, jitter=jitter)
    result = tuner(monkeypatch, machine).run()
    assert result.noise.pct > 5
    assert 2 < sum(1 for c in machine.configs if c) <= noise.MAX_PAIRS
    assert result.knobs[0].status == KnobStatus.REJECTED
    assert "not worth a change" in result.knobs[0].reason
    assert result.best == {}


def seeded_jitter(sd_pct: float, n: int = 200, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0, sd_pct) for _ in range(n)]


def test_a_real_gain_smaller_than_the_noise_is_kept_after_more_pairs(monkeypatch, fake_registry):
    """bf16 autocast on the Zen 4 CPU: about 10% faster, on a VM whose runs swing 15% from
    one to the next. A threshold on single runs refused it; the paired test keeps it."""
    fake_registry.add(FakeKnob("bf16", [True]))
    machine = Machine(lambda c: 90.0 if c else 100.0, jitter=seeded_jitter(5.0))
    result = tuner(monkeypatch, machine).run()
    knob = result.knobs[0]
    assert result.noise.threshold_pct > 10  # no single pair could have shown it
    assert knob.status == KnobStatus.KEPT, knob.reason
    assert 5 < knob.gain_pct < 16
    pairs = sum(1 for c in machine.configs[:-4] if c == {"bf16": True})
    assert pairs >= 3, "a gain inside the noise needs more than the two-pair fast path"
    assert result.best == {"bf16": True}


def test_a_knob_worth_nothing_on_a_noisy_machine_is_refused(monkeypatch, fake_registry):
    for seed in range(1, 6):
        fake_registry.knobs.clear()
        fake_registry.add(FakeKnob("nothing", [True]))
        machine = Machine(lambda c: 100.0, jitter=seeded_jitter(5.0, seed=seed))
        result = tuner(monkeypatch, machine).run()
        assert result.knobs[0].status == KnobStatus.REJECTED, (seed, result.knobs[0].reason)
        assert len(machine.configs) <= 4 + 2 * noise.MAX_PAIRS  # the test stops by itself


def test_the_paired_test_decides_as_documented():
    quiet = measure_noise([100.0, 101.0, 100.5])
    loud = measure_noise([100.0, 115.0, 108.0])  # 13.9%: the clear margin
    one = noise.judge([40.0], quiet)
    assert one.decision == noise.Decision.UNDECIDED  # one pair never decides a win
    # one pair refuses only a loss three times beyond the clear margin; a small one waits
    assert noise.judge([-2.0], loud).decision == noise.Decision.UNDECIDED
    assert noise.judge([-50.0], loud).decision == noise.Decision.NOT_FASTER
    assert noise.judge([-20.0, -16.0], loud).decision == noise.Decision.NOT_FASTER
    # two pairs each beyond the clear margin: a clear win
    assert noise.judge([20.0, 18.0], loud).decision == noise.Decision.FASTER
    # inside it: more pairs, until the interval decides
    assert noise.judge([12.0, 8.0], loud).decision == noise.Decision.UNDECIDED
    assert noise.judge([12.0, 8.0, 10.0, 9.0, 11.0], loud).decision == noise.Decision.UNDECIDED
    # 6 pairs: the first 95% lower bound (all six faster: 1 chance in 64 under no effect)
    kept = noise.judge([12.0, 8.0, 10.0, 9.0, 11.0, 7.0], loud)
    assert kept.decision == noise.Decision.FASTER and "95% lower bound" in kept.reason
    # one disturbed pair among them moves the estimate by one rank, not by 1,259% / n
    stray = noise.judge([12.0, 8.0, 10.0, 1259.0, 11.0, 7.0], loud)
    assert stray.decision == noise.Decision.FASTER
    assert 9.0 < stray.estimate_pct < 12.0
    # worth nothing: the interval's top under what a change must be worth
    flat = noise.judge([1.0, -1.0, 0.5, 2.0, -0.5, 0.2], loud)
    assert flat.decision == noise.Decision.NOT_FASTER
    # no gain at all after FUTILE_FROM pairs
    assert noise.judge([5.0, -6.0, 1.0, -4.0], loud).decision == noise.Decision.UNDECIDED
    assert (
        noise.judge([5.0, -6.0, 1.0, -4.0, 2.0, -3.0], loud).decision == noise.Decision.NOT_FASTER
    )
    # promising but unresolved: on to MAX_PAIRS, then refused, saying so
    wide = [25.0, -5.0, 10.0, -8.0, 4.0, 9.0, -3.0, 12.0, -2.0, 3.0]
    assert noise.judge(wide, loud).decision == noise.Decision.UNDECIDED
    out = noise.judge([*wide, 6.0, -4.0, 11.0, -6.0, 2.0, 5.0], loud)
    assert out.decision == noise.Decision.NOT_FASTER and "16 pairs" in out.reason
    assert "beyond the noise" in out.reason
    # past SOFT_MAX_PAIRS only an estimate worth a change goes on
    flat12 = [25.0, -5.0, 10.0, -8.0, 4.0, 9.0, -3.0, 1.0, -2.0, 3.0, -4.0, 0.5]
    assert noise.judge(flat12, loud).decision == noise.Decision.NOT_FASTER


def test_the_signed_rank_interval_is_exact():
    # n pairs all faster: the chance of that under no effect is 1/2^n; the lower bound (the
    # smallest Walsh average) exists from 5 pairs at 5% (1/32), not at 4 (1/16)
    assert noise.interval([5.0, 6.0, 7.0, 8.0]).low_pct is None
    five = noise.interval([5.0, 6.0, 7.0, 8.0, 9.0])
    assert five.low_pct == pytest.approx(5.0, abs=0.01)
    assert five.high_pct == pytest.approx(9.0, abs=0.01)
    assert five.estimate_pct == pytest.approx(7.0, abs=0.05)
    # the signed-rank distribution itself is tested in tests/test_stats.py


def test_the_smallest_detectable_change_follows_the_pairs_spread():
    quiet = noise.detectable_pct(1.0)
    loud = noise.detectable_pct(8.0)
    assert quiet == noise.MIN_GAIN_PCT  # never below what a change must be worth
    assert 5.0 < loud < 10.0
    assert noise.detectable_pct(8.0, pairs=40) < loud
    # pooled around each decision's own centre: a knob's real gain is not spread
    sd = noise.spread_of_pairs([[10.0, 12.0, 8.0], [0.0, 2.0, -2.0], [500.0]])
    assert 1.5 < sd < 3.5


def test_the_first_cold_run_is_not_counted_as_noise(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("a", [True]))
    calls = itertools.count()

    def run(settings, config, label, out_dir):
        cold = next(calls) == 0  # the first process reads the script and data from disk
        ms = 125.0 if cold else (80.0 if config else 100.0)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    assert result.noise.pct == 0.0
    assert result.ladder[0].median_ms == 100.0
    assert result.best == {"a": True}


def test_a_crashing_trial_is_recorded_and_tune_goes_on(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("crash", [True]))
    fake_registry.add(FakeKnob("workers", [2]))
    machine = Machine(
        lambda c: 50.0 if c.get("workers") else 100.0,
        failures={(("crash", True),): Outcome.CRASHED},
    )
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["crash"].status == KnobStatus.REJECTED and "crashed" in by["crash"].reason
    assert by["workers"].status == KnobStatus.KEPT
    assert result.best == {"workers": 2}


def test_loss_check_rejects_a_fast_knob_that_breaks_the_loss(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("broken", [True], numerics=True))
    fake_registry.add(FakeKnob("nan", [True], numerics=True))

    def losses(config):
        if config.get("broken"):
            return [4.0, 4.1, 4.2]
        if config.get("nan"):
            return [2.3, float("nan"), 2.3]
        return [2.3, 2.31, 2.29]

    machine = Machine(lambda c: 50.0 if c else 100.0, losses=losses)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["broken"].status == KnobStatus.REJECTED and "tolerance" in by["broken"].reason
    assert by["nan"].status == KnobStatus.REJECTED and "nan" in by["nan"].reason
    assert result.best == {}


def test_winners_combine_only_while_the_combination_gains(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("a", [True]))
    fake_registry.add(FakeKnob("b", [True]))
    fake_registry.add(FakeKnob("c", [True]))

    def ms(config):  # a and b each help alone; b adds nothing on top of a; c adds on top
        if config == {}:
            return 100.0
        t = 100.0
        if config.get("a"):
            t = 60.0
        if config.get("b"):
            t = t if config.get("a") else 70.0
        if config.get("c"):
            t *= 0.8
        return t

    result = tuner(monkeypatch, Machine(ms)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["a"].status == KnobStatus.KEPT and by["c"].status == KnobStatus.KEPT
    assert by["b"].status == KnobStatus.REJECTED and "on top of a" in by["b"].reason
    assert result.best == {"a": True, "c": True}
    assert [r.label for r in result.ladder] == ["baseline", "+ a=True", "+ c=True"]


def test_dependent_knob_is_tried_on_top_of_its_dependency(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [2]))
    fake_registry.add(FakeKnob("persistent", [True], depends_on=("workers",)))
    machine = Machine(lambda c: 30.0 if c.get("persistent") else (50.0 if c else 100.0))
    result = tuner(monkeypatch, machine).run()
    assert {"workers": 2, "persistent": True} in machine.configs
    assert {"persistent": True} not in machine.configs
    assert result.best == {"workers": 2, "persistent": True}


class RowMachine(Machine):
    """Scripted trials whose steps wait for the loader: ``loader(config)`` ms to deliver a
    batch, ``compute(config)`` ms of step; a step takes the larger and waits the difference
    (the data row, recorded as each step's data wait)."""

    def __init__(self, loader, compute):
        super().__init__(lambda c: max(loader(c), compute(c)))
        self.loader, self.compute = loader, compute

    def __call__(self, settings, config, label, out_dir):
        result = super().__call__(settings, config, label, out_dir)
        wait = max(self.loader(config) - self.compute(config), 0.0)
        result.data_wait_ms = [wait] * len(result.step_ms)
        return result


def _loader_knobs(fake_registry) -> None:
    """workers (data row, a partial fix), persistent (data row, the rest of the fix, on top
    of workers), bf16 (compute row)."""
    workers = FakeKnob("workers", [2])
    persistent = FakeKnob("persistent", [True], depends_on=("workers",))
    workers.row = persistent.row = "data"
    fake_registry.add(FakeKnob("bf16", [True]))
    fake_registry.add(workers)
    fake_registry.add(persistent)


def _loader_ms(config) -> float:
    return 10.0 if config.get("persistent") else (85.0 if config.get("workers") else 100.0)


def _compute_ms(config) -> float:
    return 25.0 if config.get("bf16") else 40.0


def test_the_biggest_row_s_knobs_are_screened_first(monkeypatch, fake_registry):
    """The loader waits 60 of a 100 ms step: the data row's knob is screened before bf16,
    although bf16 comes first in the registry, and bf16 is screened on top of it."""
    _loader_knobs(fake_registry)
    machine = RowMachine(_loader_ms, _compute_ms)
    tuner(monkeypatch, machine).run()
    screened = [c for c in machine.configs if c]
    assert screened[0] == {"workers": 2}
    assert {"bf16": True} not in machine.configs  # never on the loader-bound baseline


def test_a_knob_that_read_nothing_behind_the_loader_is_screened_again_once_it_is_fixed(
    monkeypatch, fake_registry
):
    """bf16 reads 0% while the loader dominates (workers=2 leaves 45 ms of wait beside 40
    of compute); once persistent workers remove the wait, it is screened again on top of
    them and kept (25 ms against 40)."""
    _loader_knobs(fake_registry)
    machine = RowMachine(_loader_ms, _compute_ms)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    fixed = {"workers": 2, "persistent": True}
    behind = machine.configs.index({"workers": 2, "bf16": True})
    again = machine.configs.index({**fixed, "bf16": True})
    assert behind < machine.configs.index(fixed) < again
    assert by["bf16"].status == KnobStatus.KEPT
    assert "behind the data row" in by["bf16"].reason
    assert result.best == {**fixed, "bf16": True}
    assert [r.label for r in result.ladder][-1] == "+ bf16=True"


def test_a_knob_decided_on_top_of_what_is_kept_is_not_screened_again_there(
    monkeypatch, fake_registry
):
    """loader_just_behind at c824dce: bf16 screened behind the data row, then decided on
    top of fused AdamW in 5 processes (a second look among them) and refused; because its
    screen's rows were the data row's, it was screened again on top of fused AdamW, the
    same comparison, 2 processes more (56 block pairs for -0.4%) while the 176 s ran out.
    Decided on top of what is kept now, it has been measured where its row stands."""
    from types import SimpleNamespace

    from torchpace.tune.ladder import Ladder, _Judged
    from torchpace.tune.result import KnobOutcome
    from torchpace.tune.rows import StepRows

    knob = FakeKnob("bf16", [True])
    fake_registry.add(knob)
    ledger = tuner(monkeypatch, Machine(lambda c: 10.0)).ledger
    ladder = Ladder(ledger, context())
    ledger.knobs.append(KnobOutcome("bf16", KnobStatus.REJECTED, "not confirmed", gain_pct=-0.4))
    ledger.ladder[:] = [SimpleNamespace(config={}), SimpleNamespace(config={"fused": True})]
    ladder._top_rows = StepRows({"data": 1.6, "compute": 2.4}, 20.0)  # compute now the biggest
    judged = _Judged(knob, (True,), StepRows({"data": 2.2, "compute": 1.8}, 21.0), 12.8, {})
    assert ladder._hidden(judged, "compute")  # screened behind the data row, never decided
    judged.decided_on = {}  # decided on the baseline: the compute row has moved since
    assert ladder._hidden(judged, "compute")
    judged.decided_on = {"fused": True}  # decided where its row stands now
    assert not ladder._hidden(judged, "compute")


def test_the_climb_from_a_refused_fix_screens_what_showed_most_first(monkeypatch, fake_registry):
    """moving_bottleneck at 824dddf: two workers refused, the data row gone under them; the
    climb screened the first finding's bf16 (+0.2% behind the loader, judged first) before
    the fused optimizer (+8.3%), and the 170 s ended before fused's screen on top of them."""
    from torchpace.tune.ladder import Ladder, _Judged
    from torchpace.tune.result import KnobOutcome
    from torchpace.tune.rows import StepRows

    knobs = {name: FakeKnob(name, [True]) for name in ("bf16", "fused", "workers")}
    for knob in knobs.values():
        fake_registry.add(knob)
    ledger = tuner(monkeypatch, Machine(lambda c: 10.0)).ledger
    ladder = Ladder(ledger, context())
    for name in knobs:
        ledger.knobs.append(KnobOutcome(name, KnobStatus.REJECTED, "not confirmed"))
    behind = StepRows({"data": 4.8, "compute": 1.6}, 24.0)
    bf16, fused, workers = (
        _Judged(knobs[name], (True,), behind, gain, {})
        for name, gain in (("bf16", 0.2), ("fused", 8.3), ("workers", -2.2))
    )  # fmt: skip
    ladder._judged = {"bf16": bf16, "fused": fused, "workers": workers}
    screened = []
    monkeypatch.setattr(ladder, "_screen_values",
                        lambda knob, values, base, outcome: screened.append(knob.name))  # fmt: skip
    under = StepRows({"data": 1.3, "compute": 13.4}, 24.0)
    ladder._climb_from(workers, (True, [], under, 1.2), [bf16, fused])
    assert screened == ["fused", "bf16"]


class PacedMachine(Machine):
    """Trials whose loader workers make batches beside the step (moving_bottleneck.py):
    ``pace(config)`` ms a batch, ``compute(config)`` ms of step; the step takes the larger
    plus 1.5 ms to receive the batch, and waits that 1.5 ms plus what the loader is behind.
    Each trial records the workers' pace (capture/loader_period.py)."""

    def __init__(self, pace, compute):
        super().__init__(lambda c: max(pace(c), compute(c)) + 1.5)
        self.pace, self.compute = pace, compute

    def __call__(self, settings, config, label, out_dir):
        result = super().__call__(settings, config, label, out_dir)
        wait = 1.5 + max(self.pace(config) - self.compute(config), 0.0)
        result.data_wait_ms = [wait] * len(result.step_ms)
        result.loader_period_ms = self.pace(config)
        return result


def _by_knobs(steps: dict[tuple, float]) -> Callable[[dict], float]:
    """A trial's ms a step from a table keyed by the sorted names of its knobs."""
    return lambda config: steps[tuple(sorted(config))]


def _paced_knobs(fake_registry) -> None:
    """fused (compute row), then workers (data row), in the registry's order."""
    workers = FakeKnob("more-workers", [2])
    workers.row = "data"
    fake_registry.add(FakeKnob("fused", [True]))
    fake_registry.add(workers)


def _pace_ms(config) -> float:
    return 13.5 if config.get("more-workers") else 27.0


def test_a_loader_that_hides_its_wait_is_climbed_first(monkeypatch, fake_registry):
    """One worker makes a batch in 27 ms beside a 23 ms compute step: the step waits 5.5 of
    its 28.5 ms, and read by its wait alone the compute row (23 ms) is the biggest. A free
    compute step would still take 27 ms: the compute row is 1.5 ms, the loader's row is
    climbed first, and the fused optimizer (16 ms of compute) is screened on top of it."""
    _paced_knobs(fake_registry)
    machine = PacedMachine(_pace_ms, lambda c: 16.0 if c.get("fused") else 23.0)
    result = tuner(monkeypatch, machine).run()
    screened = [c for c in machine.configs if c]
    assert screened[0] == {"more-workers": 2}
    assert {"fused": True} not in machine.configs  # never where the loader hides it
    assert result.best == {"more-workers": 2, "fused": True}


def test_a_knob_whose_row_had_no_room_is_screened_again_once_it_has(monkeypatch, fake_registry):
    """The loader and the compute step keep about the same pace (27 and 27.5 ms): both rows
    are small (1.5 and 2 ms of 29) and the fused optimizer, screened first, reads +1.8%.
    Two workers (27 ms: a loader's pace varies, and the slower of two paces sets the step)
    give the compute row 13.5 ms of the step: fused is screened again on top of them and
    kept."""
    _paced_knobs(fake_registry)
    steps = {(): 29.0, ("fused",): 28.5, ("more-workers",): 27.0, ("fused", "more-workers"): 17.5}
    machine = PacedMachine(_pace_ms, lambda c: 16.0 if c.get("fused") else 27.5)
    machine.times = _by_knobs(steps)
    result = tuner(monkeypatch, machine).run()
    assert machine.configs.index({"fused": True}) < machine.configs.index({"more-workers": 2})
    assert {"more-workers": 2, "fused": True} in machine.configs
    by = {k.knob: k for k in result.knobs}
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert "screened again once the compute row was grown" in by["fused"].reason
    assert result.best == {"more-workers": 2, "fused": True}


class SwitchedPacedMachine(PacedMachine):
    """PacedMachine whose switched trials read the table's gain in their block pairs,
    except the first switched process, whose pairs read ``first`` (a slow phase of it)."""

    def __init__(self, pace, compute, first: list[float]):
        super().__init__(pace, compute)
        self.first, self.switched_runs = first, 0

    def __call__(self, settings, config, label, out_dir):
        result = super().__call__(settings, config, label, out_dir)
        result.step_ms = result.step_ms[:1] * settings.steps  # every step asked for: the
        result.data_wait_ms = result.data_wait_ms[:1] * settings.steps  # script is long
        if settings.switch:
            off = {k: v for k, v in config.items() if k != settings.switch}
            gain = 100 * (self.times(off) / self.times(config) - 1)
            self.switched_runs += 1
            pairs = [gain + j for j in (-1.0, 1.0, -0.5, 0.5)]
            result.block_gains = self.first if self.switched_runs == 1 else pairs
            result.switch, result.reference_ms = settings.switch, [self.times(off)] * 5
        return result


def test_a_refused_fix_read_slower_by_its_screen_alone_is_screened_again_once_its_row_grew(
    monkeypatch, fake_registry
):
    """loader_just_behind at 02248a3: two workers' screen (one process) read -7.9%, past the
    clear margin, their decision -4.4% (no gain); by the screen alone they were "slower"
    and not screened again once the fused optimizer, kept next, grew the data row (data
    2.8 of 22.5 ms, then 6.8 of 19.5). By their decision they are not slower: screened
    again on top of fused, +12.7%, and kept."""
    workers = switchable("more-workers", [2])
    workers.row = "data"
    fake_registry.add(FakeKnob("fused", [True]))
    fake_registry.add(workers)
    steps = {(): 22.5, ("fused",): 19.5, ("more-workers",): 23.0, ("fused", "more-workers"): 17.3}
    machine = SwitchedPacedMachine(
        lambda c: 10.5 if c.get("more-workers") else 21.3,
        lambda c: 16.0 if c.get("fused") else 20.0,
        first=[-20.0, 6.0, -14.0, -4.0],  # -8% over 4 pairs: "to be confirmed"
    )
    machine.times = _by_knobs(steps)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert by["more-workers"].status == KnobStatus.KEPT, by["more-workers"].reason
    assert "screened again once the data row was grown" in by["more-workers"].reason
    assert result.best == {"fused": True, "more-workers": 2}


def _refused_fix_machine(pace_two: float, fused_ms: float) -> PacedMachine:
    """moving_bottleneck on a 2-core EPYC: one worker's 27 ms a batch beside a 26.5 ms
    compute step (28.5 ms a step), two workers ``pace_two`` ms, the fused optimizer
    ``fused_ms`` of compute. Two workers alone gain under a change's worth (+1.8%: the
    compute step sets the pace once the loader is fixed), fused alone nothing."""
    return PacedMachine(
        lambda c: pace_two if c.get("more-workers") else 27.0,
        lambda c: fused_ms if c.get("fused") else 26.5,
    )


def test_a_loader_fix_refused_for_its_own_gain_is_climbed_from_once_it_moved_the_row(
    monkeypatch, fake_registry
):
    """Two workers gain +1.8% and are refused; their own runs show the data row gone
    (data 1.5 ms, compute 14.5 of 28): the fused optimizer, refused behind the loader, is
    screened on top of them and kept there (17.5 ms against 28), the workers the rung it
    climbed from."""
    _paced_knobs(fake_registry)
    machine = _refused_fix_machine(13.5, 16.0)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    both = {"more-workers": 2, "fused": True}
    assert machine.configs.index({"fused": True}) < machine.configs.index(both)
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert "screened again on top of more-workers=2" in by["fused"].reason
    assert by["more-workers"].status == KnobStatus.KEPT, by["more-workers"].reason
    assert "kept as the rung fused=True climbed from" in by["more-workers"].reason
    assert "not confirmed" in by["more-workers"].reason  # alone, as it was refused
    assert result.best == both
    assert [r.label for r in result.ladder] == ["baseline", "+ more-workers=2", "+ fused=True"]


def test_a_slower_loader_fix_that_moved_the_row_is_climbed_from_too(monkeypatch, fake_registry):
    """Two workers read 15% slower (they crowd the cores), past the clear margin (9.9%), and
    are refused as slower, yet the data row is gone under them, with room for +100% in the
    compute row: fused on top of them gains 88%, and both are kept."""
    _paced_knobs(fake_registry)
    steps = {(): 28.5, ("fused",): 28.5, ("more-workers",): 33.5, ("fused", "more-workers"): 17.5}
    machine = _refused_fix_machine(13.5, 16.0)
    machine.times = _by_knobs(steps)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert "slower" in by["more-workers"].reason, by["more-workers"].reason
    assert by["more-workers"].status == KnobStatus.KEPT, by["more-workers"].reason
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert result.best == {"more-workers": 2, "fused": True}


def test_a_fix_climbed_from_under_a_knob_kept_since_gets_a_reference_run(
    monkeypatch, fake_registry
):
    """moving_bottleneck at 228ea93: two workers refused on the script, the fused optimizer
    kept after them, then the climb screened a hidden knob on top of fused + two workers, a
    configuration never run: its screen found no reference run and tune crashed
    (LookupError). That reference now runs once, and the climb goes on."""
    _paced_knobs(fake_registry)
    fake_registry.add(FakeKnob("extra", [True]))
    steps = {
        (): 28.5, ("fused",): 28.5, ("more-workers",): 28.0, ("fused", "more-workers"): 17.5,
        ("extra",): 25.5, ("extra", "fused"): 25.5, ("extra", "more-workers"): 25.0,
        ("extra", "fused", "more-workers"): 15.5,
    }  # fmt: skip
    machine = _refused_fix_machine(13.5, 16.0)
    machine.times = _by_knobs(steps)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["extra"].status == KnobStatus.KEPT, by["extra"].reason
    base = {"extra": True, "more-workers": 2}
    assert base in machine.configs  # its reference, run once before the screen read it
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert result.best == {"extra": True, "more-workers": 2, "fused": True}


def test_a_refused_fix_that_left_its_row_the_biggest_is_not_climbed_from(
    monkeypatch, fake_registry
):
    """Two workers that make a batch in 26 ms leave the loader the pace of the step (data
    row still the biggest): nothing is screened on top of them."""
    _paced_knobs(fake_registry)
    machine = _refused_fix_machine(26.8, 16.0)
    result = tuner(monkeypatch, machine).run()
    assert {"more-workers": 2, "fused": True} not in machine.configs
    assert result.best == {}


def test_a_knob_hidden_behind_a_refused_fix_that_gains_too_little_with_it_keeps_nothing(
    monkeypatch, fake_registry
):
    """Two workers cost 2% (the workers crowd the compute) and leave the compute row the
    biggest; fused on top of them is confirmed at +4.5%, but the two together gain +2.4%,
    under what a change must be worth: neither is kept."""
    _paced_knobs(fake_registry)
    steps = {(): 28.5, ("fused",): 28.5, ("more-workers",): 29.07, ("fused", "more-workers"): 27.82}
    machine = _refused_fix_machine(13.5, 16.0)
    machine.times = _by_knobs(steps)
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert {"more-workers": 2, "fused": True} in machine.configs  # climbed from, then refused
    assert by["more-workers"].status == KnobStatus.REJECTED
    assert by["fused"].status == KnobStatus.REJECTED
    assert "the two together are not worth a change" in by["fused"].reason, by["fused"].reason
    assert result.best == {}


def test_after_a_rung_the_ladder_goes_to_the_row_that_is_now_the_biggest(
    monkeypatch, fake_registry
):
    """moving_bottleneck in a slow phase: the compute step (30 ms) outruns one worker's 27
    ms, so the compute row is climbed first and the fused optimizer kept (16 ms). The loader
    then sets the pace: the compute row's other knobs (bf16, a neutral allocator) wait, and
    the workers are screened and kept on top of fused before them."""
    _paced_knobs(fake_registry)
    fake_registry.add(FakeKnob("bf16", [True]))
    fake_registry.add(FakeKnob("malloc", [True]))
    compute = {(): 30.0, ("fused",): 16.0}
    machine = PacedMachine(
        _pace_ms,
        lambda c: compute[tuple(k for k in ("fused",) if c.get(k))] * (1.1 if c.get("bf16") else 1),
    )
    result = tuner(monkeypatch, machine).run()
    kept_both = machine.configs.index({"fused": True, "more-workers": 2})
    on_top = [i for i, c in enumerate(machine.configs) if c.get("fused") and len(c) > 1]
    assert on_top[0] == kept_both, machine.configs  # no other knob decided on fused first
    assert machine.configs.index({"fused": True}) < kept_both
    assert result.best == {"fused": True, "more-workers": 2}
    by = {k.knob: k for k in result.knobs}
    assert by["bf16"].status == KnobStatus.REJECTED


def test_without_data_waits_the_knobs_are_screened_as_before(monkeypatch, fake_registry):
    """No step recorded its data wait (the rows are unknown): every knob is screened on the
    baseline, in the registry's order."""
    _loader_knobs(fake_registry)
    machine = Machine(lambda c: max(_loader_ms(c), _compute_ms(c)))
    tuner(monkeypatch, machine).run()
    screened = [c for c in machine.configs if c]
    assert screened[0] == {"bf16": True}


def test_a_dependent_knob_that_can_do_nothing_on_top_of_the_kept_value_is_not_tried(
    monkeypatch, fake_registry
):
    """makemore kept num_workers=0, then spent nine trials measuring persistent workers on
    top of it (no worker to keep alive) while the budget ran out before the combination."""
    from torchpace.knobs.persistent_workers import KNOB as persistent
    from torchpace.knobs.prefetch_factor import KNOB as prefetch

    for knob in (persistent, prefetch):
        assert "num_workers=0 was kept" in knob.on_top_of({"num-workers": 0})
        assert knob.on_top_of({"num-workers": 2}) is None
        assert "num_workers=0" in knob.on_top_of({"num-workers": {"a.py:1": 0, "a.py:9": 0}})
        assert knob.on_top_of({"num-workers": {"a.py:1": 0, "a.py:9": 2}}) is None

    class Persistent(FakeKnob):
        def on_top_of(self, config):
            return persistent.on_top_of({"num-workers": config["workers"]})

    fake_registry.add(FakeKnob("workers", [0]))
    fake_registry.add(Persistent("persistent", [True], depends_on=("workers",)))
    machine = Machine(lambda c: 50.0 if c else 100.0)
    result = tuner(monkeypatch, machine).run()
    assert not any(c.get("persistent") for c in machine.configs)
    outcome = {k.knob: k for k in result.knobs}["persistent"]
    assert (
        outcome.status == KnobStatus.NOT_APPLICABLE and "num_workers=0 was kept" in outcome.reason
    )
    assert result.best == {"workers": 0}


def test_not_applicable_and_opt_in_are_reported_with_reasons(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("gpu-only", [True], applicable=False))
    fake_registry.add(FakeKnob("batch-size", [64], opt_in="--allow-batch-size"))
    result = tuner(monkeypatch, Machine(lambda c: 100.0)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["gpu-only"].status == KnobStatus.NOT_APPLICABLE
    assert by["gpu-only"].reason == "gpu-only does not apply here"
    assert by["batch-size"].status == KnobStatus.NOT_TRIED
    assert "--allow-batch-size" in by["batch-size"].reason


def _batch_machine(limit: int):
    """Trials of batch sizes: out of memory from ``limit``; per-sample time falls with the
    batch (a fixed 80 ms per step plus 0.5 ms per sample); peak memory 100 MiB + 1 MiB per
    sample."""

    def run(settings, config, label, out_dir):
        bs = config.get("batch-size", 32)
        if bs >= limit:
            return TrialResult(label, dict(config), Outcome.OUT_OF_MEMORY,
                               error="DefaultCPUAllocator: can't allocate memory")  # fmt: skip
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[80.0 + 0.5 * bs] * 5,
                           losses=LOSSES, samples_per_step=bs,
                           peak_bytes=(100 + bs) * 2**20)  # fmt: skip

    return run


def _batch_context(headroom=None) -> TuneContext:
    from torchpace.facts.run import LoaderFacts

    ctx = context(allow_batch_size=True, batch_headroom=headroom)
    ctx.facts.loaders = [LoaderFacts(location="train.py:9", num_workers=0, pin_memory=False,
                                     persistent_workers=False, prefetch_factor=None,
                                     drop_last=False, dataset_len=10_000, dataset_type="D",
                                     batch_size=32, batches_seen=10)]  # fmt: skip
    return ctx


def _headroom(at_limit: int) -> BatchHeadroom:
    return BatchHeadroom(batch_size=32, largest_batch_estimate=int(0.9 * at_limit),
                         largest_batch_at_limit=at_limit, fixed_bytes=0, per_sample_bytes=2**20,
                         usable_bytes=2**31, capacity_bytes=2**31, capacity_kind="RLIMIT_DATA",
                         capacity_text="the 2.00 GiB RLIMIT_DATA", how="")  # fmt: skip


def test_batch_size_doubles_until_out_of_memory_then_backs_off(monkeypatch, fake_registry):
    """Without the doctor's estimate: doubling, then halfway back from the first size that
    ran out of memory."""
    fake_registry.add(FakeKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size"))
    t = tuner(monkeypatch, _batch_machine(limit=200), ctx=_batch_context(None))
    result = t.run()
    by = {k.knob: k for k in result.knobs}
    # 256 runs out of memory; halfway back: 192 runs (and is faster), 224 does not
    assert by["batch-size"].status == KnobStatus.KEPT and by["batch-size"].value == 192
    assert "learning rate" in by["batch-size"].reason
    assert "out-of-memory" in by["batch-size"].reason
    assert result.best == {"batch-size": 192}
    sizes = [c.get("batch-size") for c in [r.config for r in result.trials]]
    assert sizes.index(256) < sizes.index(192) < sizes.index(224)
    check = result.batch_check
    assert (check["largest_ran"], check["first_out_of_memory"]) == (192, 224)
    assert [(x["batch"], x["outcome"]) for x in check["tried"]] == [
        (64, "ok"), (128, "ok"), (256, "out-of-memory"), (192, "ok"), (224, "out-of-memory")
    ]  # fmt: skip
    assert check["verdict"].startswith("not checked")
    assert check["measured_per_sample_bytes"] == 2**20  # the peaks' slope


def test_batch_size_starts_from_the_doctors_memory_estimate(monkeypatch, fake_registry):
    """issue 35: the batch from the doctor's memory headroom. The largest planned size the
    estimate holds (189 with 10% kept free: 128) is the one tried, and no larger: no
    doubling through 64 first, no process that runs out of memory."""
    fake_registry.add(FakeKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size"))
    result = tuner(monkeypatch, _batch_machine(limit=200), ctx=_batch_context(_headroom(210))).run()
    by = {k.knob: k for k in result.knobs}
    assert by["batch-size"].status == KnobStatus.KEPT and by["batch-size"].value == 128
    assert "the doctor's memory estimate holds: 189" in by["batch-size"].reason
    sizes = {r.config.get("batch-size") for r in result.trials} - {None}
    assert sizes == {128}
    check = result.batch_check
    assert [(x["batch"], x["outcome"]) for x in check["tried"]] == [(128, "ok")]
    assert check["agrees"] is True and check["verdict"].startswith("not contradicted")


def test_an_estimate_past_the_real_limit_backs_off_and_is_checked(monkeypatch, fake_registry):
    """The estimate is checked, never trusted: 360 holds 256, which runs out of memory
    (the limit is 200); halfway back from the script's 32: 144 runs and is faster, 200 does
    not run; the estimate at the limit (400) is far over the first size that ran out."""
    fake_registry.add(FakeKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size"))
    result = tuner(monkeypatch, _batch_machine(limit=200), ctx=_batch_context(_headroom(400))).run()
    check = result.batch_check
    assert [(x["batch"], x["outcome"]) for x in check["tried"]] == [
        (256, "out-of-memory"), (144, "ok"), (200, "out-of-memory")
    ]  # fmt: skip
    assert result.best == {"batch-size": 144}
    assert check["agrees"] is False and check["error_pct"] == round(100 * (400 / 200 - 1), 1)
    assert "over the first batch that ran out of memory (200)" in check["verdict"]


@pytest.mark.parametrize(("at_limit", "tried"), [(60, {48}), (30, set())])
def test_an_estimate_under_twice_the_batch(monkeypatch, fake_registry, at_limit, tried):
    """54 (60 at the limit) holds no doubling: 48, the multiple of 8 under it, is tried;
    27 holds no larger batch than the script's 32: none is tried, and the knob says why."""
    fake_registry.add(FakeKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size"))
    ctx = _batch_context(_headroom(at_limit))
    result = tuner(monkeypatch, _batch_machine(limit=200), ctx=ctx).run()
    assert {r.config.get("batch-size") for r in result.trials} - {None} == tried
    (knob,) = result.knobs
    if not tried:
        assert knob.status == KnobStatus.REJECTED
        assert "holds no larger batch than 32 (at most 27" in knob.reason, knob.reason
        assert result.batch_check is None


def test_batch_check_without_out_of_memory_and_without_estimate():
    from torchpace.tune.batch_check import BatchTry, check

    tries = [BatchTry(64, "ok", None, 2), BatchTry(128, "ok", None, 2)]
    done = check(32, None, tries, _headroom(1000))
    assert done["agrees"] is True and done["first_out_of_memory"] is None
    assert done["verdict"].startswith("not contradicted: every batch up to 128 ran")
    short = check(32, None, tries, _headroom(100))  # said 100; 128 ran
    assert short["error_pct"] == round(100 * (100 / 128 - 1), 1) and short["agrees"] is True
    assert "22% under the largest batch that ran (128)" in short["verdict"]
    assert check(32, None, tries, None)["verdict"].startswith("not checked")


def test_halfway_back_towards_the_failed_batch():
    from torchpace.tune.batch_finder import halfway

    assert halfway(512, 1024) == 768
    assert halfway(128, 256) == 192
    assert halfway(100, 130) == 112  # a multiple of 8 above the one that ran
    assert halfway(3, 5) == 4 and halfway(4, 5) is None


def test_budget_stops_and_keeps_what_was_measured(monkeypatch, fake_registry):
    for name in ("a", "b", "c", "d"):
        fake_registry.add(FakeKnob(name, [True]))
    machine = Machine(lambda c: 50.0 if c.get("a") else 100.0)
    # 4 baseline runs, a b c d screened, a (the best screen) confirmed by one more pair:
    # 10 trials; and the final check's two pairs, held back from the search
    result = tuner(monkeypatch, machine, budget=Budget(trials=14)).run()
    assert result.stopped == "budget"
    assert len(machine.configs) == 14
    by = {k.knob: k for k in result.knobs}
    assert by["a"].status == KnobStatus.KEPT
    # b, c, d ran and the limit stopped the tune before they were decided: measured,
    # neither kept nor refused
    for name in ("b", "c", "d"):
        assert by[name].status == KnobStatus.UNDECIDED, by[name]
        assert by[name].reason.startswith("undecided: --budget 14 trials stopped the tune")
    assert result.best == {"a": True}
    assert sorted(map(len, machine.configs[10:])) == [0, 0, 1, 1]  # the final check's pairs
    assert result.final_speedup == pytest.approx(2.0, rel=0.05)


def test_a_knob_never_screened_is_not_tried(monkeypatch, fake_registry):
    for name in ("a", "b", "c"):
        fake_registry.add(FakeKnob(name, [True]))
    # a gains 4%: within the clear margin (6%), it waits for every screen before its pairs
    machine = Machine(lambda c: 96.0 if c.get("a") else 100.0)
    # 4 baseline runs, a and b screened: c was never run
    result = tuner(monkeypatch, machine, budget=Budget(trials=6)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["c"].status == KnobStatus.NOT_TRIED and "budget" in by["c"].reason
    assert by["a"].status == KnobStatus.UNDECIDED and by["b"].status == KnobStatus.UNDECIDED


def test_a_knob_clear_at_its_screen_is_decided_before_the_next_is_screened(
    monkeypatch, fake_registry
):
    """The H100 lease: 12-s trials, a 240 s budget, loader workers screened at +135% and
    device transforms at +189% beside a 35% margin, and the budget ran out during the screens
    with both "to be confirmed". A screen past the clear margin is decided at once."""
    for name in ("a", "b", "c"):
        fake_registry.add(FakeKnob(name, [True]))
    machine = Machine(lambda c: 50.0 if c.get("a") else 100.0)
    # 8 trials for the search, 4 more held back for the final check's pairs
    result = tuner(monkeypatch, machine, budget=Budget(trials=12)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["a"].status == KnobStatus.KEPT, by["a"].reason
    assert result.best == {"a": True}
    search = machine.configs[:8]
    screened_b = next(i for i, c in enumerate(search) if c.get("b"))
    last_a = max(i for i, c in enumerate(search) if c == {"a": True})
    assert last_a < screened_b  # a's pairs ran before b's screen
    assert by["c"].status == KnobStatus.NOT_TRIED


def test_the_knob_with_the_best_screen_is_decided_first(monkeypatch, fake_registry):
    """gpt.py under --time-budget 300: host-malloc (no effect) took 12 pairs before fused
    AdamW was screened. Every knob is screened first; the pairs go to the best screen."""
    fake_registry.add(FakeKnob("neutral", [True]))  # first in the registry, no effect
    fake_registry.add(FakeKnob("fast", [True]))  # 20% faster
    machine = Machine(lambda c: 80.0 if c.get("fast") else 100.0, jitter_pct=3.0)
    result = tuner(monkeypatch, machine).run()
    decided = [i for i, c in enumerate(machine.configs) if c == {"fast": True}]
    neutral = [i for i, c in enumerate(machine.configs) if c.get("neutral")]
    # neutral's screen, fast's screen, then fast's pairs before neutral's second run
    assert neutral[0] < decided[0] < decided[1] < neutral[1], (neutral, decided)
    # neutral is then decided on top of the kept fast knob: the ladder's next rung
    assert all(machine.configs[i].get("fast") for i in neutral[1:])
    by = {k.knob: k for k in result.knobs}
    assert by["fast"].status == KnobStatus.KEPT


def test_knobs_the_budget_never_reached_still_say_when_they_could_not_apply(
    monkeypatch, fake_registry
):
    """The bundled example under --time-budget 240 listed DDP's knobs as "not tried:
    --time-budget" on a script without DDP: a reader takes it for a test the budget cut."""
    for name in ("a", "b"):
        fake_registry.add(FakeKnob(name, [True]))
    fake_registry.add(FakeKnob("ddp", [True], applicable=False))
    fake_registry.add(FakeKnob("batch", [64], opt_in="--allow-batch-size"))
    fake_registry.add(FakeKnob("later", [True]))
    machine = Machine(lambda c: 50.0 if c.get("a") else 100.0)
    result = tuner(monkeypatch, machine, budget=Budget(trials=6)).run()
    assert result.stopped == "budget"
    by = {k.knob: k for k in result.knobs}
    assert by["ddp"].status == KnobStatus.NOT_APPLICABLE
    assert by["ddp"].reason == "ddp does not apply here"
    assert by["batch"].status == KnobStatus.NOT_TRIED and "--allow-batch-size" in by["batch"].reason
    assert by["later"].status == KnobStatus.NOT_TRIED and "budget" in by["later"].reason


def test_interrupt_keeps_the_best_so_far(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("a", [True]))
    fake_registry.add(FakeKnob("b", [True]))

    runs_of_b = []

    def run(settings, config, label, out_dir):
        if config.get("b"):
            runs_of_b.append(label)
            if len(runs_of_b) > 1:  # Ctrl-C during b's pairs, after a was decided
                return TrialResult(label, dict(config), Outcome.INTERRUPTED)
        ms = 50.0 if config.get("a") else 100.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    assert result.stopped == "interrupted"
    assert result.best == {"a": True}


def test_never_returns_a_configuration_slower_than_the_baseline(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("flaky", [True]))

    def run(settings, config, label, out_dir):
        # fast while tried alone, slow in the final check against the baseline
        ms = 100.0 if not config else (150.0 if label.startswith("final") else 50.0)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    assert result.final_speedup < 1
    assert result.best == {}


def test_the_doctors_findings_go_first(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("other", [True]))
    fake_registry.add(FakeKnob("workers", [2]))  # answers TP101
    machine = Machine(lambda c: 100.0)
    tuner(monkeypatch, machine, ctx=context(finding_codes=frozenset({"TP101"}))).run()
    tried = [c for c in machine.configs if c]
    assert tried[0] == {"workers": 2}


def test_losses_are_compared_on_the_same_steps_whatever_the_warm_up(monkeypatch, fake_registry):
    """Trials with loader workers warm up longer: their first measured step is a later step
    of training, with another loss. The check must compare the baseline's steps."""
    fake_registry.add(FakeKnob("workers", [2]))

    def run(settings, config, label, out_dir):
        start = 4 if config else 0  # the drained warm-up of a workers trial
        losses = {i: 2.0 + i for i in range(start + 5)}  # a loss that moves every step
        ms = 50.0 if config else 100.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=losses,
                           measured_from=start)  # fmt: skip

    result = tuner(monkeypatch, run).run()
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason
    assert result.best == {"workers": 2}


def test_a_machine_that_drifts_is_compared_with_the_nearest_runs(monkeypatch, fake_registry):
    # Measured on a shared VM: the same script at 103, 98, then 80 ms a minute later. Here
    # the machine turns 20% faster as soon as the first knob is tried. A knob worth nothing
    # must not look 20% faster for running after the change, and a knob worth 10% must
    # survive it (each of its runs is paired with a baseline run next to it in time).
    fake_registry.add(FakeKnob("neutral", [True]))
    fake_registry.add(FakeKnob("real", [True]))
    drifted = []

    def run(settings, config, label, out_dir):
        if config:
            drifted.append(True)
        ms = (90.0 if config.get("real") else 100.0) * (0.8 if drifted else 1.0)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    by = {k.knob: k for k in result.knobs}
    assert by["neutral"].status == KnobStatus.REJECTED, by["neutral"].reason
    assert by["real"].status == KnobStatus.KEPT, by["real"].reason
    assert result.noise.pct == 0.0  # the drift is not counted as run-to-run noise
    assert result.best == {"real": True}
    assert result.final_speedup == pytest.approx(100 / 90, rel=0.01)


def test_compilation_time_is_reported_with_the_steps_that_repay_it(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("compiled", [True]))
    fake_registry.add(FakeKnob("slow-compile", [True]))

    def run(settings, config, label, out_dir):
        ms = {"compiled": 80.0, "slow-compile": 120.0}.get(next(iter(config), ""), 100.0)
        # warm-up: 3 steps at the steady speed, the first one 20 s longer when compiling
        warmup = [ms] * 3
        if config:
            warmup[0] += 20_000.0
        # every timed step it was asked for: the script runs on past them (a script that ends
        # by itself first is a job of that length, which 20 s would not be repaid within)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * settings.steps,
                           losses=LOSSES, warmup_ms=warmup)  # fmt: skip

    result = tuner(monkeypatch, run).run()
    by = {k.knob: k for k in result.knobs}
    kept, slow = by["compiled"], by["slow-compile"]
    assert kept.status == KnobStatus.KEPT
    assert kept.one_time_s == pytest.approx(20.0, abs=0.1)
    # +25% a step (100 -> 80 ms) in two clear pairs, of which the 6% clear margin leaves
    # +19% assured: 20 s take 20 / (0.080 * 0.19) = 1,316 steps to repay (1,000 at +25%)
    assert kept.payback_steps == pytest.approx(1316, rel=0.01)
    assert kept.assured_gain_pct == pytest.approx(19.0, abs=0.1)
    assert "one-time cost 20.0 s" in kept.reason and "repaid after 1,3" in kept.reason
    assert "at +19.0% a step, the least its pairs assure" in kept.reason
    assert slow.status == KnobStatus.REJECTED and slow.payback_steps is None
    assert "one-time cost 20.0 s" in slow.reason


def test_a_knob_not_repaid_within_the_job_is_refused(monkeypatch, fake_registry):
    """makemore under --max-steps 300 kept torch.compile at +30.9% a step: 25 s of
    compilation, repaid after 9,783 steps, made the 300-step job slower end to end. The
    payback is counted at the least gain the pairs assure (under load, two pairs at +114%
    and +85% beside a 64% margin counted as repaid in 236 steps a knob whose whole runs read
    1.18x: the job ran 0.89x end to end)."""
    fake_registry.add(FakeKnob("compiled", [True]))

    def run(settings, config, label, out_dir):
        ms = 80.0 if config else 100.0
        warmup = [ms] * 3
        if config:
            warmup[0] += 20_000.0  # repaid after 1,000 steps of 20 ms saved
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES,
                           warmup_ms=warmup)  # fmt: skip

    short = tuner(monkeypatch, run, job_steps=1300).run()
    knob = short.knobs[0]
    assert knob.status == KnobStatus.REJECTED and short.best == {}
    assert knob.reason.startswith("not repaid within the job: faster by +25.0% a step, but its "
                                  "one-time cost of 20.0 s is repaid after 1,316 steps at "
                                  "+19.0% a step, the least its pairs assure and the job runs "
                                  "1,300 (--job-steps)"), knob.reason  # fmt: skip
    long = tuner(monkeypatch, run, job_steps=1316).run()
    assert long.knobs[0].status == KnobStatus.KEPT and long.best == {"compiled": True}


class SpikyMachine(Machine):
    """A Machine on which some trials (by their index in the tune) run `factor` times slower:
    another process took the machine during them."""

    def __init__(self, times, spikes: dict[int, float], **kw):
        super().__init__(times, **kw)
        self.spikes = spikes

    def __call__(self, settings, config, label, out_dir):
        index = len(self.configs)
        result = super().__call__(settings, config, label, out_dir)
        factor = self.spikes.get(index)
        if factor and result.step_ms:
            result.step_ms = [ms * factor for ms in result.step_ms]
        return result


def test_a_disturbed_reference_run_is_left_out_and_its_pair_run_again(monkeypatch, fake_registry):
    # Seen on a shared VM: one baseline run at 478 ms between runs of 44-52 ms made the knob
    # paired with it look 140% faster and the next one, screened against it, 1,000% faster.
    fake_registry.add(FakeKnob("modest", [True]))  # really 10% faster
    fake_registry.add(FakeKnob("next", [True]))  # really worth nothing
    times = {(): 100.0, (("modest", True),): 100 / 1.10}
    # trials: 0 cold, 1-3 noise, 4 screen modest (+10%, past the 6% margin, not by far: it
    # waits), 5 screen next, 6 and 7 modest's pair 2 (candidate, then reference: the order
    # drawn), 7 disturbed x10, then the pair again
    machine = SpikyMachine(lambda c: times.get(tuple(sorted(c.items())), 100.0), {7: 10.0})
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["modest"].status == KnobStatus.KEPT
    assert 5 < by["modest"].gain_pct < 16, by["modest"].reason
    assert by["next"].status == KnobStatus.REJECTED, by["next"].reason
    assert machine.configs[7] == {} and "disturbed" in result.verdicts[7]
    assert result.verdicts[6] == "its pair was disturbed: run again"
    assert {machine.configs[8].get("modest"), machine.configs[9].get("modest")} == {True, None}


def test_a_disturbed_candidate_run_is_run_again(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("modest", [True]))  # really 10% faster
    times = {(): 100.0, (("modest", True),): 100 / 1.10}
    # trials: 0 cold, 1-3 noise, 4 screen, 5 reference, 6 the candidate's pair 2: disturbed
    machine = SpikyMachine(lambda c: times.get(tuple(sorted(c.items())), 100.0), {6: 4.0})
    result = tuner(monkeypatch, machine).run()
    assert "disturbed" in result.verdicts[6]
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason
    assert 5 < result.knobs[0].gain_pct < 16


def test_a_disturbed_noise_run_is_replaced(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("modest", [True]))
    times = {(): 100.0, (("modest", True),): 100 / 1.10}
    machine = SpikyMachine(lambda c: times.get(tuple(sorted(c.items())), 100.0), {2: 3.0})
    result = tuner(monkeypatch, machine).run()
    assert "disturbed" in result.verdicts[2]
    assert machine.configs[4] == {}, "a fourth back-to-back baseline replaces it"
    assert result.noise.pct < 5
    assert result.knobs[0].status == KnobStatus.KEPT


def test_a_knob_that_is_really_much_slower_is_not_taken_for_a_disturbance(
    monkeypatch, fake_registry
):
    # bf16 autocast on a CPU without bf16 instructions: 40x slower, and that is the answer
    fake_registry.add(FakeKnob("bf16", [True]))
    machine = Machine(lambda c: 4000.0 if c else 100.0)
    result = tuner(monkeypatch, machine).run()
    assert result.knobs[0].status == KnobStatus.REJECTED
    assert "slower" in result.knobs[0].reason
    assert not any("disturbed" in v for v in result.verdicts.values())


def test_a_machine_that_stays_disturbed_is_measured_as_it_is(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("modest", [True]))
    times = {(): 100.0, (("modest", True),): 100 / 1.10}
    spikes = {i: 10.0 for i in range(5, 40) if i % 2 == 1}  # every later reference
    machine = SpikyMachine(lambda c: times.get(tuple(sorted(c.items())), 100.0), spikes)
    result = tuner(monkeypatch, machine).run()
    disturbed = sum(v.startswith("disturbed") for v in result.verdicts.values())
    # per decision (the knob's and the final check's) at most MAX_RERUNS pairs run again
    assert 1 <= disturbed <= MAX_RERUNS * 2
    # then it is measured as it is: each decision ends within its pairs and re-runs
    most = 4 + 1 + 2 * 2 * (noise.MAX_PAIRS + MAX_RERUNS)
    assert len(machine.configs) <= most


def test_a_cpu_allocation_failure_is_an_out_of_memory_trial_with_its_peak():
    from torchpace.facts.run import StepPhase, StepRecord
    from torchpace.tune.trial import from_facts

    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizer_steps_per_step=1.0,
        optimizers=["SGD"], warmup=1, steps_requested=4, status=Status.SCRIPT_RAISED,
        error="RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
        "can't allocate memory: you tried to allocate 7340032 bytes.",
        rss_peak_bytes=900 * 2**20,
    )  # fmt: skip
    facts.steps = [StepRecord(index=0, wall_ms=10.0, data_wait_ms=0.0, in_window=False,
                              phase=StepPhase.WARMUP, rss_bytes=700 * 2**20)]  # fmt: skip
    trial = from_facts(facts, "batch_size=512", {"batch-size": 512})
    assert trial.outcome == Outcome.OUT_OF_MEMORY
    # the process's peak resident memory (VmHWM), not the resident memory at a step's end
    assert (trial.peak_bytes, trial.peak_kind) == (900 * 2**20, "rss")


class NoisyMachine:
    """A shared 2-core VM as measured for issue 22: each run's level moves 3.5% (sd) from
    the next, the machine drifts (an AR(1) level, 2.5% a trial), each step jitters 8%, and
    one run in 15 shares the cores with a neighbour for part of it (3-13x slower steps,
    another core busy). Pairs of runs differ by about 5.6% (sd): a knob worth 7.5% is
    faster in 9 pairs out of 10, as fused AdamW was by hand."""

    def __init__(self, effect_pct: float, seed: int, p_disturbed: float = 1 / 15):
        self.rng = random.Random(seed)
        self.effect = effect_pct
        self.level = 0.0
        self.p_disturbed = p_disturbed
        self.configs: list[dict] = []
        self.planted: list[int] = []  # the indices of the disturbed runs

    def __call__(self, settings, config, label, out_dir):
        rng = self.rng
        self.configs.append(dict(config))
        self.level = 0.8 * self.level + rng.gauss(0, 0.025)
        base = 14.0 / (1 + self.effect / 100) if config else 14.0
        run = base * math.exp(self.level + rng.gauss(0, 0.035))
        steps = [run * math.exp(rng.gauss(0, 0.08)) for _ in range(settings.steps)]
        others = abs(rng.gauss(0.2, 0.1))
        if rng.random() < self.p_disturbed:
            self.planted.append(len(self.configs) - 1)
            share, factor = rng.uniform(0.3, 1.0), rng.uniform(3, 13)
            steps = [s * factor if rng.random() < share else s for s in steps]
            others += 1.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=steps, losses=LOSSES,
                           warmup_ms=[run] * 3, others_cores=round(others, 2))  # fmt: skip


def _noisy_tune(monkeypatch, fake_registry, effect_pct, seed):
    fake_registry.knobs.clear()
    fake_registry.add(FakeKnob("fused", [True]))
    machine = NoisyMachine(effect_pct, seed)
    return tuner(monkeypatch, machine, calibrate=True).run(), machine


def test_a_5_percent_gain_is_found_and_nothing_is_not_on_this_machines_noise(
    monkeypatch, fake_registry
):
    """Seeded simulations, not timing: the statistics' power and false positives. Before
    the signed-rank test (Student's t over at most 5 pairs, a first pair under +3% refused,
    the disturbed runs' steps left in) the 5% gain was found in a minority of tunes."""
    found = [
        _noisy_tune(monkeypatch, fake_registry, 5.0, seed)[0].best == {"fused": True}
        for seed in range(20)
    ]
    invented = [
        _noisy_tune(monkeypatch, fake_registry, 0.0, seed)[0].best == {"fused": True}
        for seed in range(20)
    ]
    assert sum(found) >= 14, f"a real 5% gain found in {sum(found)} of 20 tunes"
    assert sum(invented) <= 2, f"a knob worth nothing kept in {sum(invented)} of 20 tunes"


def test_planted_disturbed_runs_are_run_again_not_used(monkeypatch, fake_registry):
    for seed in range(6):
        result, machine = _noisy_tune(monkeypatch, fake_registry, 5.0, seed)
        used = {
            i for i, v in result.verdicts.items() if not v.startswith(("disturbed", "its pair"))
        }
        for index in machine.planted:
            if index == 0:
                continue  # the cold first run is timed against nothing anyway
            assert index not in used or "disturbed" in result.verdicts.get(index, ""), (
                seed, index, result.verdicts.get(index),
            )  # fmt: skip


def _steps_machine(planted: dict[int, dict]):
    """Trials at 100 ms/step (the knob: 80), steady; the trials in `planted` get its fields
    (a scattered run's steps, other processes' CPU)."""
    configs = []

    def run(settings, config, label, out_dir):
        index = len(configs)
        configs.append(dict(config))
        ms = 80.0 if config else 100.0
        fields = dict(step_ms=[ms * (1 + 0.01 * (i % 3)) for i in range(12)], others_cores=0.1)
        fields.update(planted.get(index, {}))
        return TrialResult(label, dict(config), Outcome.OK, losses=LOSSES, **fields)

    return run, configs


def test_a_run_whose_own_steps_scatter_is_disturbed_and_run_again(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("a", [True]))
    # trial 5, a reference or candidate of the first pair: its time per step is fine (100
    # ms, trimmed mean), its steps scatter from 20 to 180 ms (a neighbour took the cores now
    # and then)
    scattered = [20.0, 30.0, 60.0, 70.0, 100.0, 100.0, 100.0, 100.0, 130.0, 140.0, 170.0, 180.0]
    run, configs = _steps_machine({5: {"step_ms": scattered}})
    result = tuner(monkeypatch, run).run()
    assert result.verdicts[5].startswith("disturbed: its steps spread"), result.verdicts[5]
    assert len(configs) > 7  # its pair ran again
    assert result.best == {"a": True}


def test_a_run_beside_a_busy_neighbour_is_disturbed_and_run_again(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("a", [True]))
    # trial 2, a back-to-back baseline: 1.6 cores of other processes during it, and slower
    run, _ = _steps_machine({2: {"others_cores": 1.6, "step_ms": [130.0] * 12}})
    result = tuner(monkeypatch, run).run()
    assert "disturbed" in result.verdicts[2], result.verdicts[2]
    assert "other processes used 1.6 cores during it" in result.verdicts[2]
    assert result.noise.pct < 5  # replaced, not measured as noise
    # the same load without a slower run: nothing to re-run
    run, _configs = _steps_machine({2: {"others_cores": 1.6}})
    result = tuner(monkeypatch, run).run()
    assert not any("disturbed" in v for v in result.verdicts.values())


def test_a_script_shorter_than_the_trial_is_measured_with_the_steps_it_has():
    """Seen on the bundled example (one epoch: 16 steps): a workers trial's drained warm-up
    (7 steps) and 10 timed steps needed 17; the trial was "crashed" and the knob lost."""
    from torchpace.facts.run import StepPhase, StepRecord
    from torchpace.tune.trial import from_facts

    def ended(measured: int, error: str) -> RunFacts:
        facts = RunFacts(
            command=["python", "train.py"], step_source="optimizer", optimizers=["SGD"],
            optimizer_steps_per_step=1.0, warmup=7, steps_requested=10,
            status=Status.SCRIPT_EXITED, error=error,
        )  # fmt: skip
        phases = [StepPhase.WARMUP] * 7 + [StepPhase.MEASURED] * measured
        facts.steps = [StepRecord(index=i, wall_ms=10.0, data_wait_ms=0.0, in_window=False,
                                  phase=p) for i, p in enumerate(phases)]  # fmt: skip
        return facts

    said = "the script ended after 16 steps, before the 7 warm-up + 10 timed steps; ..."
    short = from_facts(ended(9, said), "num_workers=2", {"num-workers": 2})
    assert short.outcome == Outcome.OK and len(short.step_ms) == 9
    assert from_facts(ended(2, said), "w", {}).outcome == Outcome.CRASHED  # too few to compare
    killed = "the script's process was killed by SIGSEGV after 12 steps (out of memory? ...)"
    assert from_facts(ended(9, killed), "w", {}).outcome != Outcome.OK


def test_failed_baseline_repeats_get_a_line_and_one_survivor_gives_no_noise_figure(
    monkeypatch, fake_registry
):
    fake_registry.add(FakeKnob("a", [True]))
    calls = itertools.count()

    def run(settings, config, label, out_dir):
        index = next(calls)
        if index in (1, 2):  # two of the three back-to-back baseline repeats fail
            error = "the script's process was killed by SIGSEGV (signal 11)"
            return TrialResult(label, dict(config), Outcome.KILLED, error=error)
        ms = 80.0 if config else 100.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    assert result.noise.pct is None  # one surviving repeat: no noise figure, not 0.0%
    for index in (1, 2):
        assert result.verdicts[index].startswith("baseline repeat failed: killed"), result.verdicts
    from rich.console import Console

    from torchpace.tune.report import render, to_dict

    console = Console(record=True, width=200)
    render(result, console)
    assert "noise: not measured (1 back-to-back baseline run succeeded" in console.export_text()
    assert to_dict(result, ["python", "t.py"], {}, TrialSettings("t.py", []))["noise_pct"] is None


@pytest.mark.parametrize(
    ("returncode", "outcome", "words"),
    [
        (-11, Outcome.KILLED, "killed by SIGSEGV (signal 11: a crash in native code)"),
        (-9, Outcome.KILLED, "killed by SIGKILL (signal 9: maybe the OOM killer; check dmesg)"),
    ],
)
def test_a_trial_killed_by_a_signal_is_named_not_called_out_of_memory(returncode, outcome, words):
    from torchpace.capture.runner import _why_nothing
    from torchpace.tune.trial import from_facts

    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizer_steps_per_step=1.0,
        optimizers=["SGD"], warmup=1, steps_requested=4, status=Status.SCRIPT_EXITED,
        error=_why_nothing(returncode, 3),
    )  # fmt: skip
    trial = from_facts(facts, "baseline", {})
    assert trial.outcome == outcome
    assert words in trial.error and "out of memory?" not in trial.error


def test_a_knob_whose_setting_did_not_hold_could_not_apply(monkeypatch, fake_registry):
    """The script undid the knob (it was not in force at the timed steps): no judgement,
    whatever the trial measured; never "rejected"."""
    fake_registry.add(FakeKnob("threads", [2]))
    machine = Machine(lambda c: 100.0)
    undone = "the script sets torch.set_num_threads(32) at train.py:3"

    def trial(settings, config, label, out_dir):
        result = machine(settings, config, label, out_dir)
        if "threads" in config:
            result.not_held = {"threads": undone}
        return result

    result = tuner(monkeypatch, trial).run()
    (outcome,) = result.knobs
    assert outcome.status == KnobStatus.COULD_NOT_APPLY == "could-not-apply"
    assert outcome.reason == f"could not apply: threads=2: {undone}"
    assert any(v == f"could not apply: {undone}" for v in result.verdicts.values())
    assert result.best == {}


def test_steps_scatter_is_judged_against_two_earlier_runs_not_one():
    # one earlier run whose steps were tight (2%) is no measure of this configuration's
    # usual scatter: 25% over a few steps is ordinary on a shared machine
    assert noise.disturbance(25.0, [2.0], None, []) is None
    why = noise.disturbance(25.0, [2.0, 3.0], None, [])
    assert why is not None and why.startswith("its steps spread 25%")
    assert noise.disturbance(25.0, [9.0, 10.0], None, []) is None  # within 3x their usual


def test_a_candidate_whose_first_run_was_tight_is_not_disturbed_by_ordinary_scatter(
    monkeypatch, fake_registry
):
    # every run scatters its steps about 20% (a shared VM over a few steps), except the
    # candidate's first, which happened to be tight: its next run at the usual 20% is
    # ordinary, judged against the tune's runs, not that one lucky run
    fake_registry.add(FakeKnob("a", [True]))
    ordinary = [0.8, 0.9, 1.0, 1.0, 1.1, 1.2]  # IQR/median about 20%
    seen: list[dict] = []

    def run(settings, config, label, out_dir):
        seen.append(dict(config))
        ms = 80.0 if config else 100.0
        first_of_candidate = config and seen.count(dict(config)) == 1
        shape = [1.0, 1.01, 1.02] * 4 if first_of_candidate else ordinary * 2
        return TrialResult(label, dict(config), Outcome.OK, losses=LOSSES,
                           step_ms=[ms * f for f in shape], others_cores=0.1)  # fmt: skip

    result = tuner(monkeypatch, run).run()
    candidate_runs = [i for i, c in enumerate(seen) if c]
    assert len(candidate_runs) >= 2
    for index in candidate_runs[1:]:
        assert "disturbed" not in result.verdicts.get(index, ""), result.verdicts[index]
    assert result.best == {"a": True}


def test_the_clear_margin_follows_the_pairs_spread_once_measured():
    """makemore: a 41.9% back-to-back range beside pairs that spread by 6.2% (sd)."""
    medians = (9.0, 12.8, 9.5)
    wide = noise.Noise(41.86, medians)
    assert wide.clear_pct == pytest.approx(41.86)
    measured = noise.Noise(41.86, medians, pair_sd_pct=6.22)
    assert measured.clear_pct == pytest.approx(noise.CLEAR_SDS * 6.22)
    assert measured.clear_by_runs_pct == pytest.approx(41.86)
    # never under twice what a change must be worth
    assert noise.Noise(41.86, medians, pair_sd_pct=0.5).clear_pct == 2 * noise.MIN_GAIN_PCT
    # wider than the runs' margin when the back-to-back runs fell in one phase: gpt.py's
    # 0.7% range beside pairs that spread by 11.8%; bf16's +7.9, +6.9% were a clear win
    # against the 6% floor, and are no win at all against the pairs' spread
    narrow = noise.Noise(0.73, (24.8, 25.0, 25.0))
    gpt = noise.Noise(0.73, (24.8, 25.0, 25.0), pair_sd_pct=11.78)
    assert gpt.clear_pct == pytest.approx(noise.CLEAR_SDS * 11.78)
    assert noise.judge([7.9, 6.9], narrow).decision == noise.Decision.FASTER
    assert noise.judge([7.9, 6.9], gpt).decision == noise.Decision.UNDECIDED
    # +38, +22, +18% in three pairs: not clear against the runs' range, clear against the pairs'
    gains = [38.1, 21.8, 19.5]
    assert noise.judge(gains, wide).decision == noise.Decision.UNDECIDED
    assert noise.judge(gains, measured).decision == noise.Decision.FASTER


def test_a_second_knob_is_decided_on_the_margin_the_first_ones_pairs_measured(
    monkeypatch, fake_registry
):
    """The back-to-back baselines spread by 40% (one in a slow phase); the pairs by ~1%.
    The first knob needs the interval (six pairs); the second, 12% faster, is a clear win
    in two pairs once the first's pairs have measured the spread."""
    fake_registry.add(FakeKnob("big", [True]))
    fake_registry.add(FakeKnob("small", [True]))

    def times(config):
        return 100.0 / (1.35 if config.get("big") else 1.0) / (1.12 if config.get("small") else 1.0)

    # the first (cold) run, then three back-to-back baselines: +20%, -20%, 0
    machine = Machine(times, jitter=[0.0, 20.0, -20.0, 0.0] + [1.0, -1.0] * 200)
    result = tuner(monkeypatch, machine).run()
    assert result.noise.pct == pytest.approx(40.0, abs=1.0)
    by = {k.knob: k for k in result.knobs}
    assert by["big"].status == KnobStatus.KEPT and "95% lower bound" in by["big"].reason
    assert by["small"].status == KnobStatus.KEPT
    margin = float(by["small"].reason.split("each beyond ")[1].split("%")[0])
    assert margin < 20.0, by["small"].reason  # the pairs' margin, not the runs' 40%
    small_alone = [c for c in machine.configs if c == {"small": True}]
    assert len(small_alone) <= 3  # its screen and at most two pairs (was: six at least)
    assert "3 sd of the pairs" in tune_report.statistics_text(result)


class TwoKnobNoisyMachine(NoisyMachine):
    """NoisyMachine with a 40% knob (decided first: its pairs measure the spread) beside
    the knob under test."""

    def __call__(self, settings, config, label, out_dir):
        big = config.get("big")
        result = super().__call__(settings, {k: v for k, v in config.items() if k != "big"},
                                  label, out_dir)  # fmt: skip
        result.config = dict(config)
        self.configs[-1] = dict(config)
        if big:
            result.step_ms = [ms / 1.4 for ms in result.step_ms]
            result.warmup_ms = [ms / 1.4 for ms in result.warmup_ms]
        return result


def test_the_pairs_margin_invents_no_win_on_this_machines_noise(monkeypatch, fake_registry):
    """Seeded simulations: a knob worth nothing, decided after a 40% one whose pairs set the
    clear margin, is kept no more often than before; a 10% one is found."""

    def tune(effect, seed):
        fake_registry.knobs.clear()
        fake_registry.add(FakeKnob("big", [True]))
        fake_registry.add(FakeKnob("fused", [True]))
        machine = TwoKnobNoisyMachine(effect, seed)
        result = tuner(monkeypatch, machine, calibrate=True).run()
        return {k.knob: k.status for k in result.knobs}["fused"] == KnobStatus.KEPT

    invented = [tune(0.0, seed) for seed in range(20)]
    found = [tune(10.0, seed) for seed in range(20)]
    assert sum(invented) <= 2, f"a knob worth nothing kept in {sum(invented)} of 20 tunes"
    assert sum(found) >= 16, f"a real 10% gain found in {sum(found)} of 20 tunes"


def test_a_knob_whose_screen_cannot_repay_its_cost_within_the_job_gets_no_pairs(
    monkeypatch, fake_registry
):
    """makemore (300 steps): torch.compile's 3.4 s repaid after 1,711 steps took a dozen
    trials to confirm and refuse; its screen already showed it."""
    fake_registry.add(FakeKnob("compiled", [True]))
    fake_registry.add(FakeKnob("fused", [True]))

    def run(settings, config, label, out_dir):
        ms = (80.0 if config.get("compiled") else 100.0) / (1.2 if config.get("fused") else 1.0)
        warmup = [ms] * 3
        if config.get("compiled"):
            warmup[0] += 20_000.0  # at +25% (20 ms a step saved): 1,000 steps
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES,
                           warmup_ms=warmup)  # fmt: skip

    result = tuner(monkeypatch, run, job_steps=300).run()
    by = {k.knob: k for k in result.knobs}
    assert by["compiled"].status == KnobStatus.REJECTED
    assert by["compiled"].reason.startswith(
        "not repaid within the job: its one-time cost of 20.0 s would be repaid after"
    ), by["compiled"].reason
    assert "and the job runs 300 (--job-steps)" in by["compiled"].reason
    assert by["compiled"].one_time_s == pytest.approx(20.0, abs=0.1)
    assert by["fused"].status == KnobStatus.KEPT and result.best == {"fused": True}
    trials = [t.config for t in result.trials]
    assert sum(1 for c in trials if c.get("compiled")) == 1  # its screen only


def test_a_refused_value_leaves_its_runners_up_a_decision_of_their_own(monkeypatch, fake_registry):
    """makemore on a noisy VM: num_workers=2 (no effect) screened -23.9% then +17.7% on its
    second look, was chosen and took 12 pairs to refuse; num_workers=0 (1.33x by hand)
    screened +5.4% in a slow phase and was never paired. A second look's first pair now
    counts in the value's screen, and a value refused by its pairs leaves the others that
    screened faster a decision of their own."""
    fake_registry.add(FakeKnob("workers", [0, 1, 2]))
    fake_registry.add(FakeKnob("fused", [True]))
    steady = {0: 70.0, 1: 110.0, 2: 100.0}
    # each value's runs in order, then its steady time
    scripted = {0: [96.0], 2: [130.0, 45.0]}
    flip = itertools.cycle([1.01, 0.99])

    def run(settings, config, label, out_dir):
        workers = config.get("workers")
        if workers is None:
            ms = 100.0
        else:
            queue = scripted.get(workers, [])
            ms = queue.pop(0) if queue else steady[workers]
        if config.get("fused"):
            ms /= 1.2
        ms *= next(flip)
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    workers = {k.knob: k for k in result.knobs}["workers"]
    assert workers.status == KnobStatus.KEPT and workers.value == 0, workers.reason
    assert "before it, workers=2: not confirmed" in workers.reason, workers.reason
    assert result.best == {"fused": True, "workers": 0}
    # fused (+20%) was decided before the runner-up, which climbed on top of it
    assert "on top of fused=True" in workers.reason
    order = [t.config for t in result.trials]
    first_fused_pair = next(i for i, c in enumerate(order) if c == {"fused": True} and i > 8)
    first_w0_on_fused = order.index({"fused": True, "workers": 0})
    assert first_fused_pair < first_w0_on_fused


def test_a_second_looks_first_pair_counts_in_the_values_screen(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [0, 2]))
    scripted = {0: [93.0], 2: [130.0, 80.0]}  # 0: +7.5%; 2: -23%, then +25%: a mean of +1%
    flip = itertools.cycle([1.01, 0.99])

    def run(settings, config, label, out_dir):
        workers = config.get("workers")
        queue = scripted.get(workers, []) if workers is not None else []
        ms = queue.pop(0) if queue else {None: 100.0, 0: 80.0, 2: 100.0}[workers]
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms * next(flip)] * 5,
                           losses=LOSSES)  # fmt: skip

    result = tuner(monkeypatch, run).run()
    workers = result.knobs[0]
    assert workers.status == KnobStatus.KEPT and workers.value == 0, workers.reason
    assert "before it" not in workers.reason  # decided first, not as a runner-up


def test_the_fidelity_pairs_are_the_baseline_repeats(monkeypatch, fake_registry, tmp_path):
    """The fidelity check's trials are the baseline's noise runs, not runs of their own (on
    an H100 its ten runs had taken 90 s of a 140 s --time-budget before any knob): the
    plain runs alternate with the repeats, and the trials are the same as without it."""
    fake_registry.add(FakeKnob("workers", [2]))
    plain_runs = []

    def plain(settings, where):
        plain_runs.append(where.name)
        return 101.0

    monkeypatch.setattr("torchpace.tune.fidelity.plain_run", plain)

    def ms(config):
        return 70.0 if config else 100.0

    def labels(**kw):
        machine = Machine(ms)
        t = tuner(monkeypatch, machine, **kw)
        t.run_dir = tmp_path
        return t.run(), [c for c in machine.configs]

    lines = []
    checked, configs = labels(fidelity_limit=10.0, note=lines.append)
    unchecked, configs_unchecked = labels()
    assert configs == configs_unchecked  # no trial of its own
    # two pairs within the limit: the third noise run takes no plain run beside it
    assert plain_runs == ["00-plain", "01-plain"]
    assert checked.fidelity["ok"] and len(checked.fidelity["trial_ms"]) == 2
    assert checked.fidelity["ratio"] == pytest.approx(100 / 101, abs=0.02)
    assert unchecked.fidelity is None
    assert checked.best == unchecked.best == {"workers": 2}
    assert any("fidelity: a trial times this script at" in line for line in lines), lines
    assert sum("plain script" in line for line in lines) == 2


def test_a_confirmed_distortion_stops_the_tune_before_any_knob(monkeypatch, fake_registry):
    """Anomaly mode under a heavy capture (issue 22: 10.7 ms/step in a trial, 2.1 plainly):
    more pairs than the noise runs, until the interval confirms it; then nothing is tried."""
    fake_registry.add(FakeKnob("workers", [2]))
    monkeypatch.setattr("torchpace.tune.fidelity.plain_run", lambda settings, where: 2.1)
    machine = Machine(lambda config: 10.7)
    result = tuner(monkeypatch, machine, fidelity_limit=10.0).run()
    assert result.stopped == "fidelity" and result.stopped_by == "the fidelity check"
    assert not result.fidelity["ok"] and len(result.fidelity["trial_ms"]) == 5
    assert all(c == {} for c in machine.configs) and len(machine.configs) == 1 + 5
    assert result.knobs == [] and result.best == {}


def test_a_time_budget_stops_the_fidelity_check_and_keeps_its_pairs(monkeypatch, fake_registry):
    fake_registry.add(FakeKnob("workers", [2]))
    clock = iter(range(0, 10_000, 10)).__next__  # each look at the clock: 10 s later
    monkeypatch.setattr("torchpace.tune.fidelity.plain_run", lambda settings, where: 100.0)
    result = tuner(
        monkeypatch, Machine(lambda config: 100.0), fidelity_limit=10.0,
        budget=Budget(seconds=60), clock=clock, started=0,
    ).run()  # fmt: skip
    assert result.stopped == "time-budget"
    assert result.fidelity is not None and result.fidelity["plain_ms"]


def test_a_refused_final_check_descends_the_ladder(monkeypatch, fake_registry):
    """gpt.py on the 2-core VM: fused AdamW kept in two clear pairs, bf16 kept on top of it
    in two pairs just past the margin, and the final check of both against the script found
    nothing (-1.6% over 5 pairs): tune returned the script as it was, fused AdamW with it.
    The rung under the refused top is checked next."""
    fake_registry.add(FakeKnob("a", [True]))
    fake_registry.add(FakeKnob("b", [True]))

    def run(settings, config, label, out_dir):
        if config == {"a": True, "b": True}:  # fast on top of a, no gain in the final check
            ms = 100.0 if label.startswith("final") else 60.0
        else:  # a screens ahead of b, and is decided first
            ms = {(): 100.0, ("a",): 80.0, ("b",): 90.0}[tuple(sorted(config))]
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run).run()
    by = {k.knob: k for k in result.knobs}
    assert result.best == {"a": True}
    assert result.final_speedup == pytest.approx(100 / 80, rel=0.02)
    assert [r.config for r in result.ladder] == [{}, {"a": True}]
    assert by["a"].status == KnobStatus.KEPT
    assert by["b"].status == KnobStatus.REJECTED
    assert by["b"].reason.startswith("dropped by the final check: b=True with every knob")
    assert "on the ladder it had read: on top of a=True" in by["b"].reason
    assert result.figures["speedup"] == result.final_speedup


def test_ctrl_c_after_the_fidelity_check_keeps_its_pairs(monkeypatch, fake_registry):
    """Ctrl-C between trials ends in the search's one stop path, which settles the figures
    of what ran (the fidelity's pairs are among them) and closes the knobs never reached."""
    fake_registry.add(FakeKnob("workers", [2]))
    monkeypatch.setattr("torchpace.tune.fidelity.plain_run", lambda settings, where: 100.0)

    def run(settings, config, label, out_dir):
        if config:
            raise KeyboardInterrupt
        return TrialResult(label, {}, Outcome.OK, step_ms=[100.0] * 5, losses=LOSSES)

    result = tuner(monkeypatch, run, fidelity_limit=10.0).run()
    assert (result.stopped, result.stopped_by) == ("interrupted", "Ctrl-C")
    assert result.fidelity["ok"] and len(result.fidelity["plain_ms"]) == 2
    (workers,) = result.knobs
    assert (workers.status, workers.reason) == (KnobStatus.NOT_TRIED, "not tried: Ctrl-C")


# --- switched trials: a knob switched within each process (capture/switching.py) ----------
class SwitchedMachine(Machine):
    """Processes at one of two speeds, drawn per process (gpt.py's on the shared 2-core VM:
    ~20.5 or ~25 ms/step); the knob `fused` gains `gain_pct` within any process. A switched
    trial's block pairs read that gain, with 1% jitter; `can_switch` False: the child
    could not switch it (an ordinary trial comes back, with the reason)."""

    def __init__(self, gain_pct, can_switch=True, seed=0):
        super().__init__(lambda config: 0.0)
        self.gain = gain_pct
        self.can_switch = can_switch
        self.rng = random.Random(seed)
        self.switches: list[str] = []
        self.steps: list[int] = []
        self.seeds: list[int] = []

    def __call__(self, settings, config, label, out_dir):
        self.configs.append(dict(config))
        self.switches.append(settings.switch)
        self.steps.append(settings.steps)
        self.seeds.append(settings.switch_seed)
        speed = self.rng.choice([20.5, 25.0])
        factor = 1 + self.gain / 100 if config.get("fused") else 1.0
        result = TrialResult(
            label, dict(config), Outcome.OK, step_ms=[speed / factor] * settings.steps,
            losses=dict(LOSSES), samples_per_step=32, switch=settings.switch,
        )  # fmt: skip
        if settings.switch and self.can_switch:
            result.reference_ms = [speed] * 5
            result.block_gains = [self.gain + self.rng.gauss(0, 1) for _ in range(8)]
        elif settings.switch:
            result.switch_note = "fused-optimizer is not in force: not switched"
        return result


def switchable(name, values):
    knob = FakeKnob(name, values)
    knob.switchable = True
    return knob


def test_a_5pct_knob_is_kept_where_processes_differ_by_20pct(monkeypatch, fake_registry):
    """gpt.py: fused AdamW (4-6% a step in every process) beside processes 20% apart; 16
    process pairs could not decide it. Switched within each process, it is kept, and every
    figure reads the block pairs' gain, not the processes' speeds."""
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=5.0)
    result = tuner(monkeypatch, machine).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT, knob.reason
    assert "block pairs in 2 processes, switched within each" in knob.reason
    assert knob.gain_pct == pytest.approx(5.0, abs=1.0)
    # the baseline runs ordinary trials; every trial of the knob is switched
    fused = [s for c, s in zip(machine.configs, machine.switches, strict=True) if c]
    assert fused and all(s == "fused" for s in fused)
    # each process its own order of sides: a drift within the run favours neither
    seeds = [n for n, s in zip(machine.seeds, machine.switches, strict=True) if s]
    assert len(set(seeds)) == len(seeds)
    assert result.final_switched_runs >= 2
    assert result.figures["speedup"] == pytest.approx(1.05, abs=0.01)
    assert result.ladder[-1].speedup == result.figures["speedup"]
    # the pairs' spread of processes is not polluted by the block pairs'
    assert result.pair_sd_pct is None or result.pair_sd_pct > 5


def test_a_switched_knob_worth_nothing_is_refused(monkeypatch, fake_registry):
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=0.0)
    result = tuner(monkeypatch, machine).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.REJECTED
    # its screen's own block pairs bound it under 3%: no process of a decision after it
    assert "not worth a change" in knob.reason and "under 3%" in knob.reason, knob.reason
    assert sum(1 for c in machine.configs if c.get("fused")) == 1
    assert result.best == {}


def test_a_switched_knob_whose_screen_may_be_worth_a_change_is_decided(monkeypatch, fake_registry):
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=4.0)  # its interval reaches past 3%: decided
    result = tuner(monkeypatch, machine).run()
    assert sum(1 for c in machine.configs if c.get("fused")) > 1
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason


def test_a_knob_its_trials_cannot_switch_is_decided_by_processes_in_pairs(
    monkeypatch, fake_registry
):
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=40.0, can_switch=False)
    result = tuner(monkeypatch, machine).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT, knob.reason
    assert "switched" not in knob.reason
    fused = [s for c, s in zip(machine.configs, machine.switches, strict=True) if c]
    assert fused[0] == "fused" and set(fused[1:]) == {""}  # asked once, then never again
    assert result.final_switched_runs == 0


class ArmsMachine(SwitchedMachine):
    """Switched trials of several arms: each (knob, value) gains its own share within any
    process (gains: a value of `workers`, or a (knob, value) pair -> %), every arm's block
    pairs read back from one process, as run_trial splits them."""

    def __init__(self, gains, can_switch=True):
        super().__init__(gain_pct=0.0, can_switch=can_switch)
        self.gains = gains
        self.arms: list[tuple] = []  # each trial's arms' values
        self.pairs: list[tuple] = []  # and its (knob, value) pairs

    def __call__(self, settings, config, label, out_dir):
        self.arms.append(tuple(value for _, value in settings.arms))
        self.pairs.append(tuple(settings.arms))
        result = super().__call__(settings, config, label, out_dir)
        if not (settings.switch and self.can_switch):
            return result
        pairs = settings.arms or ((settings.switch, config[settings.switch]),)
        for i, (pair, arm_config) in enumerate(zip(pairs, arm_configs(config, pairs), strict=True)):
            arm = result if i == 0 else TrialResult(
                label, arm_config, Outcome.OK, step_ms=list(result.step_ms),
                losses=dict(LOSSES), samples_per_step=32,
            )  # fmt: skip
            arm.config = arm_config
            arm.reference_ms = list(result.reference_ms)
            gain = self.gains[pair] if pair in self.gains else self.gains[pair[1]]
            arm.block_gains = [gain + self.rng.gauss(0, 1) for _ in range(8)]
            if i:
                result.other_arms.append(arm)
        return result


def multi_arm(name, values):
    knob = switchable(name, values)
    knob.multi_arm = True
    return knob


def test_a_knobs_values_are_screened_in_one_process_an_arm_each(monkeypatch, fake_registry):
    """issue 35: 2, 4 and 8 loader workers screened in three processes paid the set-up three
    times (5-6 s each on an H100). Switchable together, they share one process, an arm each
    beside the script's own setting; the best is then decided as ever, in processes of two
    arms."""
    fake_registry.add(multi_arm("workers", [1, 2, 4]))
    machine = ArmsMachine({1: 5.0, 2: 30.0, 4: 20.0})
    result = tuner(monkeypatch, machine).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT and knob.value == 2, knob.reason
    screens = [a for a in machine.arms if a]
    assert screens[0] == (1, 2, 4) and all(a == (2,) for a in screens[1:]), machine.arms
    # one result per value, each its own arm's gain; the others recorded with no time
    (first,) = [i for i, t in enumerate(result.trials) if "3 arms, one process" in t.label][:1]
    arms = [t for t in result.trials if "3 arms, one process" in t.label]
    assert [t.config["workers"] for t in arms] == [1, 2, 4]
    assert [t.arm_of for t in arms] == [None, first, first]
    assert arms[0].wall_s >= 0 and arms[1].wall_s == arms[2].wall_s == 0
    assert "+3" in result.verdicts[first + 1] or "+2" in result.verdicts[first + 1]


def test_a_rows_switchable_knobs_are_screened_in_one_process(monkeypatch, fake_registry):
    """issue 35, fixed cost once: on the H100 a row's bf16, channels_last, cudnn.benchmark
    and fused optimizer were a process each, 5-6 s of CUDA set-up before each first step.
    Every value of the row's knobs that switch within a process is an arm of one process;
    each knob is then decided on its own arms' screen, as before."""
    fake_registry.add(multi_arm("workers", [1, 2]))
    fake_registry.add(switchable("fused", [True]))
    fake_registry.add(FakeKnob("alone", [True]))  # not switchable: its own processes
    machine = ArmsMachine({("workers", 1): 2.0, ("workers", 2): 30.0, ("fused", True): 12.0,
                           ("alone", True): 0.0})  # fmt: skip
    result = tuner(monkeypatch, machine).run()
    shared = [p for p in machine.pairs if len(p) > 1]
    assert shared[0] == (("workers", 1), ("workers", 2), ("fused", True)), machine.pairs
    status = {k.knob: (k.status, k.value) for k in result.knobs}
    assert status["workers"] == (KnobStatus.KEPT, 2)
    # fused climbed a rung on top of the workers (this fake's ordinary processes, which the
    # final check runs, know no gain of it)
    fused = next(k for k in result.knobs if k.knob == "fused")
    assert "on the ladder it had read: on top of workers=2: faster" in fused.reason
    labels = [t.label for t in result.trials]
    assert sum("3 arms, one process" in label for label in labels) == 3
    # the knob that cannot switch ran its screen in a process of its own, on the same base
    assert {"alone": True} in machine.configs


class PhasedArmsMachine(ArmsMachine):
    """ArmsMachine whose first ``slow`` processes deciding ``knob`` on top of ``under`` run
    in a phase of the machine where it reads ``slow_gain`` (the shared VM's slow minutes):
    later processes read its own gain again."""

    def __init__(self, gains, knob, under, slow, slow_gain):
        super().__init__(gains)
        self.knob, self.under, self.slow, self.slow_gain = knob, under, slow, slow_gain

    def __call__(self, settings, config, label, out_dir):
        result = super().__call__(settings, config, label, out_dir)
        deciding = settings.switch == self.knob and not settings.arms and config.get(self.under)
        if deciding and self.slow:
            self.slow -= 1
            result.block_gains = [self.slow_gain + self.rng.gauss(0, 1) for _ in range(8)]
        return result


@pytest.mark.parametrize("slow", [2, 99])
def test_a_refusal_its_screen_contradicts_is_decided_once_more_later(
    monkeypatch, fake_registry, slow
):
    """The README's example on the shared VM: bf16 screened +24.1% over 5 block pairs on
    the baseline, then, on top of glibc malloc, read -2.4% over 10 block pairs in 2
    processes (by hand, that hour, 1.13-1.25x on top of it) and was refused. The screen
    assures more than the refusal allows: the knob is decided again, afresh, after the
    others of its row; kept when the machine reads its gain again (slow=2), refused for
    good, after one more decision only, when it never does (slow=99)."""
    fake_registry.add(switchable("malloc", [True]))
    fake_registry.add(switchable("bf16", [True]))
    fake_registry.add(switchable("other", [True]))
    machine = PhasedArmsMachine(
        {("malloc", True): 30.0, ("bf16", True): 20.0, ("other", True): 6.0},
        knob="bf16", under="malloc", slow=slow, slow_gain=-2.0,
    )  # fmt: skip
    result = tuner(monkeypatch, machine).run()
    by = {k.knob: k for k in result.knobs}
    assert by["malloc"].status == KnobStatus.KEPT, by["malloc"].reason
    trials = list(zip(machine.configs, machine.arms, machine.switches, strict=True))
    decided = [i for i, (c, a, s) in enumerate(trials) if s == "bf16" and c.get("malloc")]
    other = [i for i, (c, a, s) in enumerate(trials) if s == "other" and c.get("malloc")]
    bf16 = by["bf16"]
    assert "decided again later" in bf16.reason, bf16.reason
    # the second look came after the row's other decision (+6%, kept), in processes of its
    # own, on top of both
    # (this fake's ordinary processes know no gain: its final check may drop any rung, so
    # the ladder's own decisions are read)
    assert "on top of malloc=True: faster" in by["other"].reason, by["other"].reason
    assert other and decided[1] < other[0] < decided[2], (decided, other)
    assert machine.configs[decided[2]] == {"malloc": True, "other": True, "bf16": True}
    assert len(decided) == 4  # 2 refusing, then 2 fresh: the refusing pairs not pooled
    assert bf16.reason.count("decided again later") == 1
    again = "on top of malloc=True + other=True: "
    if slow == 2:
        assert f"{again}faster (+" in bf16.reason, bf16.reason
        assert bf16.gain_pct == pytest.approx(20.0, abs=2.0)
    else:
        assert bf16.status == KnobStatus.REJECTED, bf16.reason
        assert bf16.reason.startswith(f"not confirmed {again}"), bf16.reason


def test_a_knob_whose_switch_cannot_reach_loader_workers_is_switched_only_without_them(
    monkeypatch, fake_registry
):
    """host-malloc's glibc settings are each process's own: where the loader has workers
    (makemore's 4) its switch cannot reach them, and a row's shared process with it was
    spent to learn so (the child then times it as an ordinary trial). The parent knows the
    script's workers from the doctor's facts and the configuration's num-workers."""
    from knob_fakes import loader

    from torchpace.tune import compare

    malloc = switchable("malloc", [True])
    malloc.switches_beside_workers = False
    fake_registry.add(malloc)
    fake_registry.add(switchable("fused", [True]))
    ctx = context()
    ctx.facts.loaders = [loader(num_workers=4)]
    ledger = tuner(monkeypatch, Machine(lambda c: 10.0), ctx=ctx).ledger
    assert ledger.script_workers == 4
    assert compare.switch_for(ledger, {}, {"malloc": True}) == ""
    assert compare.switch_for(ledger, {}, {"fused": True}) == "fused"
    for none in (0, {"train.py:40": 0}):
        on_top = {"num-workers": none}
        assert compare.switch_for(ledger, on_top, {**on_top, "malloc": True}) == "malloc"
    on_top = {"num-workers": {"train.py:40": 0, "train.py:50": 2}}
    assert compare.switch_for(ledger, on_top, {**on_top, "malloc": True}) == ""
    ledger.script_workers = 0
    assert compare.switch_for(ledger, {}, {"malloc": True}) == "malloc"
    # an evaluation loader's workers (no batch fetched in the timed steps) run between
    # steps, never beside one: the training loader's count
    ctx.facts.loaders = [
        loader(num_workers=0, batches_timed=12),
        loader(location="train.py:60", num_workers=4, batches_timed=0),
    ]
    ledger = tuner(monkeypatch, Machine(lambda c: 10.0), ctx=ctx).ledger
    assert ledger.script_workers == 0
    assert compare.switch_for(ledger, {}, {"malloc": True}) == "malloc"


def test_a_knob_whose_arms_the_script_cannot_hold_too_is_screened_alone(monkeypatch, fake_registry):
    """The quick-start's 32 steps hold two rounds of three arms, not of four: the row's
    first knobs share a process, the one that would make it too long goes alone."""
    for name in ("a", "b", "c"):
        fake_registry.add(switchable(name, [True]))
    machine = ArmsMachine({("a", True): 20.0, ("b", True): 0.0, ("c", True): 0.0})
    tuner(monkeypatch, machine, job_steps=23).run()
    shared = [p for p in machine.pairs if len(p) > 1]
    assert shared and shared[0] == (("a", True), ("b", True)), machine.pairs
    assert {"c": True} in machine.configs  # its own screen


def test_several_arms_share_a_process_only_where_two_rounds_of_their_blocks_fit(
    monkeypatch, fake_registry
):
    """The quick-start's 32 steps: 1 and 2 loader workers beside the script's 0 settle 9
    steps a block (batches in flight drained, then filled), so three arms' blocks ended the
    script before a round was whole, and a process was spent to learn it. With the job's
    length known and the settling foreseen, the values are screened one by one at once."""
    knob = multi_arm("workers", [1, 2])
    knob.settle_estimate = lambda values, ctx: 9
    fake_registry.add(knob)
    machine = ArmsMachine({1: 30.0, 2: 20.0})
    tuner(monkeypatch, machine, job_steps=60).run()
    assert all(len(arms) < 2 for arms in machine.arms), machine.arms  # 2 rounds: 3 x 11 x 2
    machine = ArmsMachine({1: 30.0, 2: 20.0})
    tuner(monkeypatch, machine, job_steps=80).run()
    assert (1, 2) in machine.arms


def test_a_script_that_ends_before_a_whole_round_leaves_each_value_its_own_switched_screen(
    monkeypatch, fake_registry
):
    class Short(ArmsMachine):  # the script ended before an arm-0 block: no round whole
        def __call__(self, settings, config, label, out_dir):
            result = super().__call__(settings, config, label, out_dir)
            if len(settings.arms) > 1:
                for arm in (result, *result.other_arms):
                    arm.block_gains = []
            return result

    fake_registry.add(multi_arm("workers", [1, 2]))
    machine = Short({1: 30.0, 2: 20.0})
    result = tuner(monkeypatch, machine).run()
    shared = machine.arms.index((1, 2))
    assert "ended before a whole round of its 3 arms' blocks" in result.verdicts[shared]
    alone = range(shared + 1, shared + 3)  # each value screened, switched, alone
    assert [machine.configs[i] for i in alone] == [{"workers": 1}, {"workers": 2}]
    assert [machine.switches[i] for i in alone] == ["workers", "workers"]
    assert result.knobs[0].status == KnobStatus.KEPT and result.knobs[0].value == 1


def test_several_arms_that_cannot_be_switched_are_screened_one_by_one(monkeypatch, fake_registry):
    fake_registry.add(multi_arm("workers", [1, 2, 4]))
    machine = ArmsMachine({1: 5.0, 2: 30.0, 4: 20.0}, can_switch=False)
    result = tuner(monkeypatch, machine).run()
    worked = [c["workers"] for c in machine.configs if c]
    assert worked[:4] == [1, 1, 2, 4]  # the shared process, then a process for each
    assert "screened one by one" in result.verdicts[machine.configs.index({"workers": 1})]


def test_a_switched_trial_that_the_script_ends_before_its_blocks_is_run_again_as_an_ordinary_one(
    monkeypatch, fake_registry
):
    """The planted crowded job's 30 steps: num-workers' blocks settle 33 steps (8 workers'
    batches in flight) before they time any, so its switched screens "crashed" with the
    script's end and the knob was refused unmeasured. The script's simple end is a switch
    that does not fit: the screen runs again as an ordinary trial, and so does the rest."""
    fake_registry.add(switchable("workers", [0]))
    machine = Machine(lambda config: 80.0 if config else 100.0)
    switches = []

    def run(settings, config, label, out_dir):
        switches.append(settings.switch)
        if settings.switch:
            machine.configs.append(dict(config))
            error = ("the script ended after 30 steps, before the 3 warm-up + 16 timed steps; "
                     "run more steps or lower --warmup/--steps")  # fmt: skip
            return TrialResult(label, dict(config), Outcome.CRASHED, error=error)
        result = machine(settings, config, label, out_dir)
        result.step_ms = result.step_ms[:1] * settings.steps  # no end seen: blocks would fit
        return result

    result = tuner(monkeypatch, run).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT, knob.reason
    tried = [s for c, s in zip(machine.configs, switches, strict=True) if c]
    assert tried[0] == "workers" and set(tried[1:]) == {""}  # asked once, then never again
    first = machine.configs.index({"workers": 0})
    assert machine.configs[first + 1] == {"workers": 0}  # the same screen, run again
    assert result.verdicts[first].startswith("not switched (the script ended before")


def test_a_switched_plan_fits_the_jobs_length(monkeypatch, fake_registry):
    """makemore's 300 steps held 6 of 8 block pairs of 25 steps: given --job-steps, the
    blocks are as long as fit, two at the least; a job too short for one pair of those is
    not switched."""
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=5.0)
    monkeypatch.setattr(ledger, "run_trial", machine)
    settings = TrialSettings("train.py", [], steps=200)
    Tuner(settings, context(), Path("/nonexistent"), Quiet(), job_steps=300).run()
    switched = [n for n, s in zip(machine.steps, machine.switches, strict=True) if s]
    plan = 2 * BLOCK_PAIRS * (SETTLE_STEPS + block_steps(switched[0]))
    assert switched and set(switched) == {switched[0]} and plan <= 300 - settings.warmup
    assert block_steps(switched[0]) == (300 - settings.warmup) // 16 - 1  # no shorter

    short = SwitchedMachine(gain_pct=5.0)
    monkeypatch.setattr(ledger, "run_trial", short)
    Tuner(settings, context(), Path("/nonexistent"), Quiet(), job_steps=40).run()
    assert {n for n, s in zip(short.steps, short.switches, strict=True) if s} == {
        BLOCK_PAIRS * 2  # blocks of two: six of the plan's pairs in the 37 steps
    }
    tiny = SwitchedMachine(gain_pct=5.0)
    monkeypatch.setattr(ledger, "run_trial", tiny)
    Tuner(settings, context(), Path("/nonexistent"), Quiet(), job_steps=8).run()
    assert not any(tiny.switches)  # not one pair of blocks of two fits


def test_a_short_scripts_switched_blocks_fit_the_steps_it_has(monkeypatch, fake_registry):
    """The bundled example at 512 samples is 16 steps: blocks of 7 held one pair a process.
    Once a trial ends before its timed steps, the blocks shrink to fit the script."""
    fake_registry.add(switchable("fused", [True]))

    class Short(SwitchedMachine):
        def __call__(self, settings, config, label, out_dir):
            result = super().__call__(settings, config, label, out_dir)
            if not settings.switch:  # the script ends at its 16th step
                result.measured_from, result.step_ms = 3, result.step_ms[:1] * 13
            return result

    machine = Short(gain_pct=5.0)
    monkeypatch.setattr(ledger, "run_trial", machine)
    settings = TrialSettings("train.py", [], steps=55)
    result = Tuner(settings, context(), Path("/nonexistent"), Quiet()).run()
    switched = [n for n, s in zip(machine.steps, machine.switches, strict=True) if s]
    assert switched and set(switched) == {BLOCK_PAIRS * 2}  # blocks of two: two pairs in 13
    assert result.knobs[0].status == KnobStatus.KEPT, result.knobs[0].reason


# --- the doctor's first finding, screened before the noise runs (tune/suspect.py) ----------


def _workers_job(fast_ms):
    """The loader's workers answer the first finding; the other knobs do nothing."""
    return lambda config: fast_ms if config.get("workers") else 100.0


@pytest.mark.parametrize("code", ["TP101", "TP107"])
def test_a_first_finding_that_wins_by_far_is_kept_before_the_noise_runs(
    monkeypatch, fake_registry, code
):
    fake_registry.add(FakeKnob("other", [True]))
    workers = FakeKnob("workers", [2])
    workers.answers = ("TP101", "TP107")  # as num-workers answers both
    fake_registry.add(workers)
    fake_registry.add(FakeKnob("persist", [True], depends_on=("workers",)))
    machine = Machine(_workers_job(fast_ms=50.0))
    ctx = context(finding_codes=frozenset({code}), first_finding=code)
    result = tuner(monkeypatch, machine, ctx=ctx).run()
    configs = machine.configs
    assert configs[1] == {"workers": 2}  # the second trial: the first finding's screen
    assert sorted(map(str, configs[2:4])) == ["{'workers': 2}", "{}"]  # its one pair
    assert configs[4:7] == [{"workers": 2}] * 3  # the noise runs, of the kept knob
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT and code in by["workers"].reason
    assert [r.label for r in result.ladder][:2] == ["baseline", "+ workers=2"]
    # the ladder does not screen it again, and builds on it
    assert not [t.label for t in result.trials if t.label == "workers=2"]  # no ladder screen
    assert {"workers": 2, "persist": True} in configs
    assert {"other": True} not in configs and {"workers": 2, "other": True} in configs
    assert result.best.get("workers") == 2
    assert result.final_speedup == pytest.approx(2.0, rel=0.05)


def test_a_first_finding_that_wins_by_little_changes_nothing_after_its_screen(
    monkeypatch, fake_registry
):
    def run(first_finding):
        fake_registry.knobs.clear()
        fake_registry.add(FakeKnob("other", [True]))
        fake_registry.add(FakeKnob("workers", [2]))
        # no jitter: the one more trial shifts an alternating jitter's signs
        machine = Machine(_workers_job(fast_ms=95.0), jitter_pct=0.0)
        ctx = context(finding_codes=frozenset({"TP101"}), first_finding=first_finding)
        result = tuner(monkeypatch, machine, ctx=ctx).run()
        return machine.configs, result

    today, before = run(None)
    configs, result = run("TP101")
    assert configs[1] == {"workers": 2}  # screened, +5%: under the 10% floor, no pair
    # then today's screens, trial for trial, but for the ladder's screen of workers=2: the
    # first finding's screen is that screen (ladder._first_finding_screen), not run again;
    # the decisions after them count no pair of it (it was against the cold run)
    ladder_screen = today.index({"workers": 2})
    expected = today[:ladder_screen] + today[ladder_screen + 1 :]
    screens_end = expected.index({"other": True}) + 1
    assert configs[:1] + configs[2 : screens_end + 1] == expected[:screens_end]
    assert configs.count({"workers": 2}) > 1  # decided by pairs of its own
    assert configs[2:5] == [{}] * 3
    assert [(k.knob, k.status) for k in result.knobs] == [(k.knob, k.status) for k in before.knobs]


def test_a_first_finding_whose_pair_disagrees_is_left_to_the_ladder(monkeypatch, fake_registry):
    """A screen far ahead of the cold run that its pair does not repeat (the cold run was
    slow, not the knob fast) keeps nothing: the noise runs are of the script as it is."""
    fake_registry.add(FakeKnob("workers", [2]))

    def ms(config):
        if not config:
            return 150.0 if len(machine.configs) == 1 else 100.0  # a slow cold run
        return 97.0

    machine = Machine(ms)
    ctx = context(finding_codes=frozenset({"TP101"}), first_finding="TP101")
    result = tuner(monkeypatch, machine, ctx=ctx).run()
    assert machine.configs[4:7] == [{}] * 3
    assert "first finding's pair" in " ".join(result.verdicts.values())
    assert result.ladder[0].label == "baseline"


@pytest.mark.parametrize("code", ["TP101", "TP107"])
def test_the_first_finding_of_the_doctors_ranked_codes_names_num_workers(code):
    from torchpace.tune.context import build_context
    from torchpace.tune.suspect import suspect_knob

    ctx = build_context(context().facts, [code, "TP205"])  # ranked: the first first
    assert ctx.first_finding == code and ctx.finding_codes == {code, "TP205"}
    assert suspect_knob(ctx, None).name == "num-workers"  # not its dependents
    assert suspect_knob(ctx, ["fused-optimizer"]) is None  # --only leaves it out
    assert build_context(context().facts, []).first_finding is None


def test_a_first_finding_kept_stays_kept_when_the_budget_ends_in_the_noise_runs(
    monkeypatch, fake_registry
):
    workers = FakeKnob("workers", [2])
    fake_registry.add(workers)
    machine = Machine(_workers_job(fast_ms=50.0))
    ctx = context(finding_codes=frozenset({"TP101"}), first_finding="TP101")
    result = tuner(monkeypatch, machine, ctx=ctx, budget=Budget(trials=5)).run()
    assert result.stopped == "budget"
    assert result.best == {"workers": 2}
    assert [r.label for r in result.ladder] == ["baseline", "+ workers=2"]


def test_the_ladder_reads_the_rows_under_a_first_finding_kept(monkeypatch, fake_registry):
    """Kept before the ladder, the loader's workers took the data row away: the ladder's
    first row is compute, read under them, not the baseline's data row."""
    workers, loader2 = FakeKnob("workers", [2]), FakeKnob("loader2", [True])
    fused = FakeKnob("fused", [True])
    workers.row = loader2.row = "data"
    for knob in (workers, loader2, fused):
        fake_registry.add(knob)
    configs = []

    def run(settings, config, label, out_dir):
        configs.append(dict(config))
        wait = 5.0 if config.get("workers") else 60.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[wait + 40.0] * 5,
                           data_wait_ms=[wait] * 5, losses=LOSSES)  # fmt: skip

    ctx = context(finding_codes=frozenset({"TP101"}), first_finding="TP101")
    tuner(monkeypatch, run, ctx=ctx).run()
    screened = [c for c in configs[7:] if len(c) == 2]
    assert screened[0] == {"workers": 2, "fused": True}, configs


def test_a_decision_in_the_noise_leaves_time_for_the_knobs_after_it(monkeypatch, fake_registry):
    """The README's quick-start under its 150 s: glibc malloc screened +11.8% (clear at its
    screen, so decided at once) and its pairs read +11.8, -4.0, -1.5, +7.1, +11.6, -5.8,
    +1.5% until the time ran out; the fused optimizer (+25% here) was never screened. One
    decision takes at most a third of the time left when it began."""
    from torchpace.tune.ledger import Budget

    fake_registry.add(FakeKnob("malloc", [True]))
    fake_registry.add(FakeKnob("fused", [True]))
    now = [0.0]
    malloc_gains = itertools.cycle([11.8, -4.0, -1.5, 7.1, 11.6, -5.8, 1.5])

    def run(settings, config, label, out_dir):
        now[0] += 6.5  # every trial a 6.5 s process
        if config.get("fused"):
            ms = 80.0
        elif config.get("malloc"):
            ms = 100.0 / (1 + next(malloc_gains) / 100)
        else:
            ms = 100.0
        return TrialResult(label, dict(config), Outcome.OK, step_ms=[ms] * 5, losses=LOSSES,
                           samples_per_step=32, wall_s=6.5)  # fmt: skip

    result = tuner(monkeypatch, run, budget=Budget(trials=60, seconds=150.0),
                   clock=lambda: now[0], started=0.0).run()  # fmt: skip
    by = {k.knob: k for k in result.knobs}
    assert "undecided within its share of the time" in by["malloc"].reason, by["malloc"].reason
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason
    assert result.best.get("fused") is True


def test_decisions_within_processes_go_before_those_in_pairs_of_processes(
    monkeypatch, fake_registry
):
    """Two processes decide a switched knob; pairs of processes inside the noise take six or
    more. makemore's 150 s went to glibc malloc's pairs, and fused AdamW (+13.2% at its
    switched screen) was left undecided: the cheap decision goes first, whatever the order
    of the screens' gains."""
    fake_registry.add(FakeKnob("malloc", [True]))  # first in the registry, in pairs
    fake_registry.add(switchable("fused", [True]))
    machine = SwitchedMachine(gain_pct=8.0, seed=3)
    result = tuner(monkeypatch, machine).run()
    labels = [t.label for t in result.trials]
    # the screens (malloc's at +21.9%, fused's at +7.5%), then fused's second process
    fused_decided = next(i for i, x in enumerate(labels) if x.startswith("fused=True (switched"))
    malloc_pairs = [i for i, x in enumerate(labels) if x.startswith("malloc=True (pair")]
    assert malloc_pairs and fused_decided < malloc_pairs[0], labels
    by = {k.knob: k for k in result.knobs}
    assert by["fused"].status == KnobStatus.KEPT, by["fused"].reason


def test_a_step_with_no_loader_wait_screens_no_knob_again(monkeypatch, fake_registry):
    """gpt.py has no DataLoader: every step's data wait is 0 and the compute row the whole
    step, which cannot grow; its refused knobs were screened again after the climb (47 s of
    a 255 s tune)."""
    fake_registry.add(FakeKnob("neutral", [True]))
    fake_registry.add(FakeKnob("fast", [True]))
    machine = RowMachine(loader=lambda c: 0.0, compute=lambda c: 80.0 if c.get("fast") else 100.0)
    result = tuner(monkeypatch, machine).run()
    assert result.best == {"fast": True}
    by = {k.knob: k for k in result.knobs}
    assert by["neutral"].status == KnobStatus.REJECTED
    assert "screened again" not in by["neutral"].reason, by["neutral"].reason


def test_a_stop_after_a_shared_process_leaves_its_knobs_undecided_not_untried(
    monkeypatch, fake_registry
):
    """A row's knobs screened in one process, then Ctrl-C (or the budget) before their own
    turns: each ran, so each is "undecided" with the trial that screened it, not "not tried"
    as if the stop had cost it its chance."""
    for name in ("a", "b", "c"):
        fake_registry.add(switchable(name, [True]))
    machine = ArmsMachine({("a", True): 20.0, ("b", True): 10.0, ("c", True): 0.0})

    def run(settings, config, label, out_dir):
        if len([p for p in machine.pairs if len(p) > 1]) == 1:  # after the shared process
            raise KeyboardInterrupt
        return machine(settings, config, label, out_dir)

    result = tuner(monkeypatch, run).run()
    assert result.stopped == "interrupted"
    (shared,) = [p for p in machine.pairs if len(p) > 1]
    assert shared == (("a", True), ("b", True), ("c", True)), machine.pairs
    # each names its own arm's record (the process's first, the others its arm_of)
    trials = enumerate(result.trials)
    arms = {t.label.split("=")[0]: i for i, t in trials if "one process" in t.label}
    assert len(result.knobs) == 3
    for knob in result.knobs:
        assert knob.status == KnobStatus.UNDECIDED, (knob.knob, knob.reason)
        where = arms[knob.knob]
        assert f"Ctrl-C stopped the tune during its trials ({where}" in knob.reason, knob.reason


def test_a_rows_shared_screens_are_decided_biggest_gain_first(monkeypatch, fake_registry):
    """dcgan on an AMX CPU: fused Adam (+7%, past the clear margin) and bf16 (+86%) read in one
    process; fused, first in the registry, was decided at once (two processes) while bf16
    waited behind it. Screens that came at once are decided as a person would take them: the
    biggest gain first, the ladder's next rung its base."""
    fake_registry.add(switchable("a", [True]))
    fake_registry.add(switchable("b", [True]))
    machine = ArmsMachine({("a", True): 30.0, ("b", True): 80.0})
    result = tuner(monkeypatch, machine).run()
    shared = next(i for i, p in enumerate(machine.pairs) if len(p) > 1)
    assert machine.pairs[shared] == (("a", True), ("b", True)), machine.pairs
    decisions = [s for s in machine.switches[shared + 1 :] if s]
    assert decisions[0] == "b", machine.switches
    assert [r.label for r in result.ladder][:2] == ["baseline", "+ b=True"]


def test_torch_compile_is_climbed_after_the_batch_size_on_top_of_it(monkeypatch, fake_registry):
    """issue 35: the batch size before compile. compile pays its compilation once and is
    compiled for the shapes it sees: screened last, on top of the batch kept."""
    compiled = FakeKnob("compiled", [True])
    compiled.pays_once = True
    fake_registry.add(compiled)
    fake_registry.add(FakeKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size"))
    run = _batch_machine(limit=200)

    def machine(settings, config, label, out_dir):
        result = run(settings, config, label, out_dir)
        if config.get("compiled") and result.ok:
            result.step_ms = [ms * 0.7 for ms in result.step_ms]
        return result

    result = tuner(monkeypatch, machine, ctx=_batch_context(_headroom(210))).run()
    configs = [t.config for t in result.trials]
    first_compiled = next(i for i, c in enumerate(configs) if c.get("compiled"))
    first_batch = next(i for i, c in enumerate(configs) if "batch-size" in c)
    assert first_batch < first_compiled
    assert all(c.get("batch-size") == 128 for c in configs if c.get("compiled"))
    assert [r.label for r in result.ladder] == [
        "baseline", "+ batch-size=128", "+ compiled=True"
    ]  # fmt: skip
    assert result.best == {"batch-size": 128, "compiled": True}


class SwitchedRowMachine(RowMachine):
    """RowMachine whose switched trials read ``block_gains`` within the process."""

    def __init__(self, loader, compute, block_gains):
        super().__init__(loader, compute)
        self.block_gains = block_gains
        self.switches: list[str] = []

    def __call__(self, settings, config, label, out_dir):
        result = super().__call__(settings, config, label, out_dir)
        self.switches.append(settings.switch)
        # every step asked for: the script does not end first (switched blocks fit it)
        result.step_ms = result.step_ms[:1] * settings.steps
        result.data_wait_ms = result.data_wait_ms[:1] * settings.steps
        if settings.switch:
            result.switch = settings.switch
            result.reference_ms = list(result.step_ms)
            result.block_gains = list(self.block_gains)
        return result


# about +1.4% within each process, its 90% interval reaching past 3%
SMALL_GAINS = [-2.0, 5.0, 0.0, 4.0, -1.0, 3.0, 1.0, 2.0]


@pytest.mark.parametrize("switched", [True, False])
def test_a_knob_that_read_under_a_changes_worth_waits_for_the_other_rows(
    monkeypatch, fake_registry, switched
):
    """The compute row is the biggest (50 of a 60 ms step, the loader 10 behind it): its
    knob is screened first. Switched within its process, its 8 block pairs read +1.4%
    (under the 3% a change must be worth, its interval reaching past it): it waits while
    the data row's knob is screened and kept (+20%), and is decided on top of it. A screen
    of one pair of processes says too little to wait on: decided at once, as before."""
    fake_registry.add(switchable("fused", [True]) if switched else FakeKnob("fused", [True]))
    workers = FakeKnob("workers", [2])
    workers.row = "data"
    fake_registry.add(workers)
    machine = SwitchedRowMachine(
        loader=lambda c: 20.0 if c.get("workers") else 60.0,
        compute=lambda c: 50.0,  # fused does nothing the steps show
        block_gains=SMALL_GAINS,
    )
    result = tuner(monkeypatch, machine).run()
    configs = machine.configs
    fused = [i for i, c in enumerate(configs) if c.get("fused")]
    workers_at = next(i for i, c in enumerate(configs) if c.get("workers"))
    if switched:
        assert fused[0] < workers_at < fused[1], configs  # screened first, decided after
        assert configs[fused[1]] == {"workers": 2, "fused": True}
    else:
        assert fused[0] < fused[1] < workers_at, configs  # decided before the data row
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT
    assert by["fused"].status == KnobStatus.REJECTED, by["fused"].reason
    if switched:
        assert "on top of workers=2" in by["fused"].reason, by["fused"].reason


def test_a_screen_under_a_changes_worth_whose_interval_reaches_far_past_it_does_not_wait(
    monkeypatch, fake_registry
):
    """bf16 on the README's example, the doctor's first finding: +0.6% over 5 block pairs
    whose 90% interval reached +15.0%. Its pairs do not bound it under a change's worth, so
    it is decided in its row, not left for after the others (where the 165 s ended first
    and nothing was kept)."""
    fake_registry.add(switchable("fused", [True]))
    workers = FakeKnob("workers", [2])
    workers.row = "data"
    fake_registry.add(workers)
    machine = SwitchedRowMachine(
        loader=lambda c: 20.0 if c.get("workers") else 60.0,
        compute=lambda c: 50.0,
        block_gains=[15.0, 5.8, -4.7, -4.4, -4.0, 9.0, -3.0, 1.0],  # +1.2%, interval -4.0% to +7.4%
    )
    tuner(monkeypatch, machine).run()
    configs = machine.configs
    fused = [i for i, c in enumerate(configs) if c.get("fused")]
    workers_at = next(i for i, c in enumerate(configs) if c.get("workers"))
    assert fused[0] < fused[1] < workers_at, configs  # screened and decided first


def test_decisions_go_in_the_order_of_what_their_screens_assure(monkeypatch, fake_registry):
    """A switched screen of two block pairs (+3.7%: a short job's blocks) assures less than
    a process screen well past the pairs' margin (+10%): the process screen is decided
    first. Switched first whatever their precision, the fused optimizer took three
    processes of the README's example's 150 s before glibc malloc had one pair."""
    fake_registry.add(switchable("fused", [True]))
    fake_registry.add(FakeKnob("malloc", [True]))
    machine = SwitchedRowMachine(
        loader=lambda c: 0.0,
        compute=lambda c: 91.0 if c.get("malloc") else 100.0,
        block_gains=[4.0, 3.4],
    )
    result = tuner(monkeypatch, machine).run()
    configs, switches = machine.configs, machine.switches
    screens_end = 1 + next(i for i, c in enumerate(configs) if c == {"malloc": True})
    first_decision = configs[screens_end:]
    assert first_decision[0] in ({}, {"malloc": True}), configs  # malloc's pair
    fused_decided = [i for i, (c, s) in enumerate(zip(configs, switches, strict=True))
                     if c.get("fused") and s and i > screens_end]  # fmt: skip
    malloc_pairs = [i for i, c in enumerate(configs) if c == {"malloc": True} and i >= screens_end]
    assert malloc_pairs and (not fused_decided or malloc_pairs[0] < fused_decided[0])
    by = {k.knob: k for k in result.knobs}
    assert by["malloc"].status == KnobStatus.KEPT, by["malloc"].reason


def test_a_short_switched_screen_is_ranked_by_its_process_s_noise(tmp_path):
    """Two block pairs that agree (+18.3, +15.1%) say nothing of the noise when the other
    arms of their process spread from -11.4 to +35.1% (the README's example on a Zen 4
    EPYC): ranked by its process's spread, fused assures less than glibc malloc's process
    screen (+16.1%, 11.4% back-to-back noise), which then goes first. Ranked by its own
    two, fused's decision (three processes, +1.9%) went first and the time budget cut
    malloc's."""
    from torchpace.tune.ladder import Ladder, _Screened
    from torchpace.tune.ledger import Budget, Ledger
    from torchpace.tune.noise import Noise
    from torchpace.tune.trial import Outcome, TrialResult, TrialSettings

    settings = TrialSettings(target="train.py", args=[], warmup=3, steps=20)
    book = Ledger(settings, tmp_path, None, Budget(), lambda: 0.0, 0.0, 0.1, None)
    book.noise = Noise(11.4, (73.0, 87.3, 77.0, 83.4))

    def run(config, gains=(), arm_of=None):
        result = TrialResult(str(config), config, Outcome.OK, step_ms=[70.0] * 20)
        result.switch = next(iter(config)) if gains else ""
        result.block_gains, result.reference_ms = list(gains), [80.0] * len(gains)
        result.arm_of = arm_of
        book.trials.append(result)
        book.gains[id(result)] = noise.interval(gains).estimate_pct if gains else 16.1
        return result

    fused = run({"opt": "fused"}, [18.3, 15.1])
    foreach = run({"opt": "foreach"}, [26.2, -7.7], arm_of=0)
    bf16 = run({"amp": "bf16"}, [35.1, 13.9, -11.4], arm_of=0)
    malloc = run({"malloc": True})
    assert book.process_of(bf16) == [fused, foreach, bf16] == book.process_of(fused)
    assert book.process_of(malloc) == [malloc]
    ladder = Ladder(book, context())

    def screen(name, *runs):
        return _Screened(FakeKnob(name, [True]), None, {}, list(runs))

    opt, amp, heap = screen("opt", fused, foreach), screen("amp", bf16), screen("malloc", malloc)
    assured = {s.knob.name: ladder._assured_gain(s) for s in (opt, amp, heap)}
    assert assured["malloc"] == pytest.approx(16.1 - 11.4)
    # the process's pooled spread (~33%) over sqrt(2) and sqrt(3) pairs: far under zero
    assert assured["opt"] < -15 and assured["amp"] < -15, assured
    # alone in its process (no arm beside it), two block pairs keep the fixed margin
    lone = TrialResult("lone", {"opt": "fused"}, Outcome.OK, step_ms=[70.0] * 20)
    lone.switch, lone.block_gains = "opt", [18.3, 15.1]
    book.gains[id(lone)] = noise.interval(lone.block_gains).estimate_pct
    assert ladder._assured_gain(screen("opt", lone)) == pytest.approx(16.7 - 10.0, abs=0.1)
