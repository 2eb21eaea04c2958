"""What `torchpace run --config x.toml script.py` adds to `python script.py` before and around
the script: start-up only (issue 22, item 6: a tuned config must not make a short job slower).

A tiny script that imports torch and does nothing else is run alternately plainly and through
`torchpace run` with a configuration that has an [environment] table and a knob (the real
case: the environment check and the knob's apply both run), many pairs; the figure is the
median of the per-pair differences (pairs cancel the machine's drift). Target: <= 50 ms.

    flock /tmp/torchpace-bench.lock python benchmarks/run_startup.py [--pairs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 50.0
SCRIPT = "import torch\n"


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return 1000 * (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()

    from torchpace.knobs.config import TuneConfig, write_config
    from torchpace.knobs.fingerprint import current

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "script.py").write_text(SCRIPT)
        # a knob that does nothing to a script without autograd, but is applied (imports
        # torch, patches it) and makes the environment check run
        write_config(folder / "x.toml", TuneConfig({"anomaly-detection-off": True}, current()))
        plain = [sys.executable, "script.py"]
        tuned = [sys.executable, "-m", "torchpace", "run", "--config", "x.toml", "script.py"]
        timed(plain, folder), timed(tuned, folder)  # page cache, .pyc files
        plains, tuneds, diffs = [], [], []
        for i in range(args.pairs):
            order = (plain, tuned) if i % 2 == 0 else (tuned, plain)
            times = {id(c): timed(c, folder) for c in order}
            plains.append(times[id(plain)])
            tuneds.append(times[id(tuned)])
            diffs.append(times[id(tuned)] - times[id(plain)])
    added = statistics.median(diffs)
    q = statistics.quantiles(diffs, n=4)
    result = {
        "pairs": args.pairs,
        "plain_ms_median": round(statistics.median(plains), 1),
        "run_ms_median": round(statistics.median(tuneds), 1),
        "added_ms_median": round(added, 1),
        "added_ms_iqr": [round(q[0], 1), round(q[2], 1)],
        "target_ms": TARGET_MS,
        "cpus": os.cpu_count(),
    }
    print(f"python script.py: {result['plain_ms_median']} ms, torchpace run: "
          f"{result['run_ms_median']} ms (medians of {args.pairs} alternated pairs)")  # fmt: skip
    print(f"added by torchpace run: {added:+.1f} ms (median of the pair differences; IQR "
          f"{q[0]:+.1f} .. {q[2]:+.1f}); target <= {TARGET_MS:.0f} ms: "
          f"{'met' if added <= TARGET_MS else 'NOT met'}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if added <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
