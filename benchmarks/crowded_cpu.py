"""Does the doctor's TP107 saving match what fewer workers really give? Alternated A/B.

The planted job (tests/planted/workers_crowd_cores.py: a CPU model, a CPU-heavy per-item
transform, 4 workers per usable core) runs as a plain script with its default workers and
with ``--workers 0``, alternated for ``--pairs`` pairs (a machine that drifts loads both
sides alike); each run prints its mean step time after the first 5 steps and its time end
to end. Then the doctor runs once on the default script, and its first finding's saving is
set beside the A/B's: the target is a ratio within 1.5x either way, TP107 first.

Run it under the shared lock on a shared machine:

    flock /tmp/tp-cpu.lock python benchmarks/crowded_cpu.py [--pairs 5] [--json OUT]
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "planted" / "workers_crowd_cores.py"
REPORT = re.compile(r"CROWDED_REPORT total_s=([\d.]+) steps=(\d+) step_ms=([\d.]+)")
TARGET_RATIO = 1.5
AB_STEPS = 40
# more steps than warm-up, window, probes and the unprofiled steps: the capture ends the run
DOCTOR_SCRIPT_STEPS = 400


def plain_run(workers: int | None) -> dict:
    args = [sys.executable, "-W", "ignore", str(SCRIPT), "--steps", str(AB_STEPS)]
    if workers is not None:
        args += ["--workers", str(workers)]
    env = {**os.environ, "CROWDED_REPORT": "1"}
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    m = REPORT.search(out)
    if m is None:
        raise SystemExit(f"no CROWDED_REPORT line from {SCRIPT.name}:\n{out}")
    return {"workers": "default" if workers is None else workers, "total_s": float(m[1]),
            "step_ms": float(m[3])}  # fmt: skip


def doctor_run() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "torchpace", "doctor", "--out", str(Path(tmp) / "run"),
               "--json", str(report), str(SCRIPT), "--steps", str(DOCTOR_SCRIPT_STEPS)]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp)
        if not report.exists():
            raise SystemExit(f"the doctor wrote no report:\n{proc.stdout}\n{proc.stderr}")
        data = json.loads(report.read_text())
    first = data["findings"][0] if data["findings"] else None
    return {
        "seconds": round(time.monotonic() - started, 1),
        "first_code": first and first["code"],
        "first_saving_ms": first and first["saving_ms"],
        "first_evidence": first and first["evidence"],
        "codes": [f["code"] for f in data["findings"]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    runs = []
    for i in range(args.pairs):  # alternated, the order swapped every other pair
        order = (None, 0) if i % 2 == 0 else (0, None)
        runs += [plain_run(w) for w in order]
        print(runs[-2], runs[-1], flush=True)
    default = [r["step_ms"] for r in runs if r["workers"] == "default"]
    none = [r["step_ms"] for r in runs if r["workers"] == 0]
    pair_savings = [d - n for d, n in zip(default, none, strict=True)]
    ab_saving = statistics.median(pair_savings)
    doctor = doctor_run()
    saving = doctor["first_saving_ms"]
    ratio = saving / ab_saving if saving and ab_saving > 0 else None
    totals = {w: statistics.median(r["total_s"] for r in runs if r["workers"] == w)
              for w in ("default", 0)}  # fmt: skip
    result = {
        "script": str(SCRIPT.relative_to(ROOT)),
        "cores": len(os.sched_getaffinity(0)),
        "pairs": args.pairs,
        "runs": runs,
        "ab_step_ms_default_median": statistics.median(default),
        "ab_step_ms_workers0_median": statistics.median(none),
        "ab_saving_ms_median_of_pairs": round(ab_saving, 2),
        "ab_total_s_default_median": totals["default"],
        "ab_total_s_workers0_median": totals[0],
        "doctor": doctor,
        "doctor_over_ab": ratio and round(ratio, 2),
        "within_target": ratio is not None and 1 / TARGET_RATIO <= ratio <= TARGET_RATIO
        and doctor["first_code"] == "TP107",
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
