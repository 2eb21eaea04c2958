"""CPU-GPU synchronisation: TP201. GPU runs only: on a CPU there is nothing to wait for."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class SyncInTrainingLoop(Check):
    """TP201: the host waits for the GPU inside the step (.item(), .cpu(), print(t), ...).

    The cost is the overlap the syncs take away. Without them the host never blocks, and
    the step takes as long as the slower of its two timelines: the host's own work (the
    step minus the time blocked in syncs, W) and the device's (busy, B). So the saving is

        step - max(step - W, B) = min(W, GPU idle)

    In a GPU-bound loop (the host far ahead) a sync's cost is the idle after it, until the
    host has queued work again; in a loop whose host launches barely ahead of the device,
    each sync drains the queue and the device then waits for every launch of the next
    phase: the host's blocked time is what it could have spent launching ahead. The idle
    doctor/idle.py charges to the syncs is reported beside it.
    """

    # One sync per step (a logged loss) is common and cheap; from one on, the idle it causes
    # is measured and the finding stands or falls with the inherited saving floors.
    MIN_SYNCS_PER_STEP = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        syncs = profile.median.syncs
        m = profile.median
        saving = min(m.sync_wait_ms, m.gpu_idle_ms)
        if syncs < self.MIN_SYNCS_PER_STEP or not self.worth_reporting(profile, saving):
            return []
        sites = profile.facts.syncs if profile.facts else []
        # a .item() on a CPU tensor (Adam's step counter, say) makes no GPU wait
        sites = sorted((s for s in sites if s.device != "cpu"), key=lambda s: -s.per_step)
        evidence = {
            "syncs_per_step": r(syncs, 1),
            "host_blocked_in_syncs_ms": r(m.sync_wait_ms),
            "gpu_idle_ms": r(m.gpu_idle_ms),
            "gpu_idle_charged_to_syncs_ms": r(max(0.0, m.idle_sync_ms - m.idle_copy_sync_ms)),
            "gpu_busy_ms": r(m.gpu_busy_ms),
        }
        for i, site in enumerate(sites[:3]):
            evidence[f"site_{i + 1}"] = f"{site.kind} at {site.location} ({site.per_step:g}/step)"
        return [
            Finding(
                "TP201",
                evidence=evidence,
                saving_ms=saving,
                step_ms=profile.step_ms,
                location=sites[0].location if sites else None,
                detail=f"{syncs:.0f} syncs per step block the host {m.sync_wait_ms:.1f} ms "
                "that it could spend launching ahead of the GPU",
                notes=[
                    "saving: min(host blocked in syncs, GPU idle): without syncs the step "
                    "takes the longer of the host's own work and the GPU's busy time"
                ],
                fix="keep values on the GPU inside the step (accumulate loss.detach(), log every "
                "N steps with .item() outside the hot path; avoid print(tensor), .cpu(), "
                "nonzero() and data-dependent branches)",
            )
        ]


CHECKS = [SyncInTrainingLoop()]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
