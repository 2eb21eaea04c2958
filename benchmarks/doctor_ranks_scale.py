"""Does the cross-rank doctor (`torchpace doctor --trace DIR`, one trace per rank) stay linear
in the job's size? Wall time and peak memory on generated per-rank GPU traces, against the
rank count (16, 32, 64 ranks of one size) and the size per rank (16 ranks of growing size).

Each rank's trace is doctor_trace_scale.py's GPU-shaped training step, repeated, with a
DDP-like set of collectives added to every step (ALLREDUCES all-reduce buckets of 25 MB,
record_param_comms around each launch, the NCCL kernel on its own stream) whose times hold
the wait for the last rank (each rank arrives a little later than the one before, in a cycle
of four) and whose clocks are offset rank by rank, as traces of different hosts are. The
doctor then runs in a fresh process (its peak RSS its own):
`python -m torchpace doctor --trace DIR --json OUT`.

    python benchmarks/doctor_ranks_scale.py [--ranks 16,32,64] [--mb 2] \\
        [--sizes 1,2,4,8] [--json OUT]

Sizes are MB of uncompressed JSON per rank. Linear means: seconds per total MB about the
same in every row, and the peak memory about one rank's trace (the doctor keeps one trace
in memory at a time, plus a few numbers per collective of every rank), not the job's.
Run it under `flock /tmp/torchpace-bench.lock`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from doctor_trace_scale import STREAM, TID, _x, step_events

ALLREDUCES = 4  # gradient buckets per step
BUCKET_NELEMS = 25 * (1 << 20) // 4  # DDP's 25 MB default bucket, float32
TRANSFER_US = 400.0  # each all-reduce's own time once every rank has arrived
LATE_US = 150.0  # rank r arrives (r % 4) * LATE_US after the first
NCCL_STREAM = STREAM + 1


def rank_steps(rank: int, ranks: int, steps: int) -> list[dict]:
    """``steps`` training steps of one rank, with their all-reduces, on its own clock."""
    offset = 1_000.0 + 3_700.0 * rank  # the rank's clock against rank 0's
    events: list[dict] = []
    t, corr = offset, 1
    for n in range(steps):
        ev, end, corr = step_events(n, t, corr)
        step = ev[0]  # the ProfilerStep span, which the all-reduces extend
        late = (rank % 4) * LATE_US
        last = 3 * LATE_US if ranks >= 4 else (ranks - 1) * LATE_US
        a = end
        for _ in range(ALLREDUCES):
            ev.append(_x("record_param_comms", "cpu_op", a, 10.0, tid=TID + 1, **{
                "Collective name": "allreduce", "In msg nelems": BUCKET_NELEMS,
                "Out msg nelems": BUCKET_NELEMS, "dtype": "Float", "Group size": ranks,
                "Process Group Name": "0"}))  # fmt: skip
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", a + 2, 5.0, tid=TID + 1,
                         correlation=corr))  # fmt: skip
            start = a + 10 + late
            ev.append(_x("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "kernel",
                         start, (a + 10 + last + TRANSFER_US) - start, tid=NCCL_STREAM, pid=0,
                         device=0, stream=NCCL_STREAM, correlation=corr))  # fmt: skip
            corr += 1
            a += 10 + last + TRANSFER_US + 5
        step["dur"] = a - step["ts"]
        events.extend(ev)
        t = a + 5
    return events


def steps_for(mb: float) -> int:
    probe = rank_steps(0, 16, 1)
    return max(2, int(mb / (len(json.dumps(probe)) / 1e6)))


def write_job(folder: Path, ranks: int, mb: float) -> int:
    """One trace per rank, ``mb`` MB of JSON each; the total uncompressed bytes."""
    folder.mkdir(parents=True)
    steps, total = steps_for(mb), 0
    devices = [{"id": 0, "name": "synthetic", "totalGlobalMem": 80 << 30,
                "computeMajor": 9, "computeMinor": 0}]  # fmt: skip
    for rank in range(ranks):
        data = {"schemaVersion": 1, "deviceProperties": devices,
                "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks},
                "traceEvents": rank_steps(rank, ranks, steps)}  # fmt: skip
        raw = json.dumps(data).encode()
        total += len(raw)
        with gzip.open(folder / f"rank{rank}.json.gz", "wb", compresslevel=1) as f:
            f.write(raw)
    return total


def doctor_run(folder: Path, out: Path) -> tuple[float, float, int, dict | None]:
    """(wall seconds, peak RSS MiB, exit code, the report) of the doctor on the folder. The
    peak is measured by a wrapper process of its own, so that every row's is its own."""
    probe = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, sys.executable, "-m", "torchpace", "doctor", "--trace",
         str(folder), "--json", str(out)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    seconds, peak_kib, code = done.stdout.split()
    report = json.loads(out.read_text()) if out.is_file() else None
    return float(seconds), int(peak_kib) / 1024, int(code), report


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    import torch

    python = platform.python_version()
    return f"{cpu}, {os.cpu_count()} logical cores, Python {python}, torch {torch.__version__}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="16,32,64", help="rank counts at --mb per rank")
    parser.add_argument("--mb", type=float, default=2.0, help="MB of JSON per rank")
    parser.add_argument("--sizes", default="1,2,4,8", help="MB per rank at 16 ranks")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    jobs = [(int(r), args.mb) for r in args.ranks.split(",") if r]
    jobs += [(16, float(s)) for s in args.sizes.split(",") if s and (16, float(s)) not in jobs]
    print(machine())
    print(f"{'ranks':>5} {'MB/rank':>8} {'total MB':>9} {'seconds':>8} {'s/total MB':>10} "
          f"{'peak MiB':>9} {'skew ok':>7}")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (ranks, mb) in enumerate(sorted(jobs, key=lambda j: j[0] * j[1])):
            folder = Path(tmp) / f"job{i}"
            total = write_job(folder, ranks, mb) / 1e6
            seconds, peak, code, report = doctor_run(folder, Path(tmp) / f"report{i}.json")
            # the split found what was planted: the mean rank waits its lateness behind the last
            skew = ((report or {}).get("cross_rank") or {}).get("collective_skew") or []
            late = [(3 - r % 4) * LATE_US for r in range(ranks)]
            expected = ALLREDUCES * sum(late) / ranks / 1000
            ok = bool(skew) and abs(skew[0]["wait_ms_per_step"] - expected) < 0.01 * expected
            rows.append({"ranks": ranks, "mb_per_rank": mb, "total_mb": round(total, 1),
                         "seconds": round(seconds, 2), "s_per_total_mb": round(seconds / total, 3),
                         "peak_mib": round(peak), "exit_code": code, "skew_found": ok})  # fmt: skip
            failed = "" if code == 0 else f"  exit {code}"
            print(f"{ranks:5d} {mb:8g} {total:9.1f} {seconds:8.2f} {seconds / total:10.3f} "
                  f"{peak:9.0f} {ok!s:>7}{failed}")  # fmt: skip
            for p in folder.iterdir():
                p.unlink()
    if args.json:
        args.json.write_text(json.dumps(
            {"benchmark": "doctor_ranks_scale", "machine": machine(), "rows": rows}, indent=2
        ))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
