"""Builders of small synthetic Chrome-trace events, shaped like torch.profiler's (Kineto's)
output, for edge cases the real traces do not cover. Times in microseconds."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID = 100, 100


def span(name, ts, dur, cat="cpu_op", tid=TID, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": PID,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def step(n, ts, dur):
    return span(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def runtime(name, ts, dur, correlation):
    return span(name, ts, dur, cat="cuda_runtime", correlation=correlation)


def kernel(name, ts, dur, correlation, device=0, stream=7):
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream, "correlation": correlation},
    }


def memcpy(direction, host, ts, dur, nbytes, correlation, device=0):
    ends = f"{host} -> Device" if direction == "HtoD" else f"Device -> {host}"
    return {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": f"Memcpy {direction} ({ends})",
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": 7, "correlation": correlation, "bytes": nbytes},
    }


def memory(ts, allocated, device_type=0, device_id=-1):
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "s": "t",
        "name": "[memory]",
        "pid": PID,
        "tid": TID,
        "ts": ts,
        "args": {
            "Total Allocated": allocated,
            "Total Reserved": 0,
            "Device Type": device_type,
            "Device Id": device_id,
        },
    }


def write(path: Path, events: list[dict], devices: list[dict] | None = None) -> Path:
    data = {"schemaVersion": 1, "traceEvents": events}
    if devices is not None:
        data["deviceProperties"] = devices
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def a100(memory_bytes: int = 40 * 2**30) -> list[dict]:
    return [
        {
            "id": 0,
            "name": "NVIDIA A100",
            "totalGlobalMem": memory_bytes,
            "computeMajor": 8,
            "computeMinor": 0,
        }
    ]
