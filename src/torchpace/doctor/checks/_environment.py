"""What the environment checks share (doctor/checks/environment.py lists them)."""

from __future__ import annotations

from torchpace.doctor.profile import Profile


def _visible_gpus(profile: Profile) -> int | None:
    state = profile.process
    if state is not None and state.cuda_devices is not None:
        return state.cuda_devices
    return None


COMM_BOUND_FIX = (
    "communicate less per sample (a larger per-GPU batch, accumulation under no_sync), let "
    "buckets reduce during the backward (bucket_cap_mb, gradient_as_bucket_view), compress "
    "gradients (DDP's bf16/fp16 compress hook), and check the interconnect (NCCL_DEBUG=INFO: "
    "NVLink/InfiniBand or sockets?)"
)


def _thread_notes(probe, saving) -> list[str]:
    if probe is None:
        return ["no A/B probe ran: the saving is not estimated"]
    if not saving:
        return [
            "the probe measured no gain in this single process; the cost appears with "
            "several processes or DataLoader workers per machine"
        ]
    return ["saving measured by setting threads to the usable cores for a few steps"]
