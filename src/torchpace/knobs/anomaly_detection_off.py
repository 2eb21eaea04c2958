"""anomaly-detection-off: autograd's anomaly detection off (P13).

Anomaly detection records a traceback for every autograd node and checks each backward
result for NaN: a debugging aid that slows training many times over when left on. The knob
makes ``set_detect_anomaly(...)`` and ``detect_anomaly()`` switch it off, whatever they ask.
"""

from __future__ import annotations

import functools

from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class AnomalyDetectionOff(Knob):
    name = "anomaly-detection-off"
    title = "Autograd anomaly detection off"
    answers = ("TP304",)
    practices = ("P13",)
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        process = ctx.facts.process
        if process is None or not process.anomaly_detection:
            return not_applicable("anomaly detection was off in the script's steps")
        return Plan((True,), "the script trains with torch.autograd anomaly detection on")

    def apply(self, value, runtime) -> str | Notes:
        import torch

        if not value:
            return "nothing done (anomaly-detection-off=false)"
        original = torch.set_anomaly_enabled
        if getattr(original, "_torchpace_off", False):
            return "anomaly detection already forced off"
        notes = Notes(
            "torch.autograd.set_detect_anomaly / detect_anomaly keep anomaly detection off"
        )
        # what the script asked for last, and whether the knob holds it off (a switched
        # trial's reference blocks let the script's own setting through: switch())
        check_nan = torch.is_anomaly_check_nan_enabled()
        self._script_asked = (torch.is_anomaly_enabled(), (check_nan,), {})
        self._holding = True
        knob = self

        # set_detect_anomaly and detect_anomaly (torch/autograd/anomaly_mode.py) both switch
        # the mode through torch.set_anomaly_enabled, looked up at each call; the script's
        # line that asks for it on is recorded (the source edit changes it)
        @functools.wraps(original)
        def set_anomaly_enabled(enabled, *args, **kwargs):
            knob._script_asked = (enabled, args, kwargs)
            if not knob._holding:
                return original(enabled, *args, **kwargs)
            if enabled:
                notes.overridden(f"{runtime.user_location() or '?'}: anomaly detection kept off")
            return original(False, *args, **kwargs)

        set_anomaly_enabled._torchpace_off = True
        set_anomaly_enabled._torchpace_original = original
        torch.set_anomaly_enabled = set_anomaly_enabled
        original(False)
        return notes

    def check(self, value, runtime) -> str | None:
        import torch

        if not value or not torch.is_anomaly_enabled():
            return None
        return ("anomaly detection is on at the timed steps: the script turns it on by a "
                "call torchpace does not see (torch._C._set_anomaly_enabled)")  # fmt: skip

    def switch(self, value, runtime):
        """Off (True), or as the script last asked (False): its set_detect_anomaly(...) and
        detect_anomaly() blocks go through while the knob is switched out."""
        import torch

        if not value or not hasattr(self, "_script_asked"):
            return "anomaly-detection-off was not applied in this process"
        original = torch.set_anomaly_enabled._torchpace_original

        def set_mode(on: bool) -> None:
            self._holding = on
            enabled, args, kwargs = self._script_asked
            if on:
                original(False)
            else:
                original(enabled, *args, **kwargs)

        return set_mode

    def describe(self, value) -> str:
        return "anomaly detection off" if value else "anomaly detection as the script sets it"

    def source_edits(self, value) -> list[SourceEdit]:
        if not value:
            return []
        # set_detect_anomaly(True) -> (False); a `with detect_anomaly():` block is the
        # user's to remove (the doctor's finding TP304 names its line)
        return [
            SourceEdit(
                "call-argument",
                kwargs={"callee": "set_detect_anomaly", "value": False},
                note="a `with torch.autograd.detect_anomaly():` block, if any, is yours to "
                "remove (the doctor's TP304 names its line)",
            )
        ]


KNOB = AnomalyDetectionOff()
