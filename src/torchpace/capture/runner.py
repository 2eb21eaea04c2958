"""The parent side of a capture: start the child, wait for it, read what it wrote."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torchpace import run_files
from torchpace.capture.file_guard import Guard, scope_for, user_folders
from torchpace.capture.file_restore import FilesTouched, Snapshot, held_interrupts, settle
from torchpace.capture.guard_journal import close_journal, open_journal
from torchpace.capture.progress import CaptureProgress, ProgressPipe
from torchpace.capture.script_output import ScriptOutput
from torchpace.capture.signals import describe_returncode
from torchpace.capture.spec import CaptureSpec
from torchpace.capture.strays import adopt_orphans, end_leftovers, leftovers_line, ticks_now
from torchpace.exit_codes import EXIT_INTERNAL, EXIT_OWN_WRITE
from torchpace.facts.run import FACTS_NAME, RunFacts, Status

__all__ = ["CaptureResult", "CaptureSpec", "capture_script", "child_command", "child_env"]

SPEC_NAME = run_files.SPEC
# What `python missing.py` exits with.
EXIT_NO_SCRIPT = 2
# After --timeout the child's own watchdog interrupts the script (a signal: it wakes a blocked
# system call too); this is the grace the parent gives it to write its facts before the
# parent interrupts it, and then kills it.
TIMEOUT_GRACE_S = 15.0
# After Ctrl-C the child writes its partial facts; it gets this long before it is killed.
INTERRUPT_GRACE_S = 15.0
# Once the child ended, what is left of its process group gets this long to end by itself.
GROUP_GRACE_S = 3.0


@dataclass
class CaptureResult:
    facts: RunFacts  # always present; status says what happened
    trace_path: Path | None
    returncode: int
    # what the script did to files outside the run folder (spec.file_guard; empty when off)
    files: FilesTouched = dataclasses.field(default_factory=FilesTouched)
    # Ctrl-C or SIGTERM came while it ran, even if the run completed first: the caller stops
    interrupted: bool = False
    # processes the script left running (a daemon in a session of its own), ended
    leftovers: list[str] = dataclasses.field(default_factory=list)
    output_cut_bytes: int = 0  # cut from the middle of ``output`` (capture/script_output.py)


def child_command(spec_path: Path) -> list[str]:
    """The command line of the capture child, for a spec already written."""
    return [sys.executable, "-m", "torchpace.capture.child", str(spec_path)]


def child_env(guarded: bool = False) -> dict[str, str]:
    # The child must import this torchpace, installed or not.
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    if guarded:  # no __pycache__ left in the user's folder by the run
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    # Kineto's own errors about absent GPUs on a CPU-only run would read as the script's.
    env.setdefault("KINETO_LOG_LEVEL", "5")
    # Without it Kineto leaves CUPTI attached after the window and every later CUDA step pays
    # for it (1.2-1.8x on an H100, pytorch/pytorch#144455); a user's own value wins.
    env.setdefault("TEARDOWN_CUPTI", "1")
    return env


def capture_script(
    spec: CaptureSpec,
    on_progress: Callable[[CaptureProgress], None] | None = None,
    output: Path | None = None,
) -> CaptureResult:
    """``on_progress``: called (from a thread) with each step's progress as the child runs.
    ``output``: a file for the script's stdout and stderr (tune's trials: dozens of runs of
    the same script would bury the terminal); else they are the terminal's, as the doctor's
    single run shows them."""
    out_dir = Path(spec.out_dir)
    if not spec.is_module and not Path(spec.target).is_file():  # say so without starting torch
        why = (f"the script {spec.target!r} does not exist (looked in {os.getcwd()}); give its "
               "path relative to this folder, or `-m package.module` for a module")  # fmt: skip
        print(f"torchpace: {why}", file=sys.stderr)
        facts = _lost(spec, why)
        facts.save(out_dir / FACTS_NAME)
        return CaptureResult(facts, None, EXIT_NO_SCRIPT)
    spec_path = out_dir / SPEC_NAME
    progress = ProgressPipe(on_progress) if on_progress is not None else None
    if progress is not None:
        spec = dataclasses.replace(spec, progress_fd=progress.write_fd)
    spec.save(spec_path)
    guard = Guard(spec.file_guard)
    before = snapshot_for(spec) if guard != Guard.OFF else None
    journal = start_journal(spec, spec_path)
    log = ScriptOutput(output)
    adopt_orphans()  # what the script leaves running comes back to this process
    since = ticks_now()
    try:
        child = subprocess.Popen(
            child_command(spec_path),
            env=child_env(guarded=guard != Guard.OFF),
            pass_fds=(progress.write_fd,) if progress is not None else (),
            # an empty input: a script that reads stdin would wait for the terminal
            stdin=subprocess.DEVNULL,
            stdout=log.stdout,
            stderr=subprocess.STDOUT if output is not None else None,
            # its own process group: the child, its DataLoader workers and its subprocesses
            # are stopped together (Ctrl-C, SIGTERM, the timeout), and none outlives the run
            process_group=0,
        )
    except BaseException:
        log.close()
        close_journal(journal)  # nothing ran: nothing to put back
        raise
    finally:
        if progress is not None:
            progress.child_started()
        log.started()  # the child holds its own copy
    interrupted = hung = False
    try:
        try:
            returncode, hung = _wait(child, spec.timeout_s)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM (capture/signals.py): the child is in its own process group,
            # so the terminal's Ctrl-C did not reach it; pass it on and let it write what it saw
            interrupted = True
            returncode = _stop(child, INTERRUPT_GRACE_S)
    finally:
        files = FilesTouched()
        leftovers: list[str] = []
        try:
            with held_interrupts():  # the group ended and the folder restored, whatever comes
                _end_group(child)
                leftovers = end_leftovers(since)  # before the folder is put back
                log.close()
                if progress is not None:
                    progress.close()
                files = settle(out_dir, guard, before)
                close_journal(journal)  # (left where the restore raised: the next start retries)
        except KeyboardInterrupt:  # held until then: the run is over, the caller stops
            interrupted = True
    facts = _read_facts(out_dir, spec, returncode, interrupted, hung)
    refused_write(facts, files)
    trace = Path(facts.trace_path) if facts.trace_path else None
    if leftovers:
        print(f"torchpace: {leftovers_line(leftovers)}", file=sys.stderr)
    return CaptureResult(facts, trace if trace and trace.is_file() else None, returncode, files,
                         interrupted, leftovers, log.cut_bytes)  # fmt: skip


def refused_write(facts: RunFacts, files: FilesTouched) -> None:
    """A write the file guard refused (its original could not be saved: a full disk) is
    why the run failed, whatever the script made of the exception: said first."""
    if files.refused and facts.status == Status.COMPLETE:
        facts.status = Status.SCRIPT_EXITED
    if files.refused:
        why = (f"torchpace refused the script's write to {files.refused[0]}: its original "
               "could not be saved first, and a file is never changed without it")  # fmt: skip
        facts.error = why + (f"\nthe script's own error: {facts.error}" if facts.error else "")


def start_journal(spec: CaptureSpec, spec_path: Path) -> list[str]:
    """A capture that puts the user's files back is journaled in their folders until it
    has (capture/guard_journal.py): a tune killed meanwhile is finished by the next start."""
    if Guard(spec.file_guard) != Guard.RESTORE:
        return []
    folders = user_folders(spec.target, spec.is_module)
    return open_journal(folders, Path(spec.guard_dir or spec.out_dir), str(spec_path))


def snapshot_for(spec: CaptureSpec) -> Snapshot:
    """The user's folders as they are before the run: what the audit hook cannot see (C code,
    subprocesses) is found by comparing with them afterwards."""
    scope = scope_for(spec.target, spec.is_module, spec.guard_root or str(spec.out_dir))
    return Snapshot.take(scope.user_roots, scope.excluded_inside())


def _wait(child: subprocess.Popen, timeout_s: float | None) -> tuple[int, bool]:
    """(the return code, whether the parent had to stop a child that outlived its timeout)."""
    if timeout_s is None:
        return child.wait(), False
    try:
        return child.wait(timeout=timeout_s + TIMEOUT_GRACE_S), False
    except subprocess.TimeoutExpired:
        return _stop(child, INTERRUPT_GRACE_S), True


def _stop(child: subprocess.Popen, grace_s: float) -> int:
    if child.poll() is None:
        _signal_group(child, signal.SIGINT)
    try:
        return child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(child, signal.SIGKILL)
        return child.wait()


def _signal_group(child: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signum)


def _end_group(child: subprocess.Popen) -> None:
    """Whatever is left of the child's process group once it ended (DataLoader workers of a
    killed child, a subprocess the script started) is killed: nothing outlives the run. It
    gets GROUP_GRACE_S first: the profiler's log filter drains the child's last lines (a
    crash message) and workers of a child that ended well exit by themselves."""
    if child.poll() is None:
        _signal_group(child, signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + GROUP_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(child.pid, 0)  # is anyone left in the group?
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    _signal_group(child, signal.SIGKILL)


def _read_facts(
    out_dir: Path, spec: CaptureSpec, returncode: int, interrupted: bool, hung: bool = False
) -> RunFacts:
    path = out_dir / FACTS_NAME
    facts = None
    if path.is_file():
        try:
            facts = RunFacts.load(path)
        except (OSError, ValueError, TypeError) as e:
            facts = _lost(spec, f"the run facts in {path} could not be read ({e})")
    if facts is None:
        facts = _lost(spec, _why_nothing(returncode, out_dir=out_dir))
    if facts.status == Status.RUNNING:  # the child died mid-run (os._exit, a crash)
        facts.status = Status.INTERRUPTED if interrupted else Status.SCRIPT_EXITED
        facts.error = _why_nothing(returncode, len(facts.steps), out_dir)
    if interrupted and facts.status != Status.COMPLETE:
        facts.status = Status.INTERRUPTED
    elif hung and facts.status != Status.COMPLETE:
        # it did not end: torchpace stopped it (blocked where the child's watchdog could not
        # interrupt it: in C code, or ignoring SIGINT)
        facts.status = Status.TIMEOUT
        how = "with SIGKILL" if returncode == -signal.SIGKILL else "with SIGINT"
        facts.error = (
            f"the script hung: no step within --timeout {spec.timeout_s:g} s after "
            f"{len(facts.steps)} steps, and it went on past the timeout; torchpace stopped it "
            f"{how}"
        )
    return facts


# Less free space than this where the run writes, and a run that died is said to have
# found the disk full (28 KB free: the profiler's export crashed with SIGSEGV; 100 KB: exit 1).
FULL_DISK_BYTES = 4 * 2**20


def _why_nothing(returncode: int, steps_seen: int = 0, out_dir: Path | None = None) -> str:
    """Why a run left no complete facts; a full disk under the run folder is named first
    (torchpace's own writes fail there, in the script's process: not the script's fault)."""
    free = _free_bytes(out_dir) if out_dir is not None and returncode != 0 else None
    if returncode == EXIT_OWN_WRITE or (free is not None and free < FULL_DISK_BYTES):
        shown = f"{free // 1024} KB free" if free is not None else "full"
        return (f"no space left on device writing torchpace's files in {out_dir} ({shown}); "
                "the script is not at fault: free some space on that disk, or give --out "
                f"on another (the process {describe_returncode(returncode)})")  # fmt: skip
    return _died(returncode, steps_seen)


def _free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _died(returncode: int, steps_seen: int) -> str:
    # The child saves its facts at each step outside the window: those steps survive.
    seen = f"after {steps_seen} steps" if steps_seen else "before torchpace could record its steps"
    if returncode == EXIT_INTERNAL:
        return (
            "torchpace failed to prepare the capture (its error is above); the script did not run"
        )
    if returncode < 0:
        return f"the script's process was {describe_returncode(returncode)} {seen}"
    return (f"the script's process ended with exit code {returncode} {seen}, without "
            "letting torchpace finish (os._exit() or a crash); remove the os._exit() or lower "
            "--warmup/--steps below the point where it exits")  # fmt: skip


def _lost(spec: CaptureSpec, error: str) -> RunFacts:
    return RunFacts(
        command=spec.command, step_source=str(spec.step_on), optimizers=[],
        optimizer_steps_per_step=1.0, warmup=spec.warmup, steps_requested=spec.steps,
        status=Status.SCRIPT_EXITED, error=error,
    )  # fmt: skip
