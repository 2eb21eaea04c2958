"""Is the doctor's headline samples/s the script's own? Side by side in one run.

The bundled example (main-process data loading: its steps swing) runs under the doctor's
capture, which reports samples/s over its unprofiled steps; then the plain script runs as
far, printing each step's own time, and its samples/s is taken over the same step indices.
Rounds alternate (doctor, plain, doctor, plain, ...) so that machine drift cancels.
Target: every round's ratio within 10% (the issue's bound on a GPU).

    python benchmarks/doctor_throughput.py [--rounds 2] [--image-size 32] [--measure 5]

On a GPU, the article's size: --image-size 224.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from torchpace.capture.facts import StepPhase
from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.doctor.throughput import measure

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


def plain_run(image_size: int, indices: list[int]) -> float:
    """The plain script's own samples/s over these step indices."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), *example_args(image_size, indices[-1] + 1)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    times = {int(i): float(ms) for i, ms in STEP_LINE.findall(out)}
    return BATCH * len(indices) / (sum(times[i] for i in indices) / 1000)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--measure", type=float, default=5.0, help="the doctor's --measure seconds")
    args = p.parse_args()
    print(f"example: {EXAMPLE.name} {' '.join(example_args(args.image_size, SCRIPT_STEPS))}, "
          f"doctor --measure {args.measure:g}, {args.rounds} alternated rounds")  # fmt: skip
    print(f"{'round':>5s} {'steps':>6s} {'doctor samples/s':>17s} {'plain samples/s':>16s} "
          f"{'ratio':>7s}")  # fmt: skip
    worst = 0.0
    for n in range(args.rounds):
        doctor, indices = doctor_run(args.image_size, args.measure)
        plain = plain_run(args.image_size, indices)
        ratio = doctor / plain
        worst = max(worst, abs(ratio - 1))
        print(f"{n + 1:5d} {len(indices):6d} {doctor:17.1f} {plain:16.1f} {ratio:7.3f}")
    ok = worst <= TARGET_RATIO_ERROR
    print(f"worst ratio error {100 * worst:.1f}% (target <= {100 * TARGET_RATIO_ERROR:.0f}%): "
          f"{'ok' if ok else 'MISSED'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
