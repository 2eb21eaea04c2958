"""TP201 sync-in-training-loop: CPU-GPU sync inside the training step.

GPU runs only: on a CPU there is nothing to wait for."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class SyncInTrainingLoop(Check):
    """TP201: the host waits for the GPU inside the step (.item(), .cpu(), print(t), ...).

    Each sync is priced by the GPU idle it leaves behind: from where it began to the first
    device op after it returned, when its return found the device idle (doctor/idle.py
    charges that idle to it, data waits apart). In a GPU-bound loop that is the idle after
    the sync drained the queue, until the host has queued work again; in a launch-bound
    loop, where the host is the bottleneck, the sync's own wait is near zero (the device
    finished long before) but every sync still empties the queue, and the device waits
    while the host refills it: that idle, not the wait, is what the sync costs.

    The other bound is the overlap the syncs take away. Without them the host never
    blocks, and the step takes as long as the slower of its two timelines: the host's own
    work (the step minus the time blocked in syncs, W) and the device's (busy, B), so the
    saving is step - max(step - W, B) = min(W, GPU idle). The saving is the larger of the
    two, never more than the GPU's idle.

    ## In a profile (torchpace doctor)

    On GPU runs only (a CPU-only run is never told about syncs), the doctor counts the host
    syncs per step in the trace (`cudaStreamSynchronize`, `cudaDeviceSynchronize`,
    `cudaEventSynchronize`, synchronous `cudaMemcpy`), leaving out the syncs that finish a
    blocking host-to-device copy (TP102/TP103). The capture adds the user's source line of each
    `.item()`, `.cpu()`, `.tolist()`, `nonzero()`, `print(tensor)` and `synchronize()`. ### How
    the saving is estimated: the idle after each sync, or the lost overlap

    Each sync is priced by the GPU idle it leaves behind: from where it began (the op that made
    it, `aten::item`, and the copy to host memory it waits for) to the first device op after it
    returned, when its return finds the device idle (docs/doctor.md, "GPU idle, charged to one
    cause each"). The other bound is the overlap it takes away. Without syncs the host never
    blocks: it launches ahead of the device, and the step takes as long as the slower of its two
    timelines, the host's own work (the step minus the time `W` it spent blocked in the syncs)
    and the device's (its busy time `B`). So

    ```
    saving = min(GPU idle, max(idle after the syncs, step - max(step - W, B)))
           = min(GPU idle, max(idle after the syncs, min(W, GPU idle)))
    ```

    - **GPU-bound loop** (the host far ahead): the host blocks long in each sync while the GPU
      works through the queue; what is lost is the idle after it, until the host has queued work
      again.
    - **Launch-bound loop** (the host is the bottleneck): the device finished long before the
      sync was called, so the host waits ~0 in it (0.03 ms for five `.item()` per step on an
      H100 MLP loop that ran 22% faster without them); each sync still empties the queue, and
      the device idles until the host has launched again: that idle is the cost, not the wait.
    - **A trace without step markers** (the whole trace one "step"): the idle after a sync may
      be anything the script did next (on the shared AlexNet trace: 944.6 ms of idle after five
      syncs, 0.94 ms blocked in them): only the lost overlap counts, 0.94 ms.

    The evidence gives the idle charged to the syncs (`gpu_idle_charged_to_syncs_ms`, and per
    sync). The saving must clear 0.5 ms and 2% of the step, unless the syncs are the largest
    cause of a GPU idle of ≥ 10% of the step, which always gets its finding. It assumes the host
    can run ahead freely once the syncs are gone (the CUDA launch queue holds about a thousand
    launches); a value the loop truly needs on the host each step (a data-dependent branch)
    keeps its sync.

    Checked against an A/B measured by hand on a planted GPU loop of our own
    (`tests/planted/gpu_ab.py --case syncs`: four `.item()` reads and a `nonzero()` per step in
    a launch-bound stack of small layers; `tests/doctor/test_doctor_gpu_ab.py` times it with and
    without the syncs, alternated, and holds TP201 to first place and to a factor of 1.5 of the
    measured saving). The test needs CUDA and skips without it; it has not yet run on a GPU.

    On the unprofiled step: the saving is measured on the device's timeline (its idle, the
    host's wait for it): it is kept in ms and put on the step the job takes without the
    profiler, at most that step's device idle (the unprofiled step less the window's device
    busy time), and its share is of that step (docs/doctor.md, "Priced on the unprofiled step";
    the finding's `basis` says so). In a launch-bound loop the idle after a sync is paced by the
    host's relaunch, which the profiler slows; but the profiled trace also hides the sync's own
    wait, the device's backlog that a host running 5x faster without the profiler runs into at
    every sync. The two err in opposite directions, so the idle is kept, not scaled. On the
    H100 syncs loop of issue 35 the profiler made the launch-bound step ~5x longer: the syncs'
    cost was a small share of that step and ranked low, while they cost 22% of the 14 ms the
    loop takes by itself. The check's floors (0.5 ms, 2%) are of the priced figure too. No
    probe measures it: skipping a `.item()` changes what the script computes or logs, and there
    is no switch that is safe to flip for it.
    """

    code = "TP201"

    # One sync per step (a logged loss) is common and cheap; from one on, the idle it causes
    # is measured and the finding stands or falls with the inherited saving floors.
    MIN_SYNCS_PER_STEP = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        saving = sync_cost_ms(profile)
        if profile.median.syncs < self.MIN_SYNCS_PER_STEP or not self.worth_reporting(
            profile, saving, cost="idle"
        ):
            return []
        return [self.finding(profile)]

    def finding(self, profile: Profile) -> Finding:
        m = profile.median
        syncs, saving = m.syncs, sync_cost_ms(profile)
        idle_after = idle_after_syncs_ms(profile)
        sites = profile.facts.syncs if profile.facts else []
        # a .item() on a CPU tensor (Adam's step counter, say) makes no GPU wait
        sites = sorted((s for s in sites if s.device != "cpu"), key=lambda s: -s.per_step)
        evidence = {
            "syncs_per_step": r(syncs, 1),
            "host_blocked_in_syncs_ms": r(m.sync_wait_ms),
            "gpu_idle_ms": r(m.gpu_idle_ms),
            "gpu_idle_charged_to_syncs_ms": r(idle_after),
            "gpu_idle_per_sync_ms": r(idle_after / syncs, 3) if syncs else 0.0,
            "gpu_busy_ms": r(m.gpu_busy_ms),
        }
        for i, site in enumerate(sites[:3]):
            evidence[f"site_{i + 1}"] = f"{site.kind} at {site.location} ({site.per_step:g}/step)"
        if idle_after >= min(m.sync_wait_ms, m.gpu_idle_ms):
            detail = (
                f"{syncs:.0f} syncs per step each empty the GPU's queue: it then idles "
                f"{idle_after:.1f} ms per step until the host has launched again (the host "
                f"itself waits only {m.sync_wait_ms:.2f} ms in them)"
            )
        else:
            detail = (
                f"{syncs:.0f} syncs per step block the host {m.sync_wait_ms:.1f} ms "
                "that it could spend launching ahead of the GPU"
            )
        return Finding(
            "TP201",
            evidence=evidence,
            saving_ms=saving,
            step_ms=profile.step_ms,
            # the device's idle and the host's wait for the device: device time, which the
            # profiler does not inflate (doctor/pricing.py)
            cost="idle",
            location=sites[0].location if sites else None,
            detail=detail,
            notes=[
                "saving: the larger of the GPU idle from each sync to the next device op "
                "after it (the host refilling an empty queue) and min(host blocked in syncs, "
                "GPU idle) (the overlap lost), at most the GPU idle"
            ],
            fix="keep values on the GPU inside the step (accumulate loss.detach(), log every "
            "N steps with .item() outside the hot path; avoid print(tensor), .cpu(), "
            "nonzero() and data-dependent branches)",
        )


def idle_after_syncs_ms(profile: Profile) -> float:
    """The GPU idle per step charged to the syncs (doctor/idle.py), less that after the
    syncs which finish a blocking copy (the copy findings' business)."""
    m = profile.median
    return max(0.0, m.idle_sync_ms - m.idle_copy_sync_ms)


def sync_cost_ms(profile: Profile) -> float:
    """What removing the syncs saves per step (SyncInTrainingLoop's docstring). On a trace
    without step markers (the whole trace one "step": set-up, timing code, sleeps) the
    idle after a sync may be anything the script did next: only the lost overlap counts."""
    m = profile.median
    if profile.synthetic_steps:
        return min(m.sync_wait_ms, m.gpu_idle_ms)
    return min(m.gpu_idle_ms, max(idle_after_syncs_ms(profile), min(m.sync_wait_ms, m.gpu_idle_ms)))
