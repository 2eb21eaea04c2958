"""CPU-GPU synchronisation: TP201. GPU runs only: on a CPU there is nothing to wait for."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class SyncInTrainingLoop(Check):
    """TP201: the host waits for the GPU inside the step (.item(), .cpu(), print(t), ...).

    The cost is not the host's wait (the GPU is busy meanwhile) but the device idle after
    each sync: its queue is empty until the CPU launches again. That idle is the saving.
    """

    # One sync per step (a logged loss) is common and cheap; from one on, the idle it causes
    # is measured and the finding stands or falls with the inherited saving floors.
    MIN_SYNCS_PER_STEP = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        syncs = profile.median.syncs
        saving = profile.median.sync_idle_ms
        if syncs < self.MIN_SYNCS_PER_STEP or not self.worth_reporting(profile, saving):
            return []
        sites = profile.facts.syncs if profile.facts else []
        # a .item() on a CPU tensor (Adam's step counter, say) makes no GPU wait
        sites = sorted((s for s in sites if s.device != "cpu"), key=lambda s: -s.per_step)
        evidence = {
            "syncs_per_step": r(syncs, 1),
            "host_wait_ms": r(profile.median.sync_wait_ms),
            "gpu_idle_after_syncs_ms": r(saving),
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
                detail=f"{syncs:.0f} syncs per step leave the GPU idle {saving:.1f} ms",
                fix="keep values on the GPU inside the step (accumulate loss.detach(), log every "
                "N steps with .item() outside the hot path; avoid print(tensor), .cpu(), "
                "nonzero() and data-dependent branches)",
            )
        ]


CHECKS = [SyncInTrainingLoop()]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
