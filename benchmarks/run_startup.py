"""What `torchpace run --config x.toml script.py` adds to `python script.py` before and around
the script: start-up only (issue 22, item 6: a tuned config must not make a short job slower).

A tiny script that imports torch and does nothing else is run alternately plainly and through
`torchpace run` with a configuration that has an [environment] table and a knob (the real
case: the environment check and the knob's apply both run), many pairs; the figure is the
median of the per-pair differences (pairs cancel the machine's drift). Target: <= 50 ms.

Importing torch takes seconds and varies by hundreds of milliseconds from one start to the
next on a shared machine, so the pairs' median is a noisy figure; beside it the benchmark
times torchpace's own work directly: in a fresh process that has imported torch already
(as the script would), the time `torchpace run`'s CLI takes from its first import to the
script's first line, the median of as many processes. Both sides run with Python's bytecode
cache on, in a folder of its own: an installed package has its bytecode compiled (pip does it
at install); a machine that sets PYTHONDONTWRITEBYTECODE compiles torchpace's modules at
every start (+20 ms here), which is not what a user's machine does.

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
# torchpace's own work, timed inside a process where torch is imported already: the CLI
# from its first import to the (empty) script's end
OWN_WORK = """
import sys, time
import torch
start = time.perf_counter()
from torchpace.cli import main
main(["run", "--config", "x.toml", "empty.py"])
print(1000 * (time.perf_counter() - start))
"""


def timed(command: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return 1000 * (time.perf_counter() - start)


def own_work_ms(folder: Path, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", OWN_WORK], cwd=folder, env=env, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return float(out.split()[-1])


def median_interval(values: list[float], level: float = 0.9, resamples: int = 2000):
    """A bootstrap interval of the median (seeded: the same runs give the same interval)."""
    import random

    rng = random.Random(0)
    medians = sorted(
        statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples)
    )
    tail = (1 - level) / 2
    return medians[int(tail * resamples)], medians[int((1 - tail) * resamples) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()

    from torchpace.knobs.config import TuneConfig, write_config
    from torchpace.knobs.fingerprint import current

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        (folder / "script.py").write_text(SCRIPT)
        (folder / "empty.py").write_text("")
        # a knob that does nothing to a script without autograd, but is applied (imports
        # torch, patches it) and makes the environment check run
        write_config(folder / "x.toml", TuneConfig({"anomaly-detection-off": True}, current()))
        plain = [sys.executable, "script.py"]
        tuned = [sys.executable, "-m", "torchpace", "run", "--config", "x.toml", "script.py"]
        timed(plain, folder, env), timed(tuned, folder, env)  # page cache, .pyc files
        plains, tuneds, diffs = [], [], []
        for i in range(args.pairs):
            order = (plain, tuned) if i % 2 == 0 else (tuned, plain)
            times = {id(c): timed(c, folder, env) for c in order}
            plains.append(times[id(plain)])
            tuneds.append(times[id(tuned)])
            diffs.append(times[id(tuned)] - times[id(plain)])
        own = [own_work_ms(folder, env) for _ in range(args.pairs)]
    added = statistics.median(diffs)
    low, high = median_interval(diffs)
    own_ms = statistics.median(own)
    q = statistics.quantiles(diffs, n=4)
    result = {
        "pairs": args.pairs,
        "plain_ms_median": round(statistics.median(plains), 1),
        "run_ms_median": round(statistics.median(tuneds), 1),
        "added_ms_median": round(added, 1),
        "added_ms_iqr": [round(q[0], 1), round(q[2], 1)],
        "added_ms_median_90ci": [round(low, 1), round(high, 1)],
        "own_work_ms_median": round(own_ms, 1),
        "own_work_ms_range": [round(min(own), 1), round(max(own), 1)],
        "target_ms": TARGET_MS,
        "cpus": os.cpu_count(),
    }
    print(f"python script.py: {result['plain_ms_median']} ms, torchpace run: "
          f"{result['run_ms_median']} ms (medians of {args.pairs} alternated pairs)")  # fmt: skip
    print(f"added by torchpace run: {added:+.1f} ms (median of the pair differences, 90% "
          f"interval {low:+.1f} .. {high:+.1f}; IQR {q[0]:+.1f} .. {q[2]:+.1f})")  # fmt: skip
    print(f"torchpace's own work, torch already imported: {own_ms:.1f} ms (median of "
          f"{len(own)} processes, {min(own):.1f} .. {max(own):.1f})")  # fmt: skip
    # met when torchpace's own work is under the target and the pairs do not contradict it
    # (their interval reaches the target): the pairs alone cannot resolve 50 ms here
    met = own_ms <= TARGET_MS and low <= TARGET_MS
    result["met"] = met
    print(f"target <= {TARGET_MS:.0f} ms: {'met' if met else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
