"""A capture of the whole job on N local ranks, for `tune --nproc-per-node N`: the doctor's
capture and every trial run the script through `torchpace launch` (torchrun, each rank's CPU
environment set for N: cores // N threads), each rank under the same capture spec (launch's
--capture-spec: rank <R> captures into OUT/rank<R>). The job's step is as slow as its slowest
rank: the combined facts are rank 0's with each step's time the most any rank took for it
and its samples every rank's (the job's throughput), and the first rank that failed, if one
did, gives the job's status and error.

One rank (N = 1) is the plain capture of capture/runner.py, unchanged, unless the job must
still go through the launcher (a trial of the nproc-per-node knob at 1 process: the script
calls init_process_group, which needs torchrun's variables).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from torchpace import run_files
from torchpace.capture.file_guard import Guard
from torchpace.capture.file_restore import settle
from torchpace.capture.guard_journal import close_journal
from torchpace.capture.runner import (
    INTERRUPT_GRACE_S,
    TIMEOUT_GRACE_S,
    CaptureResult,
    capture_script,
    child_env,
    refused_write,
    snapshot_for,
    start_journal,
)
from torchpace.capture.script_output import ScriptOutput
from torchpace.capture.spec import CaptureSpec
from torchpace.capture.strays import adopt_orphans, end_leftovers, leftovers_line, ticks_now
from torchpace.facts.run import RunFacts, Status


def capture_job(
    spec: CaptureSpec,
    nproc: int = 1,
    on_progress: Callable | None = None,
    output: Path | None = None,
    launched: bool | None = None,
) -> CaptureResult:
    """The capture of ``spec`` on ``nproc`` local ranks (rank 0's trace, the job's facts).
    ``launched``: through `torchpace launch` even for one rank (default: for more than one)."""
    if not (nproc > 1 if launched is None else launched):
        return capture_script(spec, on_progress=on_progress, output=output)
    out_dir = Path(spec.out_dir)
    template = out_dir / run_files.SPEC
    guard = Guard(spec.file_guard)
    # every rank's writes go to one manifest, in the trial's folder (capture/file_guard.py)
    spec = dataclasses.replace(spec, guard_dir=str(out_dir.resolve()))
    before = snapshot_for(spec) if guard != Guard.OFF else None
    spec.save(template)
    journal = start_journal(spec, template)
    command = [
        sys.executable, "-m", "torchpace", "launch", "--nproc-per-node", str(nproc),
        "--capture-spec", str(template),
        *(["-m"] if spec.is_module else []), spec.target, *spec.args,
    ]  # fmt: skip
    log = ScriptOutput(output)
    adopt_orphans()  # what a rank leaves running comes back to this process
    since = ticks_now()
    try:
        job = subprocess.Popen(
            command,
            env=child_env(guarded=guard != Guard.OFF),
            stdin=subprocess.DEVNULL,
            stdout=log.stdout,
            stderr=subprocess.STDOUT if output is not None else None,
            start_new_session=True,  # stopped as a group: torchrun, its ranks, their workers
        )
    except BaseException:
        log.close()
        close_journal(journal)  # nothing ran: nothing to put back
        raise
    finally:
        log.started()  # the job holds its own copy
    interrupted = False
    try:
        limit = spec.timeout_s + TIMEOUT_GRACE_S if spec.timeout_s is not None else None
        returncode = job.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        returncode = _stop(job)
    except KeyboardInterrupt:
        interrupted = True
        returncode = _stop(job)
    finally:
        leftovers = end_leftovers(since)  # before the folder is put back
        log.close()
        files = settle(out_dir, guard, before)
        close_journal(journal)
    facts = combine([_rank_facts(out_dir, r, spec, returncode) for r in range(nproc)])
    if interrupted and facts.status != Status.COMPLETE:
        facts.status = Status.INTERRUPTED
    refused_write(facts, files)
    facts.save(out_dir / run_files.FACTS)
    trace = out_dir / "rank0" / run_files.TRACE
    if leftovers:
        print(f"torchpace: {leftovers_line(leftovers)}", file=sys.stderr)
    return CaptureResult(facts, trace if trace.is_file() else None, returncode, files,
                         leftovers=leftovers, output_cut_bytes=log.cut_bytes)  # fmt: skip


def _stop(job: subprocess.Popen) -> int:
    """SIGINT to the job's group (torchrun passes it on, each rank writes its facts), then
    SIGKILL to whatever is left."""
    import signal

    try:
        os.killpg(job.pid, signal.SIGINT)
        return job.wait(timeout=INTERRUPT_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        return job.wait()


def _rank_facts(out_dir: Path, rank: int, spec: CaptureSpec, returncode: int) -> RunFacts:
    path = out_dir / f"rank{rank}" / run_files.FACTS
    if path.is_file():
        try:
            facts = RunFacts.load(path)
            facts.error = f"rank {rank}: {facts.error}" if facts.error else None
            return facts
        except (OSError, ValueError, TypeError) as e:
            why = f"rank {rank}'s run facts in {path} could not be read ({e})"
    else:
        why = (f"rank {rank} wrote no run facts (the job ended with exit code {returncode}; "
               f"its output is in the trial's {run_files.SCRIPT_OUTPUT})")  # fmt: skip
    return RunFacts(
        command=spec.command, step_source=str(spec.step_on), optimizers=[],
        optimizer_steps_per_step=1.0, warmup=spec.warmup, steps_requested=spec.steps,
        status=Status.SCRIPT_EXITED, error=why,
    )  # fmt: skip


def combine(ranks: list[RunFacts]) -> RunFacts:
    """The job's facts: rank 0's, each step as slow as the slowest rank's same step (a step
    that some rank did not reach is dropped) with the samples of every rank (the job's
    samples per step: a knob that changes the process count is compared on them; where a
    rank counted none, the job's are unknown), the first failed rank's status and error."""
    job = dataclasses.replace(ranks[0], steps=list(ranks[0].steps))
    failed = next((f for f in ranks if f.status != Status.COMPLETE), None)
    if failed is not None:
        job.status, job.error = failed.status, failed.error
    by_index = [{s.index: s for s in f.steps} for f in ranks]
    steps = []
    for step in ranks[0].steps:
        same = [r.get(step.index) for r in by_index]
        if any(s is None for s in same):
            continue
        samples = [s.samples for s in same]
        total = sum(samples) if all(samples) else None
        steps.append(dataclasses.replace(step, wall_ms=max(s.wall_ms for s in same), samples=total))
    job.steps = steps
    return job
