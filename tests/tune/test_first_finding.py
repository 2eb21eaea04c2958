"""The doctor's first finding goes first (issue 36): its knob screened right after the cold
run with the fidelity check on as well (the check's repeats stay the script as it is), and
climbed first by the ladder whatever the row of the step its knob acts on. Scripted trials,
as in test_search.py: no process is started here.
"""

from __future__ import annotations

import pytest
from test_search import LOSSES, FakeKnob, Machine, RowMachine, context, tuner
from test_search import fake_registry as fake_registry  # the fixture, used here too

from torchpace.tune import baseline
from torchpace.tune import fidelity as fidelity_check
from torchpace.tune.result import KnobStatus
from torchpace.tune.search import Budget
from torchpace.tune.trial import Outcome, TrialResult

FIDELITY_LIMIT = 10.0


def _workers_first(fake_registry, code="TP107"):
    """``workers`` answers the first finding; ``other`` does nothing; ``persist`` builds on
    workers. Returns the context naming the finding first."""
    fake_registry.add(FakeKnob("other", [True]))
    workers = FakeKnob("workers", [2])
    workers.answers = ("TP101", "TP107")  # as num-workers answers both
    fake_registry.add(workers)
    fake_registry.add(FakeKnob("persist", [True], depends_on=("workers",)))
    return context(finding_codes=frozenset({code}), first_finding=code)


def _plain_script(monkeypatch, ms: float, machine: Machine | None = None) -> list[int]:
    """Plain runs of the script at ``ms`` ms/step; returns, for each, how many trials had
    run before it."""
    before: list[int] = []

    def plain(settings, where):
        before.append(len(machine.configs) if machine is not None else -1)
        return ms

    monkeypatch.setattr("torchpace.tune.fidelity.plain_run", plain)
    return before


def _workers_job(config) -> float:
    return 50.0 if config.get("workers") else 100.0


def test_the_first_finding_is_screened_before_the_fidelity_check_and_stays_kept(
    monkeypatch, fake_registry
):
    """With the fidelity check on (the default), the first finding's knob is screened and
    paired right after the cold run, before the check's plain runs; kept, it is the ladder's
    first rung (its screen and its pair), while the back-to-back repeats stay runs of the
    script as it is, alternated with the plain runs: the check compares the script with
    itself, and the noise is the script's."""
    ctx = _workers_first(fake_registry)
    machine = Machine(_workers_job)
    plain_before = _plain_script(monkeypatch, 101.0, machine)
    result = tuner(monkeypatch, machine, ctx=ctx, fidelity_limit=FIDELITY_LIMIT).run()
    configs = machine.configs
    assert configs[1] == {"workers": 2}  # the first finding's screen, after the cold run
    assert sorted(map(str, configs[2:4])) == ["{'workers': 2}", "{}"]  # its one pair
    assert configs[4:7] == [{}] * baseline.NOISE_RUNS  # the repeats: the script as it is
    # a plain run beside each of the first two repeats (the check within its limit: none
    # beside the third), all after the pair, the sides alternated (plain first, then the
    # repeat first)
    assert plain_before == [4, 6]
    fidelity = result.fidelity
    assert fidelity["ok"] and len(fidelity["trial_ms"]) == fidelity_check.PAIRS
    assert all(95.0 < ms < 105.0 for ms in fidelity["trial_ms"])  # the script, not workers
    per_sample = [ms * 32 for ms in result.noise.medians_ms]  # the repeats' spread
    assert len(per_sample) == baseline.NOISE_RUNS and all(95.0 < ms < 105.0 for ms in per_sample)
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT and "TP107" in by["workers"].reason
    base, kept = result.ladder[:2]
    assert (base.label, kept.label) == ("baseline", "+ workers=2")
    assert base.median_ms == pytest.approx(100.0, rel=0.02)  # its pair's reference + repeats
    assert kept.median_ms == pytest.approx(50.0, rel=0.02)  # its screen and its pair
    assert kept.speedup == pytest.approx(2.0, rel=0.03)
    # the ladder builds on it: it is not screened again, and the others go on top of it
    assert [t.label for t in result.trials].count("workers=2") == 0
    assert {"other": True} not in configs and {"workers": 2, "other": True} in configs
    assert {"workers": 2, "persist": True} in configs
    assert result.best.get("workers") == 2
    assert result.final_speedup == pytest.approx(2.0, rel=0.05)


def test_a_first_finding_kept_stays_kept_when_the_budget_ends_in_the_fidelity_check(
    monkeypatch, fake_registry
):
    ctx = _workers_first(fake_registry)
    _plain_script(monkeypatch, 100.0)
    machine = Machine(_workers_job)
    # 5 trials for the search, 4 held back from them for the final check's two pairs
    run = tuner(monkeypatch, machine, ctx=ctx, fidelity_limit=FIDELITY_LIMIT,
                budget=Budget(trials=9)).run()  # fmt: skip
    assert run.stopped == "budget" and machine.configs[4] == {}
    assert run.best == {"workers": 2}
    assert [r.label for r in run.ladder] == ["baseline", "+ workers=2"]
    # the search's limit left the final check its runs: the script vs the kept finding
    assert sorted(map(str, machine.configs[5:])) == sorted(
        map(str, [{}, {}, *[{"workers": 2}] * 2])
    )
    assert run.final_speedup == pytest.approx(2.0, rel=0.05) and len(run.final_gains_pct) >= 2


def test_a_fidelity_check_that_stops_the_tune_voids_the_first_finding_kept_before_it(
    monkeypatch, fake_registry
):
    """The trials time another workload than the script's (5x its plain speed): the knob
    kept before the check was judged on that workload too. The result is the script."""
    ctx = _workers_first(fake_registry)
    _plain_script(monkeypatch, 20.0)
    result = tuner(monkeypatch, Machine(_workers_job), ctx=ctx,
                   fidelity_limit=FIDELITY_LIMIT).run()  # fmt: skip
    assert result.stopped == "fidelity"
    assert result.best == {} and [r.label for r in result.ladder] == ["baseline"]
    (workers,) = [k for k in result.knobs if k.knob == "workers"]
    assert workers.status == KnobStatus.UNDECIDED
    assert "fidelity check" in workers.reason and "TP107" in workers.reason


# the planted crowded job's cold run (8 workers on 2 cores): its steps spread by 16% of their
# median, while its runs were 3.4% apart
JITTERY_COLD = [120.8, 98.7, 100.7, 105.9, 117.2, 114.7, 120.3, 111.2, 91.3, 111.0]


def test_a_cold_run_whose_steps_jitter_leaves_a_clear_win_its_pair(monkeypatch, fake_registry):
    """Its margin is what its steps' jitter makes of two runs' means (20% here), not three
    times the steps' spread (48%, where num_workers=0 at +26.8% was left to the ladder)."""
    from torchpace.tune.suspect import win_margin_pct

    ctx = _workers_first(fake_registry)

    def run(settings, config, label, out_dir):
        steps = JITTERY_COLD if not run.calls else [87.0 if config.get("workers") else 110.0] * 10
        run.calls += 1
        return TrialResult(label, dict(config), Outcome.OK, step_ms=list(steps), losses=LOSSES)

    run.calls = 0
    cold = TrialResult("baseline", {}, Outcome.OK, step_ms=list(JITTERY_COLD))
    assert win_margin_pct(cold) == pytest.approx(20.0, abs=0.5)
    result = tuner(monkeypatch, run, ctx=ctx, budget=Budget(trials=8)).run()
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT, by["workers"].reason
    assert "over 20%" in by["workers"].reason
    assert [t.config for t in result.trials[1:4]].count({"workers": 2}) == 2  # screen, pair


def _crowded_job(config) -> float:
    """Workers that crowd the cores: the batch is always ready (no data wait), the compute
    is slower. Fewer workers take 7% off it, bf16 20%."""
    return 100.0 * (0.93 if config.get("workers") else 1.0) * (0.8 if config.get("bf16") else 1.0)


@pytest.mark.parametrize("first_finding", [None, "TP107"])
@pytest.mark.parametrize("fidelity_limit", [None, FIDELITY_LIMIT])
def test_the_first_finding_s_knob_is_climbed_first_whatever_its_row(
    monkeypatch, fake_registry, first_finding, fidelity_limit
):
    """The crowded job: no step waits for its batch, so the compute row is the biggest and
    the loader's workers (the data row) would wait behind all of it. Answering the doctor's
    first finding, and not kept at its screen (+7.5%, under the 10% floor), they are the
    ladder's first screen all the same, ahead of bf16 and on the baseline."""
    bf16 = FakeKnob("bf16", [True])
    workers = FakeKnob("workers", [2])
    workers.answers, workers.row = ("TP107",), "data"
    fake_registry.add(bf16)  # first in the registry, and in the biggest row
    fake_registry.add(workers)
    _plain_script(monkeypatch, 100.0)
    machine = RowMachine(loader=lambda config: 10.0, compute=_crowded_job)
    codes = frozenset({first_finding} if first_finding else ())
    ctx = context(finding_codes=codes, first_finding=first_finding)
    result = tuner(monkeypatch, machine, ctx=ctx, fidelity_limit=fidelity_limit).run()
    screened_first = 1 if first_finding else 0  # the first finding's screen, no pair
    assert machine.configs[1 : 1 + screened_first] == [{"workers": 2}] * screened_first
    noise_end = 1 + screened_first + baseline.NOISE_RUNS
    assert machine.configs[1 + screened_first : noise_end] == [{}] * baseline.NOISE_RUNS
    first_on_the_ladder = machine.configs[noise_end]
    # with the first finding its screen is the ladder's screen of workers=2 (not run again:
    # the ladder's first trial is bf16's screen); without, the registry's order
    assert first_on_the_ladder == {"bf16": True}
    if first_finding:
        assert machine.configs[: noise_end + 1].count({"workers": 2}) == 1
        first = next(i for i, t in enumerate(result.trials) if t.config == {"workers": 2})
        assert "the ladder's screen" in result.verdicts[first], result.verdicts[first]
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == by["bf16"].status == KnobStatus.KEPT
    assert result.best == {"workers": 2, "bf16": True}


# --- the first finding's values, arms of one process ------------------------------------------
def _switched_workers_first(fake_registry, values=(1, 2, 4)):
    """``workers`` switches all its values in one process and answers the first finding."""
    from test_search import multi_arm

    workers = multi_arm("workers", list(values))
    workers.answers = ("TP101", "TP107")
    fake_registry.add(workers)
    return context(finding_codes=frozenset({"TP101"}), first_finding="TP101")


@pytest.mark.parametrize("fidelity_limit", [None, FIDELITY_LIMIT])
def test_the_first_findings_values_are_arms_of_one_process_and_kept_by_two(
    monkeypatch, fake_registry, fidelity_limit
):
    """issue 35: on an H100 each value of the first finding's knob was a process against the
    cold run (5-6 s of set-up each, four worker counts), and its pair two more. Switchable
    together, its values are arms of one process beside the script's own setting, and one
    more process of the best value alone keeps it: two processes, the noise runs after them
    runs of the script as it is, the rung the block pairs' gain."""
    from test_search import ArmsMachine

    ctx = _switched_workers_first(fake_registry)
    _plain_script(monkeypatch, 20.5)
    machine = ArmsMachine({1: 5.0, 2: 30.0, 4: 20.0})
    result = tuner(monkeypatch, machine, ctx=ctx, fidelity_limit=fidelity_limit).run()
    # the cold run, one process of three arms, one of workers=2 alone, then the noise runs
    assert machine.arms[1] == (1, 2, 4) and machine.switches[1] == "workers"
    assert machine.configs[2] == {"workers": 2} and machine.switches[2] == "workers"
    assert machine.arms[2] in ((), (2,))
    assert machine.configs[3 : 3 + baseline.NOISE_RUNS] == [{}] * baseline.NOISE_RUNS
    assert machine.switches[3 : 3 + baseline.NOISE_RUNS] == [""] * baseline.NOISE_RUNS
    by = {k.knob: k for k in result.knobs}
    workers = by["workers"]
    assert workers.status == KnobStatus.KEPT and workers.value == 2, workers.reason
    assert "TP101" in workers.reason and "block pairs in 2 processes" in workers.reason
    assert workers.gain_pct == pytest.approx(30.0, abs=2.0)
    kept = result.ladder[1]
    assert kept.label == "+ workers=2"
    assert kept.speedup == pytest.approx(1.30, abs=0.02)  # the block pairs' gain, chained
    # the ladder builds on it: no value of it screened again
    assert sum(1 for a in machine.arms if a == (1, 2, 4)) == 1
    assert result.best == {"workers": 2}
    assert result.final_speedup == pytest.approx(1.30, abs=0.03)


def test_first_finding_arms_under_their_margin_are_the_ladders_screens(monkeypatch, fake_registry):
    """A win not by far (the 90% interval of its block pairs not wholly above 10%) keeps
    nothing before the noise runs; the ladder reads the same arms as its screens (no process of
    them again) and decides the best value within processes, the screen's block pairs
    counting."""
    from test_search import ArmsMachine

    ctx = _switched_workers_first(fake_registry)
    machine = ArmsMachine({1: 2.0, 2: 6.0, 4: 4.0})
    result = tuner(monkeypatch, machine, ctx=ctx).run()
    assert machine.arms[1] == (1, 2, 4)
    assert machine.configs[2 : 2 + baseline.NOISE_RUNS] == [{}] * baseline.NOISE_RUNS
    assert sum(1 for a in machine.arms if len(a) == 3) == 1  # screened once, by the suspect
    two = next(i for i, t in enumerate(result.trials) if t.config == {"workers": 2})
    assert result.trials[two].switched and result.trials[two].arm_of == 1
    assert "TP101's knob, not by far (90% interval from +5" in result.verdicts[two]
    assert result.verdicts[two].endswith("under 10%): left to the ladder")
    assert "not worth a change" in result.verdicts[1]  # workers=1: +2%, bounded under 3%
    by = {k.knob: k for k in result.knobs}
    assert by["workers"].status == KnobStatus.KEPT and by["workers"].value == 2, by["workers"]
    assert "block pairs in" in by["workers"].reason


def test_first_finding_arms_the_process_cannot_switch_go_a_process_each(monkeypatch, fake_registry):
    """A process that could not switch the knob: its values go as before, a process each
    against the cold run, and the knob is decided by processes in pairs from there on."""
    from test_search import ArmsMachine

    ctx = _switched_workers_first(fake_registry, values=(2, 4))
    machine = ArmsMachine({2: 40.0, 4: 30.0}, can_switch=False)
    tuner(monkeypatch, machine, ctx=ctx).run()
    assert machine.switches[1] == "workers"  # asked, and not switched
    assert machine.configs[2:4] == [{"workers": 2}, {"workers": 4}]
    assert machine.switches[2:4] == ["", ""]


def test_a_first_finding_of_one_value_is_switched_too(monkeypatch, fake_registry):
    """TP314 on a CPU with native bf16: amp's one value, switched against float32 in its
    process, kept by two processes before the noise runs."""
    from test_search import SwitchedMachine, switchable

    amp = switchable("fused", [True])  # SwitchedMachine's knob: +20% within any process
    amp.answers = ("TP314",)
    fake_registry.add(amp)
    ctx = context(finding_codes=frozenset({"TP314"}), first_finding="TP314")
    machine = SwitchedMachine(gain_pct=20.0)
    result = tuner(monkeypatch, machine, ctx=ctx).run()
    assert machine.switches[1:3] == ["fused", "fused"]
    assert result.trials[1].label == "fused=True (first finding) (switched)"
    assert machine.configs[3 : 3 + baseline.NOISE_RUNS] == [{}] * baseline.NOISE_RUNS
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT and "TP314" in knob.reason, knob.reason
    assert result.ladder[1].speedup == pytest.approx(1.20, abs=0.02)


def test_a_first_finding_s_pair_that_cannot_switch_leaves_the_knob_to_processes_in_pairs(
    monkeypatch, fake_registry
):
    """Its arms switched in one process, won by far; the process of the best value alone
    could not switch it: nothing is kept before the noise runs, and the knob is decided by
    processes in pairs from there on (no switched trial of it again), as anywhere a switch
    failed."""
    from test_search import ArmsMachine

    class SwitchesOnce(ArmsMachine):
        def __call__(self, settings, config, label, out_dir):
            result = super().__call__(settings, config, label, out_dir)
            if settings.switch:
                self.can_switch = False  # the first switched process; no later one can
            return result

    ctx = _switched_workers_first(fake_registry)
    machine = SwitchesOnce({1: 5.0, 2: 30.0, 4: 20.0})
    result = tuner(monkeypatch, machine, ctx=ctx).run()
    assert machine.arms[1] == (1, 2, 4)
    assert machine.configs[2] == {"workers": 2} and machine.switches[2] == "workers"
    pair = next(i for i, t in enumerate(result.trials) if "first finding's pair" in t.label)
    assert "first finding's pair: not switched (" in result.verdicts[pair]
    assert machine.configs[3 : 3 + baseline.NOISE_RUNS] == [{}] * baseline.NOISE_RUNS
    runs = zip(machine.configs[3:], machine.switches[3:], strict=True)
    later = [switch for config, switch in runs if "workers" in config]
    assert later and all(s == "" for s in later), machine.switches
