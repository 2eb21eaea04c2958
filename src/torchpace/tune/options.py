"""What `torchpace tune` was asked, typed: built from the command line by tune/command.py
(the argparse Namespace stops there), read by the session and its outputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Timed steps per trial when --steps is not given: the least; the first baseline run
# calibrates more (tune/baseline.py, calibrated_steps).
DEFAULT_STEPS = 10
# The most trials when --budget is not given and no --time-budget is the limit
# (tune/command.py, trial_budget).
DEFAULT_TRIALS = 60
# The whole command's time when --time-budget is not given: a new user's tune ends (a
# held-out 3-epoch loop ran past 10 minutes, a 2-rank DDP job past 15, without one).
DEFAULT_TIME_BUDGET_S = 600.0


@dataclass(frozen=True)
class TuneOptions:
    target: str  # the script, or the module with is_module
    is_module: bool = False
    script_args: tuple[str, ...] = ()
    warmup: int = 3
    steps: int | None = None  # None: calibrated on the first baseline run (baseline.py)
    budget: int = DEFAULT_TRIALS  # the most trials
    time_budget: float | None = None  # stop trying after this many seconds
    # the real job's length in steps: a knob whose one-time cost is not repaid within it is
    # refused (None: not known; the verdict says after how many steps it is repaid)
    job_steps: int | None = None
    trial_timeout: float | None = None  # None: 10x the doctor's run per trial, + 120 s
    knobs: tuple[str, ...] | None = None  # only these knobs (None: every one that applies)
    allow_batch_size: bool = False
    try_all: bool = False
    loss_tolerance: float = 0.10
    seed: int = 0
    step_on: str = "optimizer"
    from_run: Path | None = None  # reuse the doctor's capture in this folder
    out: Path | None = None  # the run folder (None: a new one under torchpace-runs/)
    write: bool = False  # apply the source diff to the user's files
    quiet: bool = False
    json: Path | None = None
    html: Path | None = None
    # the most a baseline trial may differ from the plain script, in % (0: not checked)
    fidelity_limit: float = 10.0
    nproc_per_node: int = 1  # >1: the doctor's capture and every trial are the whole job
