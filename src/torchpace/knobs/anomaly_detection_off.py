"""anomaly-detection-off: autograd's anomaly detection off (P13).

Anomaly detection records a traceback for every autograd node and checks each backward
result for NaN: a debugging aid that slows training many times over when left on. The knob
makes ``set_detect_anomaly(...)`` and ``detect_anomaly()`` switch it off, whatever they ask.
"""

from __future__ import annotations

import functools

from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable


class AnomalyDetectionOff(Knob):
    name = "anomaly-detection-off"
    title = "Autograd anomaly detection off"
    answers = ("TP304",)
    practices = ("P13",)

    def plan(self, ctx: TuneContext) -> Plan:
        process = ctx.facts.process
        if process is None or not process.anomaly_detection:
            return not_applicable("anomaly detection was off in the script's steps")
        return Plan((True,), "the script trains with torch.autograd anomaly detection on")

    def apply(self, value, runtime) -> str:
        import torch

        if not value:
            return "nothing done (anomaly-detection-off=false)"
        original = torch.set_anomaly_enabled
        if getattr(original, "_torchpace_off", False):
            return "anomaly detection already forced off"

        # set_detect_anomaly and detect_anomaly (torch/autograd/anomaly_mode.py) both switch
        # the mode through torch.set_anomaly_enabled, looked up at each call
        @functools.wraps(original)
        def set_anomaly_enabled(enabled, *args, **kwargs):
            return original(False, *args, **kwargs)

        set_anomaly_enabled._torchpace_off = True
        torch.set_anomaly_enabled = set_anomaly_enabled
        original(False)
        return "torch.autograd.set_detect_anomaly / detect_anomaly keep anomaly detection off"

    def describe(self, value) -> str:
        return "anomaly detection off" if value else "anomaly detection as the script sets it"

    # No edit: the call to remove may be anywhere (or be a context manager); the doctor's
    # finding TP304 names its line.


KNOB = AnomalyDetectionOff()
