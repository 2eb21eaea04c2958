"""Time and peak memory of `torchpace lint` on one large generated file, by file size.

    flock /tmp/torchpace-bench.lock python benchmarks/lint_large_file.py [--sizes 0.5,1,2,5]
        [--dense] [--fix]

Each size is linted by a fresh `torchpace lint` process (one file, one job), so that its
peak RSS (``ru_maxrss`` of the child) is the cost of that file alone. The file is written
from the realistic training block of ``lint_speed.py``; ``--dense`` puts two findings in
every block (about 58k findings in 5 MB), the worst case for computing positions.
The target (issue 23): time and memory linear in the file's size, memory at most 10x it.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lint_speed import HEADER, block

MEMORY_TARGET = 10  # peak RSS at most this many times the file's size


def write_file(path: Path, megabytes: float, dense: bool) -> int:
    parts, size, i = [HEADER.format(n=0)], 0, 0
    while size < megabytes * 1e6:
        text = block(i, dense)
        parts.append(text)
        size += len(text)
        i += 1
    data = "".join(parts).encode()
    path.write_bytes(data)
    return len(data)


def baseline_rss() -> int:
    """Peak RSS of a process that only imports torchpace's lint: the fixed cost."""
    code = "import torchpace.lint.runner, resource; print(resource.getrusage(0).ru_maxrss)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(out.stdout) * 1024


def lint_once(path: Path, fix: bool) -> tuple[float, int, int]:
    """(seconds, peak RSS in bytes, exit status) of one lint of ``path``."""
    command = [sys.executable, "-m", "torchpace", "lint", "--jobs", "1", str(path)]
    if fix:
        command.insert(4, "--fix")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode not in (0, 1):
        raise SystemExit(f"lint failed on {path}: {proc.stderr[-500:]}")
    # ru_maxrss of the children is the largest of any child so far: sizes run in increasing
    # order, so it is this child's unless a smaller file took more
    return seconds, max(peak, before) * 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.5,1,2,5", help="file sizes in MB")
    parser.add_argument("--dense", action="store_true", help="two findings in every block")
    parser.add_argument("--fix", action="store_true", help="lint --fix (on a copy)")
    args = parser.parse_args()
    sizes = sorted(float(s) for s in args.sizes.split(","))
    base = baseline_rss()
    print(f"fixed cost: {base / 2**20:.0f} MiB (an interpreter with lint imported)")
    print("size MB | seconds | s/MB | peak RSS MiB | above fixed cost / file size")
    with tempfile.TemporaryDirectory(prefix="torchpace-lint-large-") as tmp:
        for megabytes in sizes:
            path = Path(tmp) / f"generated_{megabytes:g}mb.py"
            size = write_file(path, megabytes, args.dense)
            seconds, peak, _ = lint_once(path, args.fix)
            ratio = (peak - base) / size
            verdict = "within" if ratio <= MEMORY_TARGET else "OVER"
            print(
                f"{size / 1e6:7.2f} | {seconds:7.1f} | {seconds / (size / 1e6):4.1f} | "
                f"{peak / 2**20:12.0f} | {ratio:5.1f}x ({verdict} the {MEMORY_TARGET}x target)"
            )
            os.unlink(path)


if __name__ == "__main__":
    main()
