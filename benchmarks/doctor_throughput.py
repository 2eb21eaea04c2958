"""Is the doctor's headline samples/s the script's own? Side by side in one run.

The bundled example (main-process data loading: its steps swing) runs under the doctor's
capture, which reports samples/s over its unprofiled steps; the plain script runs as far
just before and just after it, printing each step's own time, and its samples/s is taken
over the same step indices. Each round's ratio is the doctor's figure over the mean of the
two plain runs around it (a machine that drifts steadily cancels out); the two plain runs
over each other are the control: how much this machine disagrees with itself on the same
script, which no ratio can be expected to beat. Target: the median ratio over the rounds
within 10% of 1 (the issue's bound on a GPU), reported beside the control's spread.

    python benchmarks/doctor_throughput.py [--rounds 3] [--image-size 32] [--measure 5] [--json OUT]

On a GPU, the article's size: --image-size 224.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.doctor.throughput import measure
from torchpace.facts.run import StepPhase

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fake_cifar_resnet.py"
STEP_LINE = re.compile(r"^step +(\d+) +([\d.]+) ms/step", re.M)
TARGET_RATIO_ERROR = 0.10
BATCH = 32
# More steps than warm-up, window, settling and the measuring cap together: the capture
# ends the run, never the script. The example runs one epoch of dataset / batch steps.
SCRIPT_STEPS = 400


def example_args(image_size: int, steps: int) -> list[str]:
    return ["--image-size", str(image_size), "--dataset-size", str(BATCH * SCRIPT_STEPS),
            "--steps", str(steps), "--print-every", "1"]  # fmt: skip


def doctor_run(image_size: int, measure_s: float) -> tuple[float, list[int]]:
    """(the doctor's samples/s, the indices of the steps it measured them on)."""
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp) / "run"
        out_dir.mkdir()
        spec = CaptureSpec(str(EXAMPLE), example_args(image_size, SCRIPT_STEPS), out_dir,
                           measure_s=measure_s)  # fmt: skip
        with open(Path(tmp) / "stdout.txt", "w") as log:
            saved = sys.stdout.fileno()
            dup = os.dup(saved)
            os.dup2(log.fileno(), saved)  # the child inherits our stdout: keep the table clean
            try:
                facts = capture_script(spec).facts
            finally:
                os.dup2(dup, saved)
                os.close(dup)
    throughput = measure(facts)
    if throughput is None or not throughput.unprofiled or not throughput.samples_per_s:
        raise SystemExit(f"the capture measured no unprofiled steps: {facts.status} {facts.error}")
    return throughput.samples_per_s, [s.index for s in facts.in_phase(StepPhase.REFERENCE)]


def plain_times(image_size: int) -> dict[int, float]:
    """The plain script's own step times (ms) by step index, over as many steps as the
    doctor can measure."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), *example_args(image_size, SCRIPT_STEPS)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {int(i): float(ms) for i, ms in STEP_LINE.findall(out)}


def over(times: dict[int, float], indices: list[int]) -> float:
    """samples/s over these step indices."""
    return BATCH * len(indices) / (sum(times[i] for i in indices) / 1000)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--measure", type=float, default=5.0, help="the doctor's --measure seconds")
    p.add_argument("--json", metavar="OUT", help="write every figure to this file")
    args = p.parse_args()
    print(
        f"example: {EXAMPLE.name} {' '.join(example_args(args.image_size, SCRIPT_STEPS))}, "
        f"doctor --measure {args.measure:g}, {args.rounds} rounds: plain, doctor, plain"
    )
    print(f"{'round':>5s} {'steps':>6s} {'doctor samples/s':>17s} {'plain before/after':>19s} "
          f"{'ratio':>7s} {'control':>8s}")  # fmt: skip
    rounds = []
    for n in range(args.rounds):
        # the plain runs time every step; they are read over the doctor's indices afterwards
        before = plain_times(args.image_size)
        doctor, indices = doctor_run(args.image_size, args.measure)
        after = plain_times(args.image_size)
        plain_before, plain_after = over(before, indices), over(after, indices)
        ratio = doctor / ((plain_before + plain_after) / 2)
        control = plain_after / plain_before
        rounds.append({"steps": len(indices), "doctor": round(doctor, 1),
                       "plain_before": round(plain_before, 1),
                       "plain_after": round(plain_after, 1), "ratio": round(ratio, 3),
                       "control": round(control, 3)})  # fmt: skip
        print(f"{n + 1:5d} {len(indices):6d} {doctor:17.1f} {plain_before:9.1f}/{plain_after:<9.1f}"
              f" {ratio:7.3f} {control:8.3f}")  # fmt: skip
    ratio = statistics.median(r["ratio"] for r in rounds)
    control = max(abs(r["control"] - 1) for r in rounds)
    ok = abs(ratio - 1) <= TARGET_RATIO_ERROR
    print(f"median ratio {ratio:.3f}: error {100 * abs(ratio - 1):.1f}% (target <= "
          f"{100 * TARGET_RATIO_ERROR:.0f}%): {'ok' if ok else 'MISSED'}; the plain script "
          f"against itself differed by up to {100 * control:.1f}%")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({
            "image_size": args.image_size, "measure_s": args.measure, "rounds": rounds,
            "median_ratio": round(ratio, 3), "control_max_error": round(control, 3),
            "target_error": TARGET_RATIO_ERROR, "met": ok,
        }, indent=2))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
