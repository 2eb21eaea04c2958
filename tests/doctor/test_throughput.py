"""The headline figure: samples/s = total samples / total time over the unprofiled steps."""

import pytest
from doctor_fakes import facts, loader, profile

from torchpace.doctor.analyze import Diagnosis
from torchpace.doctor.result import diagnosis_to_dict
from torchpace.doctor.throughput import PROFILED, UNPROFILED, measure
from torchpace.facts.run import StepPhase, StepRecord

REF = StepPhase.REFERENCE


def swinging(n: int, start: int = 8) -> list[StepRecord]:
    """Steps of 40 ms with every fourth at 160 ms (a slow batch), 32 samples each."""
    out = []
    for i in range(n):
        wall = 160.0 if i % 4 == 3 else 40.0
        out.append(StepRecord(start + i, wall, wall - 30.0, False, phase=REF, samples=32))
    return out


def test_samples_per_s_is_total_samples_over_total_time():
    window = [StepRecord(i, 500.0, 0.0, True, phase=StepPhase.WINDOW) for i in range(3)]
    settle = [StepRecord(3, 1.0, 0.0, False, phase=StepPhase.SETTLE, samples=32)]
    t = measure(facts(loaders=[loader()], steps=window + settle + swinging(40)))
    assert t.source == UNPROFILED and t.unprofiled and t.steps == 40
    # 40 steps: 30 x 40 ms + 10 x 160 ms = 2.8 s for 1280 samples
    assert t.seconds == pytest.approx(2.8)
    assert t.samples == 1280 and t.samples_per_s == pytest.approx(1280 / 2.8, abs=0.1)
    assert t.step_ms_mean == pytest.approx(70.0)
    assert t.data_wait_ms_mean == pytest.approx(40.0)
    # the median step says 800 samples/s: the figure the old report gave
    assert t.step_ms_median == 40.0 and (t.step_ms_min, t.step_ms_max) == (40.0, 160.0)
    assert t.step_ms_p10 == 40.0 and t.step_ms_p90 == pytest.approx(160.0)
    assert t.first_half_samples_per_s == t.second_half_samples_per_s == t.samples_per_s


def test_a_step_without_a_sample_count_counts_the_loaders_batch():
    steps = swinging(4)
    steps[0].samples = None
    t = measure(facts(loaders=[loader(batch_size=32)], steps=steps))
    assert t.samples == 128
    assert (
        measure(facts(loaders=[], steps=[StepRecord(0, 10.0, 0.0, False, phase=REF)])).samples_per_s
        is None
    )


def test_without_unprofiled_steps_the_window_is_used_and_says_so():
    window = [StepRecord(i, 50.0, 0.0, True, phase=StepPhase.WINDOW, samples=16) for i in range(4)]
    t = measure(facts(loaders=[loader()], steps=window))
    assert t.source == PROFILED and not t.unprofiled
    assert t.samples_per_s == pytest.approx(320.0)
    assert measure(facts(steps=[])) is None and measure(None) is None


def test_a_loop_that_speeds_up_shows_two_different_halves():
    steps = [StepRecord(i, 100.0 if i < 10 else 50.0, 0.0, False, phase=REF, samples=10)
             for i in range(20)]  # fmt: skip
    t = measure(facts(loaders=[loader()], steps=steps))
    assert (t.first_half_samples_per_s, t.second_half_samples_per_s) == (100.0, 200.0)


def test_the_report_carries_the_figure_and_its_spread():
    f = facts(loaders=[loader()], steps=swinging(12))
    report = diagnosis_to_dict(Diagnosis(profile({"wall_ms": 40.0}, f), []))
    assert report["samples_per_s"] == report["throughput"]["samples_per_s"]
    assert report["throughput"]["steps"] == 12 and report["throughput"]["unprofiled"]


@pytest.mark.slow
def test_the_doctors_figure_is_the_scripts_own(tmp_path):
    """A loop whose steps swing (a slow batch every fourth, main-process loading): the
    doctor's samples/s within 10% of the script's own over the same steps, in the same
    process (so that the other jobs of a shared machine weigh on both alike; the
    side-by-side runs of two processes are benchmarks/doctor_throughput.py)."""
    from conftest import ROOT

    from torchpace.capture import throughput
    from torchpace.capture.runner import CaptureSpec, capture_script

    script = ROOT / "tests" / "planted" / "uneven_batches.py"
    times = tmp_path / "times.txt"
    out = tmp_path / "run"
    out.mkdir()
    args = ["--steps", "300", "--times", str(times)]
    spec = CaptureSpec(str(script), args, out, warmup=2, steps=3, measure_s=1.0)
    f = capture_script(spec).facts
    t = measure(f)
    assert t.unprofiled and t.steps >= throughput.MIN_STEPS
    own = [float(x) for x in times.read_text().split()]
    # the last measured step ended the script inside its optimizer.step(): no line of its own
    measured = [s for s in f.in_phase(REF) if s.index < len(own)]
    assert len(measured) >= t.steps - 1
    doctor_rate = 16 * len(measured) / (sum(s.wall_ms for s in measured) / 1000)
    own_rate = 16 * len(measured) / (sum(own[s.index] for s in measured) / 1000)
    assert doctor_rate == pytest.approx(own_rate, rel=0.10)
    assert t.samples_per_s == pytest.approx(doctor_rate, rel=0.25)  # one step more
