"""The knob registry: every name a finding, a probe, the catalog or a config may use.

A name maps to the module that implements it (``KNOB`` in that module). A finding that names
a knob not listed here fails at construction, and a test checks that every listed module
exists and declares the same name: a renamed knob cannot leave a check pointing nowhere.
Order is the order tune tries them in: cheap, safe and usually large first.
"""

from __future__ import annotations

import importlib

from torchpace.knobs.base import Knob

_MODULES = {
    "num-workers": "num_workers",
    "persistent-workers": "persistent_workers",
    "prefetch-factor": "prefetch_factor",
    "pin-memory": "pin_memory",
    "device-transforms": "device_transforms",
    "threads": "threads",
    "host-malloc": "host_malloc",
    "anomaly-detection-off": "anomaly_detection_off",
    "zero-grad-set-to-none": "zero_grad_set_to_none",
    "cudnn-benchmark": "cudnn_benchmark",
    "matmul-precision": "matmul_precision",
    "fused-optimizer": "fused_optimizer",
    "amp": "amp",
    "channels-last": "channels_last",
    "compile": "compile",
    "expandable-segments": "expandable_segments",
    "ddp-bucket-cap-mb": "ddp_bucket_cap_mb",
    "ddp-gradient-as-bucket-view": "ddp_gradient_as_bucket_view",
    "ddp-static-graph": "ddp_static_graph",
    "ddp-broadcast-buffers": "ddp_broadcast_buffers",
    "ddp-comm-hook": "ddp_comm_hook",
    "batch-size": "batch_size",
    "nproc-per-node": "nproc_per_node",
}
NAMES: tuple[str, ...] = tuple(_MODULES)


def is_knob(name: str) -> bool:
    return name in _MODULES


def get(name: str) -> Knob:
    if name not in _MODULES:  # a config's keys are checked before this (knobs/config.py)
        raise KeyError(f"no tune knob named {name!r}; the knobs are: {', '.join(NAMES)}")
    return importlib.import_module(f"torchpace.knobs.{_MODULES[name]}").KNOB


def apply_all(config: dict, runtime, make_record) -> list:
    """Applies a configuration's knobs inside the user's process, in registry order (a
    knob that builds on another, like persistent workers on workers, comes after it).

    ``make_record(name, value, detail)`` builds each knob's record (the capture's
    KnobRecord: this package stays below capture, which imports it, never the other way).
    A knob whose apply returns Notes keeps its record's detail up to date as its patches act.
    """
    from torchpace.knobs.notes import Notes

    records = []
    for name in sorted(config, key=NAMES.index):
        detail = get(name).apply(config[name], runtime) or ""
        record = make_record(name, config[name], str(detail))
        if isinstance(detail, Notes):  # what the knob's patches do once the script runs
            detail.bind(record)
        records.append(record)
    return records
