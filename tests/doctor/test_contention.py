"""The one disturbance rule (contention.py) the doctor's window check and tune's disturbed
runs both judge by, and the one /proc/stat reader (capture/machine_load.py) both read the
neighbour's load with: the CPUs this process may run on."""

import pytest
from doctor_fakes import facts

from torchpace import contention
from torchpace.capture import machine_load
from torchpace.doctor.disturbance import check_window
from torchpace.facts.run import PhaseLoad, StepPhase, StepRecord
from torchpace.tune import load, noise


def test_a_busy_neighbour_is_a_share_of_this_process_cores_beyond_the_usual():
    assert contention.busy_neighbour(1.0, 2)  # half of 2 cores
    assert not contention.busy_neighbour(0.9, 2)
    assert not contention.busy_neighbour(1.6, 8)  # a 5th of 8 cores
    assert contention.busy_neighbour(4.0, 8)
    assert not contention.busy_neighbour(1.6, 2, usual_cores=1.2)  # busy all along
    assert contention.busy_neighbour(0.5, None)  # unknown cores: one


def test_far_slower_needs_the_factor_and_the_excess():
    assert contention.far_slower(3488.0, 79.0, contention.PROFILED_MAX_SLOWDOWN, 10.0)
    assert not contention.far_slower(97.0, 76.0, contention.PROFILED_MAX_SLOWDOWN, 10.0)
    assert not contention.far_slower(5.0, 1.0, contention.PROFILED_MAX_SLOWDOWN, 10.0)
    assert not contention.far_slower(5.0, 0.0, 3.0)
    assert contention.run_slower_limit_pct(2.0) == contention.RUN_MAX_SLOWER_PCT
    assert contention.run_slower_limit_pct(30.0) == 90.0
    assert contention.spread_limit_pct([2.0, 3.0]) == contention.SPREAD_FLOOR_PCT
    assert contention.spread_limit_pct([9.0, 10.0]) == pytest.approx(28.5)


def test_doctor_and_tune_judge_the_same_neighbour_alike():
    # 1.6 of 8 cores: neither verb calls it busy; 1.6 of 2 cores: both do
    steps = [StepRecord(i, 50.0, 0.0, in_window=True, phase=StepPhase.WINDOW) for i in range(5)]
    steps += [StepRecord(5 + i, 50.0, 0.0, in_window=False, phase=StepPhase.REFERENCE)
              for i in range(10)]  # fmt: skip
    for cores, busy in ((8, False), (2, True)):
        f = facts(steps=steps)
        f.window_load = PhaseLoad(1.0, other_cpu_s=1.6, own_cpu_s=0.4, cores=cores, load_1m=None)
        assert check_window(f).disturbed is busy
        why = noise.disturbance(None, [], 1.6, [0.0, 0.1], cores)
        assert (why is not None) is busy


def test_tune_reads_the_load_on_the_cpus_this_process_may_run_on(tmp_path, monkeypatch):
    stat = (
        "cpu  1000 0 500 9000 0 0 0 0\ncpu0 400 0 100 4500 0 0 0 0\ncpu1 600 0 400 4500 0 0 0 0\n"
    )
    (tmp_path / "stat").write_text(stat)
    monkeypatch.setattr(machine_load, "PROC", tmp_path)
    monkeypatch.setattr(machine_load, "usable_cpus", lambda: {1})
    ticks = machine_load._ticks()
    assert load.snapshot().machine_busy_s == pytest.approx(1000 / ticks)  # cpu1 only
    assert load.cores() == 1
    monkeypatch.setattr(machine_load, "usable_cpus", lambda: None)  # affinity unknown: all
    assert load.snapshot().machine_busy_s == pytest.approx(1500 / ticks)
    assert load.cores() is None
    (tmp_path / "stat").unlink()
    assert load.snapshot().machine_busy_s is None and machine_load.sample() is None
