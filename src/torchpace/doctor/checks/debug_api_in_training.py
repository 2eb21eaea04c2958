"""TP304 debug-api-in-training: Debug API left on in training."""

from __future__ import annotations

from torchpace.doctor.checks._compute import (
    probe_saving,
)
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class AnomalyDetectionOn(Check):
    """TP304: torch.autograd anomaly detection left on in a training run.

    ## In a profile (torchpace doctor)

    The capture reads `torch.is_anomaly_enabled()` in the user's process. When anomaly detection
    is on, it switches it off for a few steps inside the profiling window (an A/B probe) and
    records both median step times; the doctor's estimated saving is that measured difference.
    Without a probe the finding is reported with its evidence and no saving.
    """

    code = "TP304"

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or not state.anomaly_detection:
            return []
        saving, probe = probe_saving(profile, "anomaly-detection-off")
        evidence: dict = {"anomaly_detection": "on"}
        if probe is not None:
            evidence |= {
                "step_ms_on": r(probe.baseline_ms),
                "step_ms_off": r(probe.probe_ms),
                "probe_steps": probe.steps,
            }
        return [
            Finding(
                "TP304",
                evidence=evidence,
                saving_ms=saving,
                step_ms=probe.baseline_ms if probe else profile.step_ms,
                severity=None if saving is not None else "medium",
                cost="unprofiled" if probe else "host",
                knob="anomaly-detection-off",
                detail="torch.autograd.set_detect_anomaly(True) records a traceback for every "
                "op and checks every gradient for NaN",
                fix="remove set_detect_anomaly(True) / detect_anomaly() from the training run; "
                "turn it on only while hunting a NaN",
                notes=["saving measured by switching it off for a few steps in the window"]
                if probe
                else ["no A/B probe ran: the saving is not estimated"],
            )
        ]
