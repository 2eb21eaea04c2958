"""The straggler rule (doctor/ranks.py) on hand-made per-step figures: a rank is a straggler
only when its extra work is beyond the job's own noise: steady, in every step, and large."""

import pytest

from torchpace.doctor.ranks import RankFigures, cross_rank


def rank(number, work, collective=10.0):
    steps = tuple(w + collective for w in work)
    return RankFigures(
        rank=number, path=f"rank{number}.json", step_ms=steps,
        median_step_ms=sorted(steps)[len(steps) // 2], collective_ms=collective,
        collective_on="cpu", work_ms=sorted(work)[len(work) // 2], work_per_step=tuple(work),
        allreduce_calls=1, synced_backwards=1, comm_share_of_gpu=None, comm_overlap=None,
        comm_overlap_per_step=(),
    )  # fmt: skip


def test_a_rank_that_does_more_work_every_step_is_the_straggler():
    cross = cross_rank([rank(0, [40, 41, 39, 40, 42, 40]), rank(1, [120, 118, 125, 121, 119, 122])])
    assert cross.straggler == 1 and cross.straggler_excess_ms == 81


@pytest.mark.parametrize(
    "work0, work1",
    [
        # a loaded machine: rank 0 descheduled for tens of ms in most steps, not all
        ([70, 75, 40, 72, 68, 41], [40, 41, 39, 40, 42, 40]),
        # large in the median, but erratic from step to step: noise, not a cause
        ([60, 100, 58, 140, 61, 130], [40, 41, 39, 40, 42, 40]),
        # one step: nothing says it is steady
        ([90], [40]),
        # two steps, far apart
        ([60, 140], [40, 41]),
        # steady but small: 5 ms on a 50 ms step
        ([45, 46, 45, 44, 46, 45], [40, 41, 39, 40, 42, 40]),
    ],
)
def test_noise_of_the_job_is_not_a_straggler(work0, work1):
    assert cross_rank([rank(0, work0), rank(1, work1)]).straggler is None
