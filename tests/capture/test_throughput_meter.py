"""How many unprofiled steps make the doctor's headline figure: a time budget with a floor
and a cap on the steps, after settling steps that drain the loader's queue."""

from torchpace.capture import throughput as t
from torchpace.facts.run import LoaderFacts


def run(meter: t.ThroughputMeter, step_ms: float, limit: int = 10_000) -> int:
    """Steps the meter takes (settling ones included) at this step time."""
    for n in range(1, limit):
        if not meter.record(step_ms):
            return n
    raise AssertionError("the meter never had enough")


def test_the_budget_decides_between_the_floor_and_the_cap():
    assert run(t.ThroughputMeter(budget_s=1.0, settle=0), step_ms=50.0) == 20
    # fast steps: the budget would take thousands, the cap stops it
    assert run(t.ThroughputMeter(budget_s=1.0, settle=0), step_ms=0.1) == t.MAX_STEPS
    # a zero budget still measures the floor
    assert run(t.ThroughputMeter(budget_s=0.0, settle=0), step_ms=50.0) == t.MIN_STEPS


def test_very_slow_steps_stop_at_the_slow_floor():
    # 10 s steps with a 5 s budget: the floor of 10 would take 100 s (20 budgets)
    meter = t.ThroughputMeter(budget_s=5.0, settle=0)
    assert run(meter, step_ms=10_000.0) == t.SLOW_MIN_STEPS
    assert meter.elapsed_s >= t.SLOW_BUDGETS * 5.0


def test_settling_steps_are_not_measured():
    meter = t.ThroughputMeter(budget_s=0.0, settle=3)
    assert meter.settling
    for _ in range(3):
        assert meter.record(1000.0)
    assert not meter.settling and meter.steps == 0 and meter.elapsed_s == 0.0
    assert run(meter, step_ms=5.0) == t.MIN_STEPS


def loader(workers: int, prefetch: int | None, seen: int = 10) -> LoaderFacts:
    return LoaderFacts("train.py:1", workers, False, False, prefetch, 32, False, 100, "D", seen)


def test_settle_drains_the_main_loaders_queue():
    assert t.settle_steps([]) == 1
    assert t.settle_steps([loader(0, None)]) == 1
    assert t.settle_steps([loader(4, None)]) == 1 + 4 * t.DEFAULT_PREFETCH_FACTOR
    assert t.settle_steps([loader(2, 3, seen=1), loader(8, 4, seen=50)]) == t.MAX_SETTLE_STEPS
    assert t.settle_steps([loader(2, 3, seen=50), loader(8, 4, seen=1)]) == 7
