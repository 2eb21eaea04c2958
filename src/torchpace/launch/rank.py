"""The first program of every rank `torchpace launch` starts: torchrun runs it (with
``--no-python``) in place of the user's command; it applies this local rank's part of the
plan, then *replaces itself* with the command, so the script runs as the process torchrun
watches, with its own output, exit code and signals.

Usage (torchpace launch writes it): ``python rank.py COMMAND...`` with the plan in
``TORCHPACE_LAUNCH_PLAN`` (JSON, plan.LaunchPlan) and ``LOCAL_RANK`` set by torchrun.
Standard library only, and run by path, so that it costs a few milliseconds per rank and
needs no import path.
"""

from __future__ import annotations

import json
import os
import sys

PLAN_VARIABLE = "TORCHPACE_LAUNCH_PLAN"
# `launch --doctor`: the plan names a capture spec (capture/spec.py's JSON) whose out_dir is
# the job's run folder; each rank captures into its own rank<RANK> folder below it.
# run_files.SPEC, written out: this file is run by path and imports nothing of torchpace
SPEC_NAME = "capture_spec.json"


def capture_command(template: str, python: str) -> list[str]:
    """This rank's capture child: the spec copied with out_dir = <out_dir>/rank<RANK>."""
    with open(template) as f:
        spec = json.load(f)
    folder = os.path.join(spec["out_dir"], f"rank{os.environ.get('RANK', '0')}")
    os.makedirs(folder, exist_ok=True)
    spec["out_dir"] = folder
    path = os.path.join(folder, SPEC_NAME)
    with open(path, "w") as f:
        json.dump(spec, f)
    return [python, "-m", "torchpace.capture.child", path]


def rank_command(plan: dict, local_rank: int, command: list[str]) -> tuple[list[str], dict]:
    """The command to exec and the variables to set for ``local_rank``."""
    ranks = plan["ranks"]
    if not 0 <= local_rank < len(ranks):
        raise SystemExit(
            f"torchpace launch: LOCAL_RANK={local_rank} but the plan has {len(ranks)} ranks"
        )
    mine = ranks[local_rank]
    return [*mine["prefix"], *command], dict(mine["env"])


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("torchpace launch: rank.py needs the command to run")
    text = os.environ.pop(PLAN_VARIABLE, None)
    if text is None:  # started by hand: nothing to apply
        os.execvp(argv[0], argv)
    plan = json.loads(text)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if plan.get("capture_spec"):  # the script runs under the doctor's capture instead
        argv = capture_command(plan["capture_spec"], argv[0])
    command, env = rank_command(plan, local_rank, argv)
    os.environ.update(env)
    cpus = plan["ranks"][local_rank]["cpus"]
    if cpus and plan["binder"] == "sched_setaffinity":
        # The mask is inherited through exec: the script and every thread it starts stay
        # on these cores (what `taskset -c` does).
        os.sched_setaffinity(0, cpus)
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as e:
        message = f"torchpace launch: rank {local_rank} could not start {command[0]}: {e}"
        raise SystemExit(message) from None


if __name__ == "__main__":
    main(sys.argv[1:])
