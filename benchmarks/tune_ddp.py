"""Does `tune --nproc-per-node 2` make a DDP job with a poor bucket setting faster, end to
end? Side by side in one run.

examples/ddp_poor_buckets.py (0.01 MB buckets: one all-reduce per parameter) is tuned on 2
local ranks with the DDP knobs; then the job runs plain (`torchpace launch`) and tuned
(`torchpace launch --config torchpace.toml`), alternated, each pair's ratio taken as plain
wall time over tuned wall time of the whole command (start-up, rendezvous and exit included).
Target: every pair faster (ratio > 1), the median ratio reported with the pairs.

    python benchmarks/tune_ddp.py [--pairs 5] [--steps 60] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ddp_poor_buckets.py"
KNOBS = "ddp-bucket-cap-mb,ddp-gradient-as-bucket-view,ddp-static-graph"


def tune(folder: Path) -> tuple[Path, dict, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "torchpace", "tune", "--nproc-per-node", "2", "--knobs", KNOBS,
         "--warmup", "2", "--steps", "6", "--quiet", "--out", str(folder / "tune"),
         str(SCRIPT), "--steps", "100000"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"tune failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads((folder / "tune" / "tune_report.json").read_text())
    return folder / "tune" / "torchpace.toml", report, took


def job_seconds(steps: int, config: Path | None) -> float:
    flags = ["--config", str(config)] if config else []
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "torchpace", "launch", "--nproc-per-node", "2", *flags,
         str(SCRIPT), "--steps", str(steps)],
        capture_output=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        toml, report, tune_s = tune(Path(tmp))
        print(f"tune: {tune_s:.0f} s, kept {report.get('best')}")
        pairs = []
        for i in range(args.pairs):
            plain = job_seconds(args.steps, None)
            tuned = job_seconds(args.steps, toml)
            pairs.append({"plain_s": round(plain, 2), "tuned_s": round(tuned, 2),
                          "ratio": round(plain / tuned, 3)})  # fmt: skip
            print(f"pair {i + 1}: plain {plain:.1f} s, tuned {tuned:.1f} s, {plain / tuned:.2f}x")
    ratios = [p["ratio"] for p in pairs]
    result = {
        "benchmark": "tune_ddp",
        "script": str(SCRIPT.relative_to(ROOT)),
        "steps": args.steps,
        "tune_s": round(tune_s, 1),
        "kept": report.get("best"),
        "pairs": pairs,
        "median_ratio": statistics.median(ratios),
        "every_pair_faster": all(r > 1 for r in ratios),
    }
    print(f"median end-to-end ratio {result['median_ratio']:.2f}x over {len(pairs)} pairs; "
          f"every pair faster: {result['every_pair_faster']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
