"""Does `torchpace doctor --trace` stay linear in the trace's size? Time and peak memory on
generated GPU-shaped traces of growing size (the same step, repeated).

Each step of the synthetic trace holds what a torch.profiler trace of a small CUDA training
step holds: a ProfilerStep span, a DataLoader fetch, forward ops with their kernel launches
(runtime call + kernel, by correlation id), a pageable host-to-device copy and the sync that
finishes it, backward autograd functions, the optimizer's span, and [memory] samples. The
trace is written as .json.gz, then the doctor analyses it in a fresh process (so that the
peak RSS is its own): `python -m torchpace doctor --trace FILE --json OUT`.

    python benchmarks/doctor_trace_scale.py [--sizes 3,6,12,24,48] [--json OUT]

Sizes are MB of uncompressed JSON. Linear means: seconds per MB about the same at every size
(the issue's quadratic version took 0.4/0.8/2.5/9.9 s at 3/6/12/24 MB). Target: a 200 MiB
trace (torchpace's own largest) in well under two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS_PER_STEP = 40  # forward ops, each with one kernel launch; as many backward functions
PID, TID, STREAM = 100, 100, 7


def _x(name, cat, ts, dur, tid=TID, pid=PID, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
            "dur": dur, "args": args}  # fmt: skip


def step_events(n: int, t0: float, corr0: int) -> tuple[list[dict], float, int]:
    """One training step's events from time t0 (us); (events, the step's end, next corr)."""
    ev: list[dict] = []
    t, corr = t0, corr0
    start = t
    ev.append(_x(f"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__#{n}",
                 "user_annotation", t, 300.0))  # fmt: skip
    t += 310
    ev.append(_x("aten::to", "cpu_op", t, 60.0))
    ev.append(_x("cudaMemcpyAsync", "cuda_runtime", t + 5, 40.0, correlation=corr))
    ev.append(_x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", t + 10, 30.0, tid=STREAM,
                 pid=0, device=0, stream=STREAM, correlation=corr, bytes=1 << 20))  # fmt: skip
    ev.append(_x("cudaStreamSynchronize", "cuda_runtime", t + 46, 10.0, correlation=corr + 1))
    corr += 2
    t += 70
    for i in range(OPS_PER_STEP):  # forward
        ev.append(_x("aten::linear", "cpu_op", t, 18.0, **{"Input Dims": [[64, 128]]}))
        ev.append(_x("aten::addmm", "cpu_op", t + 2, 14.0))
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 4, 6.0, correlation=corr))
        ev.append(_x(f"ampere_sgemm_{i % 4}", "kernel", t + 12, 9.0, tid=STREAM, pid=0,
                     device=0, stream=STREAM, correlation=corr))  # fmt: skip
        ev.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                   "pid": PID, "tid": TID, "ts": t + 3,
                   "args": {"Total Allocated": 1000 * i, "Total Reserved": 1 << 24,
                            "Device Type": 1, "Device Id": 0}})  # fmt: skip
        corr += 1
        t += 20
    for i in range(OPS_PER_STEP):  # backward, on autograd's thread
        ev.append(_x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", t, 18.0,
                     tid=TID + 1))  # fmt: skip
        ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 4, 6.0, tid=TID + 1,
                     correlation=corr))  # fmt: skip
        ev.append(_x(f"ampere_sgemm_bw_{i % 4}", "kernel", t + 12, 9.0, tid=STREAM, pid=0,
                     device=0, stream=STREAM, correlation=corr))  # fmt: skip
        corr += 1
        t += 20
    ev.append(_x("Optimizer.step#SGD.step", "user_annotation", t, 200.0))
    ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 10, 6.0, correlation=corr))
    ev.append(_x("multi_tensor_apply_kernel", "kernel", t + 20, 50.0, tid=STREAM, pid=0,
                 device=0, stream=STREAM, correlation=corr))  # fmt: skip
    corr += 1
    t += 210
    ev.insert(0, _x(f"ProfilerStep#{n}", "user_annotation", start, t - start))
    return ev, t + 5, corr


def synthetic_trace(target_mb: float) -> dict:
    """A trace of about ``target_mb`` MB of JSON (uncompressed)."""
    probe, _, _ = step_events(0, 0.0, 1)
    per_step = len(json.dumps(probe)) / 1e6
    steps = max(1, int(target_mb / per_step))
    events: list[dict] = []
    t, corr = 1_000.0, 1
    for n in range(steps):
        ev, t, corr = step_events(n, t, corr)
        events.extend(ev)
    devices = [{"id": 0, "name": "synthetic", "totalGlobalMem": 80 << 30,
                "computeMajor": 9, "computeMinor": 0}]  # fmt: skip
    return {"schemaVersion": 1, "deviceProperties": devices, "traceEvents": events}


def write_trace(path: Path, target_mb: float) -> tuple[int, int]:
    """(uncompressed bytes, steps)."""
    data = synthetic_trace(target_mb)
    raw = json.dumps(data).encode()
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(raw)
    steps = sum(1 for e in data["traceEvents"] if e["name"].startswith("ProfilerStep#"))
    return len(raw), steps


def doctor_seconds(trace: Path, out: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of `torchpace doctor --trace` on it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "torchpace", "doctor", "--trace", str(trace), "--json", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
    # ru_maxrss of children is the largest child so far: sizes run in growing order
    return seconds, max(peak, before) / 1024, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3,6,12,24,48", help="MB of JSON, comma-separated")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    sizes = sorted(float(s) for s in args.sizes.split(","))
    rows = []
    print(f"{'MB':>7} {'steps':>6} {'events':>9} {'seconds':>8} {'s/MB':>6} {'peak MiB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            trace = Path(tmp) / f"trace_{mb:g}.json.gz"
            nbytes, steps = write_trace(trace, mb)
            events = steps * (len(step_events(0, 0.0, 1)[0]))
            seconds, peak, code = doctor_seconds(trace, Path(tmp) / "report.json")
            real_mb = nbytes / 1e6
            rows.append({"mb": round(real_mb, 1), "steps": steps, "events": events,
                         "seconds": round(seconds, 2), "peak_mib": round(peak),
                         "exit_code": code})  # fmt: skip
            failed = "" if code == 0 else f"  exit {code}"
            print(f"{real_mb:7.1f} {steps:6d} {events:9d} {seconds:8.2f} "
                  f"{seconds / real_mb:6.3f} {peak:9.0f}{failed}")  # fmt: skip
            trace.unlink()
    if args.json:
        args.json.write_text(
            json.dumps({"benchmark": "doctor_trace_scale", "rows": rows}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
