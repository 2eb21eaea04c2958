"""What `torchpace doctor` was asked, typed: built from the command line by doctor/command.py
(the argparse Namespace stops there) or by `launch --doctor` for a job's report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DoctorOptions:
    # the script (or module) and its own arguments; None for --trace
    target: str | None = None
    is_module: bool = False
    script_args: tuple[str, ...] = ()
    trace: Path | None = None  # --trace: a trace file, or a folder of one trace per rank
    warmup: int = 3
    steps: int = 5
    measure_s: float = 5.0
    step_on: str = "optimizer"
    continue_after: bool = False
    timeout_s: float | None = None
    with_stack: bool = False
    out: Path | None = None  # the run folder (None: a new one under torchpace-runs/)
    json: Path | None = None  # also write the report here
    html: Path | None = None  # also write the page here
    fail_on: str | None = None  # a code or a severity that makes the exit code 1
    quiet: bool = False
