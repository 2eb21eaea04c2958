"""Tune's trials time steps boundary to boundary (capture/boundaries.py, contiguous): what
runs between two boundaries, the capture's own bookkeeping included, is in a step's time,
so the timed steps add up to the loop's time (an untimed gap gave 32 threads on 2 cores
time to settle for free: a trial read 1.1 ms/step where the plain script ran 1.7)."""

import time

from torchpace.capture.boundaries import StepBoundaries
from torchpace.capture.spec import StepOn
from torchpace.facts.run import RunFacts, Status

GAP_S = 0.02


def facts() -> RunFacts:
    return RunFacts(command=[], step_source="manual", optimizers=[], optimizer_steps_per_step=1.0,
                    warmup=0, steps_requested=3, status=Status.RUNNING)  # fmt: skip


def steps(contiguous: bool) -> list[float]:
    times: list[float] = []
    boundaries = None

    def on_step(now: float, late: bool) -> None:
        times.append(now - boundaries.last_boundary)
        time.sleep(GAP_S)  # the capture's bookkeeping at the boundary

    boundaries = StepBoundaries(StepOn.MANUAL, facts(), on_step, contiguous=contiguous)
    for _ in range(4):
        boundaries.manual_step()
    return times[1:]  # each of these followed one bookkeeping gap


def test_contiguous_steps_include_what_ran_between_them():
    assert all(t >= GAP_S for t in steps(contiguous=True))


def test_the_doctor_keeps_its_own_work_out_of_the_steps():
    assert all(t < GAP_S for t in steps(contiguous=False))


def test_a_restart_keeps_one_time_work_out_of_the_next_step():
    times: list[float] = []
    boundaries = None

    def on_step(now: float, late: bool) -> None:
        times.append(now - boundaries.last_boundary)
        time.sleep(GAP_S)
        boundaries.restart_timing()  # the warm-up's end: the process state read

    boundaries = StepBoundaries(StepOn.MANUAL, facts(), on_step, contiguous=True)
    for _ in range(3):
        boundaries.manual_step()
    assert all(t < GAP_S for t in times[1:])
