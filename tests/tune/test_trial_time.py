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
