"""TP501 data-parallel: nn.DataParallel instead of DistributedDataParallel."""

from __future__ import annotations

from torchpace.doctor.checks._environment import _visible_gpus
from torchpace.doctor.checks.base import Check
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class DataParallelUsed(Check):
    """TP501: nn.DataParallel (one process, threads, replicas copied every step).

    On one visible GPU DataParallel calls the module directly (no replicas, no scatter):
    it costs nothing, and the finding is information about what it will cost on several.

    ## In a profile (torchpace doctor)

    The capture records every model wrapped in `nn.DataParallel` (and where) and how many CUDA
    devices the process sees. On **one visible GPU** DataParallel calls the module directly (no
    replicas, no scatter): it costs nothing measurable (ResNet-50 on one H100: 70.9 ms/step with
    it, 70.8 without), so the doctor reports TP501 as information (severity low, saving 0) that
    says what it will cost on several GPUs. With several visible GPUs (or when the count is
    unknown) it is medium, with the wrapper's source line; the doctor does not estimate a saving
    from one process's profile.
    """

    code = "TP501"

    def run(self, profile: Profile) -> list[Finding]:
        wrappers = profile.facts.wrappers if profile.facts else []
        dp = [w for w in wrappers if w.kind == "DataParallel"]
        if not dp:
            return []
        devices = _visible_gpus(profile)
        evidence = {"wrapper": "nn.DataParallel", "wrapped_models": len(dp)}
        if devices is not None:
            evidence["visible_gpus"] = devices
        single = devices is not None and devices <= 1
        fix = (
            "DistributedDataParallel, one process per GPU, started with torchrun "
            "(`torchpace launch`)"
        )
        if single:
            return [
                Finding(
                    "TP501",
                    evidence=evidence,
                    severity="low",
                    saving_ms=0.0,
                    step_ms=profile.step_ms,
                    location=dp[0].location,
                    detail="nn.DataParallel on one visible GPU calls the model directly: no "
                    "cost here; on several GPUs it replicates the model and scatters the "
                    "batch from one Python process every step",
                    fix=f"before scaling to several GPUs: {fix}",
                    notes=[
                        "information, not a cost: nothing to gain on this one GPU; with N "
                        "GPUs DataParallel's per-step replicate/scatter/gather and the GIL "
                        "typically leave it well short of N x, where DDP scales close to it"
                    ],
                )
            ]
        return [
            Finding(
                "TP501",
                evidence=evidence,
                severity="medium",
                location=dp[0].location,
                detail="nn.DataParallel replicates the model and scatters inputs every step "
                "from one Python process",
                fix=fix,
                notes=["the saving is not estimated from one process's profile"],
            )
        ]
