"""TP101 dataloader-without-workers: Data loaded in the main process."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, main_loader, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class DataLoaderWithoutWorkers(Check):
    """TP101: the loop waits for batches loaded in its own process (num_workers=0).

    ## In a profile (torchpace doctor)

    The doctor measures the time the loop's thread spends inside DataLoader `__next__` in each
    profiled step (the `enumerate(DataLoader)#..._SingleProcessDataLoaderIter.__next__` spans of
    the trace) and reads the loader's settings from the run (`num_workers`, `pin_memory`,
    `persistent_workers`, `prefetch_factor`, batch size, where it was built). It reports TP101
    when `num_workers=0` and the data wait is at least 10% of the step and at least 1 ms. Wait
    and step are the **means** over the unprofiled steps the headline samples/s is measured on
    (`--measure`, see docs/doctor.md), not the profiled window's medians: the profiler slows
    op-heavy loading, and a loop whose batches come at uneven cost waits as long as their mean
    says (a trace without run facts falls back to the profiled steps' medians). The estimated
    saving is up to the whole data wait: workers can hide loading entirely only while free cores
    remain for them, so it is an upper bound; `torchpace tune` measures the real gain.
    """

    code = "TP101"

    # Waiting on data for a tenth of the step is where workers start paying for their
    # start-up and memory; below it the loader is not the bottleneck.
    MIN_WAIT_SHARE = 0.10
    # ...and an absolute floor so that microsecond-scale toy loops are not flagged.
    MIN_WAIT_MS = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        wait, step = profile.median.data_wait_ms, profile.step_ms
        measured = profile.throughput
        unprofiled = measured is not None and measured.unprofiled
        if unprofiled:
            # The same steps as the headline samples/s, and means as it is: the profiler
            # slows op-heavy loading most, and a loop whose batches come at uneven cost
            # waits for them as much as their mean says, not their median.
            wait, step = measured.data_wait_ms_mean, measured.step_ms_mean
        loader = main_loader(profile)
        in_process = (loader is not None and loader.num_workers == 0) or (
            loader is None and profile.loader_iter == "_SingleProcessDataLoaderIter"
        )
        if not in_process or wait < self.MIN_WAIT_MS:
            return []
        if not profile.synthetic_steps and step and wait / step < self.MIN_WAIT_SHARE:
            return []
        evidence = {"data_wait_ms": r(wait), "step_ms": r(step), "num_workers": 0}
        if unprofiled:
            evidence["measured_on"] = f"mean of {measured.steps} unprofiled steps"
        if loader is not None and loader.batch_size:
            evidence["batch_size"] = loader.batch_size
        return [
            Finding(
                "TP101",
                evidence=evidence,
                saving_ms=wait,
                step_ms=step,
                location=loader.location if loader else None,
                knob="num-workers",
                cost="unprofiled" if unprofiled else "host",
                detail=f"the loop waits {wait:.1f} ms per step for batches built in the main "
                f"process ({100 * wait / step:.0f}% of the step)",
                fix="DataLoader(..., num_workers=N, persistent_workers=True, pin_memory=True on "
                "GPU): start with N = usable cores - 1 and measure (`torchpace tune`)",
                notes=[
                    "saving is an upper bound: workers hide loading only while free cores "
                    "remain for them; each worker holds a copy of the dataset object"
                ],
            )
        ]
