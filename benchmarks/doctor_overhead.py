"""What `torchpace doctor` costs the job it measures, side by side in one run.

1. Steps outside the capture window (hooks installed, profiler off) under doctor vs the plain
   script: the example prints its own per-step time in both, and the same step indices are
   compared. Target: ratio <= 1.05.
2. The capture window's own overhead: profiled steps vs the unprofiled reference steps the
   capture takes after the window (its floor of steps: --measure 0), in the same process.

Runs are interleaved (plain, doctor, plain, doctor, ...) so that machine drift cancels.

    python benchmarks/doctor_overhead.py [--rounds 2] [--steps 40]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from torchpace.capture.runner import CaptureSpec, capture_script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fake_cifar_resnet.py"
STEP_LINE = re.compile(r"^step +(\d+) +([\d.]+) ms/step", re.M)
TARGET_OUTSIDE_RATIO = 1.05
WARMUP, WINDOW = 3, 3


def example_args(steps: int) -> list[str]:
    return ["--image-size", "32", "--dataset-size", "4096", "--steps", str(steps),
            "--print-every", "1"]  # fmt: skip


def step_times(stdout: str) -> dict[int, float]:
    return {int(i): float(ms) for i, ms in STEP_LINE.findall(stdout)}


def plain_run(steps: int) -> dict[int, float]:
    out = subprocess.run([sys.executable, str(EXAMPLE), *example_args(steps)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return step_times(out)


def doctor_run(steps: int) -> tuple[dict[int, float], list[float], list[float], int]:
    """The example under capture with --continue; its stdout is captured through a file."""
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp) / "run"
        out_dir.mkdir()
        log = Path(tmp) / "stdout.txt"
        spec = CaptureSpec(str(EXAMPLE), example_args(steps), out_dir, warmup=WARMUP,
                           steps=WINDOW, continue_after=True, probes=True,
                           measure_s=0.0)  # fmt: skip
        with open(log, "w") as f:
            saved = sys.stdout.fileno()
            import os

            dup = os.dup(saved)
            os.dup2(f.fileno(), saved)  # the child inherits our stdout
            try:
                result = capture_script(spec)
            finally:
                os.dup2(dup, saved)
                os.close(dup)
        facts = result.facts
        window = [s.wall_ms for s in facts.steps if s.phase == "window"]
        reference = [s.wall_ms for s in facts.steps if s.phase == "reference"]
        done = max(s.index for s in facts.steps) + 1  # the first step after the capture
        return step_times(log.read_text()), window, reference, done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    # Outside the window: warm-up steps after the first, and every step after the capture
    # (window, settling and reference steps) is done.
    plain, doctor, window, reference = [], [], [], []
    for _ in range(args.rounds):
        p_times = plain_run(args.steps)
        d_times, w, r, done = doctor_run(args.steps)
        outside = [i for i in range(1, args.steps) if i < WARMUP or i >= done + 1]
        plain += [p_times[i] for i in outside if i in p_times]
        doctor += [d_times[i] for i in outside if i in d_times]
        window += w
        reference += r
    outside_ratio = statistics.median(doctor) / statistics.median(plain)
    window_ratio = statistics.median(window) / statistics.median(reference)
    print(f"example: {EXAMPLE.name} {' '.join(example_args(args.steps))}, "
          f"{args.rounds} interleaved rounds")  # fmt: skip
    print(f"{'measure':44s} {'median ms':>10s} {'ratio':>7s}")
    print(f"{'plain script, steps outside the window':44s} {statistics.median(plain):10.1f}")
    print(f"{'under doctor, same steps':44s} {statistics.median(doctor):10.1f} "
          f"{outside_ratio:7.3f}  (target <= {TARGET_OUTSIDE_RATIO})")  # fmt: skip
    print(
        f"{'reference steps (unprofiled, after window)':44s} {statistics.median(reference):10.1f}"
    )
    print(f"{'profiled window steps':44s} {statistics.median(window):10.1f} {window_ratio:7.3f}")
    return 0 if outside_ratio <= TARGET_OUTSIDE_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
