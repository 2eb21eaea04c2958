"""A run's time per step (tune/trial.run_ms_per_step): the mean of its timed steps less the
fastest and slowest tenth, what every comparison and figure uses."""

from __future__ import annotations

import statistics

import pytest

from torchpace.tune.trial import Outcome, TrialResult, run_ms_per_step


def test_bursts_of_loader_workers_count_as_the_job_sees_them():
    # the planted I/O-bound loader with 2 workers: batches arrive in bursts
    steps = [35.8, 1.5, 49.8, 6.0, 55.5, 1.4]
    assert statistics.median(steps) == pytest.approx(20.9)  # anywhere between the modes
    assert run_ms_per_step(steps) == pytest.approx((35.8 + 1.5 + 49.8 + 6.0) / 4)


def test_one_disturbed_step_is_trimmed():
    steady = [10.0] * 9
    assert run_ms_per_step([*steady, 250.0]) == pytest.approx(10.0)
    assert run_ms_per_step([10.0, 12.0, 11.0]) == pytest.approx(11.0)  # too few to trim
    assert run_ms_per_step([]) is None


def test_a_trial_reports_both_and_compares_on_the_time_per_step():
    r = TrialResult("x", {}, Outcome.OK, step_ms=[35.8, 1.5, 49.8, 6.0, 55.5, 1.4],
                    samples_per_step=32)  # fmt: skip
    d = r.to_dict()
    assert d["median_ms"] == pytest.approx(20.9) and d["ms_per_step"] == pytest.approx(23.275)
    assert r.samples_per_s == pytest.approx(32 / 0.023275, rel=1e-3)


def test_a_trial_keeps_its_timed_steps_data_wait_and_the_rows_split_the_step():
    """The measured steps' wait for the loader (not the warm-up's) travels with the trial;
    the rows are the wait and the rest of the step."""
    from torchpace.facts.run import RunFacts, Status, StepPhase, StepRecord
    from torchpace.tune.rows import biggest_row, step_rows
    from torchpace.tune.trial import from_facts

    steps = [StepRecord(0, 500.0, 400.0, False, phase=StepPhase.WARMUP)]
    steps += [
        StepRecord(i, 100.0, 60.0, False, phase=StepPhase.MEASURED, loss=2.0)
        for i in range(1, 6)
    ]  # fmt: skip
    facts = RunFacts(
        command=["python", "t.py"], step_source="optimizer", optimizers=["SGD"],
        optimizer_steps_per_step=1.0, warmup=1, steps_requested=5, status=Status.COMPLETE,
        steps=steps,
    )  # fmt: skip
    trial = from_facts(facts, "baseline", {})
    assert trial.data_wait_ms == [60.0] * 5
    rows = step_rows([trial])
    assert rows == pytest.approx({"data": 60.0, "compute": 40.0})
    assert biggest_row(rows) == "data"
    assert step_rows([TrialResult("b", {}, Outcome.OK, step_ms=[1.0])]) is None
