"""The doctor's speed line names the steps it timed: unprofiled ones, or the profiled ones
with the reason no unprofiled step was timed (issue 36)."""

from torchpace.report.doctor_terminal import _throughput_line
from torchpace.report.model import Throughput


def throughput(unprofiled: bool, steps: int) -> Throughput:
    return Throughput(source="x", steps=steps, seconds=0.5, step_ms_mean=100.0,
                      data_wait_ms_mean=0.0, samples=32 * steps, samples_per_s=320.0,
                      step_ms_p10=90.0, step_ms_median=100.0, step_ms_p90=110.0,
                      step_ms_min=90.0, step_ms_max=110.0, first_half_samples_per_s=None,
                      second_half_samples_per_s=None, unprofiled=unprofiled)  # fmt: skip


def test_unprofiled_steps_are_named_as_such():
    line = _throughput_line(throughput(True, 45))
    assert "ms/step mean over 45 unprofiled steps" in line and "profiler" not in line


def test_a_script_that_ended_first_says_no_unprofiled_step_was_timed():
    line = _throughput_line(throughput(False, 5))
    assert "ms/step mean over 5 profiled steps" in line
    assert "no unprofiled step was timed: the script ended before them" in line
