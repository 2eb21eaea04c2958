"""`torchpace launch` against plain torchrun and a single process, side by side in one run.

The same CPU DDP job (examples/ddp_with_helpers.py: a small conv model, gloo) started:
  python   one process, torch's default threads (the baseline that needs no launcher)
  torchrun N processes; torchrun sets OMP_NUM_THREADS=1 for each (on 16 cores with
           2 processes, 14 cores idle) and binds nothing
  launch   N processes through torchpace launch: cores // N threads each, disjoint
           cores, allocator / Intel OpenMP where installed
Each reports its global samples/s over the timed steps; the configurations are run in
turn, round after round, so that drift on the machine spreads over all of them, and the
medians are compared. Figures are written as JSON with --out.

    python benchmarks/launch_cpu.py [--nproc 2] [--rounds 3] [--steps 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_with_helpers.py"


def commands(nproc: int, job: list[str]) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python": [py, *job],
        "torchrun": [py, "-m", "torch.distributed.run", "--standalone",
                     f"--nproc-per-node={nproc}", *job],
        "launch": [py, "-m", "torchpace", "launch", f"--nproc-per-node={nproc}", *job],
    }  # fmt: skip


def run_once(command: list[str], report: Path, env: dict) -> float:
    report.unlink(missing_ok=True)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(report.read_text())["samples_per_s"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU job even on a GPU machine
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        job = [str(EXAMPLE), "--steps", str(args.steps), "--batch-size", str(args.batch_size),
               "--micro-steps", "1", "--val-size", "64", "--report", str(report)]  # fmt: skip
        runs: dict[str, list[float]] = {name: [] for name in commands(args.nproc, job)}
        for r in range(args.rounds):
            for name, command in commands(args.nproc, job).items():
                runs[name].append(run_once(command, report, env))
                print(f"round {r + 1} {name:8s} {runs[name][-1]:8.1f} samples/s", flush=True)
    medians = {name: statistics.median(v) for name, v in runs.items()}
    cores = len(os.sched_getaffinity(0))
    print(f"\n{cores} usable CPUs, {args.nproc} processes, median of {args.rounds} rounds:")
    for name, value in medians.items():
        print(f"  {name:8s} {value:8.1f} samples/s")
    ratios = {
        "launch / torchrun": medians["launch"] / medians["torchrun"],
        "launch / python": medians["launch"] / medians["python"],
    }
    for name, value in ratios.items():
        print(f"  {name}: {value:.2f}x")
    if args.out:
        args.out.write_text(json.dumps(
            {"usable_cpus": cores, "nproc": args.nproc, "runs": runs, "medians": medians,
             "ratios": ratios}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
