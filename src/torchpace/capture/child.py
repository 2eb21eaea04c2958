"""The capture child: ``python -m torchpace.capture.child SPEC.json``.

Runs the user's script as ``python train.py args`` would (argv, ``__main__``, ``sys.path[0]``,
cwd unchanged, stdout/stderr straight through) with the capture hooks installed, and writes
``run_facts.json`` and the trace into the run folder, however the script ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import sys
import threading
import traceback
import types

from torchpace.atomic import OwnFileError
from torchpace.capture.spec import (
    CaptureSpec,
    Mode,
    SpecError,
    StepOn,
)
from torchpace.exit_codes import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OWN_WRITE


def _no_step_hint(spec: CaptureSpec) -> str:
    if spec.step_on == StepOn.OPTIMIZER:
        return ("no optimizer.step() was seen; for a loop without an optimizer use "
                "--step-on dataloader, or call torchpace.step() once per iteration with "
                "--step-on manual")  # fmt: skip
    if spec.step_on == StepOn.DATALOADER:
        return "no DataLoader batch was fetched twice; use --step-on manual with torchpace.step()"
    return "torchpace.step() was never called; call it once per iteration"


def _ended_early(session, spec: CaptureSpec) -> str:
    seen = session.step_index
    if seen == 0:
        return _no_step_hint(spec)
    if spec.mode == Mode.PROFILE:  # the step after the warm-up is counted (capture/flops.py)
        needed = f"{spec.warmup} warm-up + 1 counted + {spec.steps} profiled steps"
    else:
        needed = f"{spec.warmup} warm-up + {spec.steps} timed steps"
    return (
        f"the script ended after {seen} steps, before the {needed}; "
        "run more steps or lower --warmup/--steps"
    )


def _process_age_s() -> float:
    """Seconds since this process started (Linux's /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        return max(0.0, uptime_s - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class _Watchdog:
    """Ends a script that gives no step (or never completes the window) within the timeout."""

    def __init__(self, session, timeout_s: float | None):
        self.fired = False
        self._timer = None
        if timeout_s:
            # from the process's start, as the parent counts it: importing torch and the
            # script's modules takes part of the timeout too
            self._timer = threading.Timer(max(0.1, timeout_s - _process_age_s()), self._fire)
            self._timer.daemon = True
            self._timer.start()
        self.session = session

    def _fire(self) -> None:
        from torchpace.capture.session import Phase  # imports torch: not for `torchpace run`

        if self.session.phase in (Phase.WARMUP, Phase.WINDOW, Phase.MEASURED):
            self.fired = True
            # a real signal, not _thread.interrupt_main(): it also wakes a main thread blocked
            # in a system call (sleep, read, a lock), which then raises KeyboardInterrupt
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def cancel(self) -> None:
        if self._timer:
            self._timer.cancel()


# The SIGINTs this process received (the watchdog's, the parent's): a KeyboardInterrupt
# with none is one the script raised itself, not an interruption.
_SIGINTS: list[int] = []


def _note_sigint() -> None:
    """SIGINT still raises KeyboardInterrupt, and is noted first (a handler the script sets
    replaces this one: its own handler then decides what SIGINT is)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def noted(signum, frame):
        _SIGINTS.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, noted)


# runpy is frozen in Python 3.11+: its frames are named `<frozen runpy>`, not its file.
_OUR_FRAMES = (__file__, runpy.__file__, "<frozen runpy>")


def _user_frames(exc: BaseException):
    """The traceback without the frames of torchpace and runpy above the user's script."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OUR_FRAMES:
        tb = tb.tb_next
    return tb


def _stdin_hint(exc: BaseException) -> str:
    """input() at the end of its (empty) standard input: the runner gives /dev/null."""
    if isinstance(exc, EOFError) and "reading a line" in str(exc):
        return ("torchpace: the script reads its standard input; torchpace gives it an empty "
                "one (/dev/null): pass that input as a file or an argument instead\n")  # fmt: skip
    return ""


def _user_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, _user_frames(exc)))


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def _record(name: str, value, detail: str):
    from torchpace.facts.knob_record import KnobRecord

    return KnobRecord(name, value, True, detail)


def _apply_knobs(spec: CaptureSpec, applied_by: str) -> list:
    """Tune's knobs, before the user's code runs (knobs/; capture/runtime.py); the
    runtime remembers them, so that a torchpace.apply() in the script applies nothing twice."""
    if not spec.knobs:
        return []
    from torchpace.capture.runtime import runtime
    from torchpace.knobs import apply_all

    if spec.switch:
        runtime().switched_knobs = frozenset({spec.switch, *(name for name, _ in spec.arms)})
    records = apply_all(spec.knobs, runtime(), _record)
    runtime().applied_by = (applied_by, records)
    return records


def _check_knobs(spec: CaptureSpec, records: list) -> None:
    """Each knob's setting in force at the timed steps (Knob.check), into its record: a
    knob that did not hold is reported "could not apply", never measured and rejected."""
    from torchpace.capture.runtime import runtime
    from torchpace.knobs import get

    for record in records:
        try:
            problem = get(record.name).check(record.value, runtime())
        except Exception as e:  # a check that fails is torchpace's bug: say so, go on
            problem = f"torchpace could not check it ({e!r})"
        if problem is None:
            record.holds = record.holds is not False  # a failed first check stays failed
        elif record.holds is not False:
            record.holds, record.not_held = False, problem


def _switch_of(spec: CaptureSpec, records: list):
    """A switched trial's switch, made at its first timed step, or why there is none: a
    knob that did not hold, or a switch that fails, is timed as any trial. Each knob of the
    spec's arms (or the switched knob's one value) switches among its own values
    (Knob.switch_arms); arm i puts the pair arms[i - 1] in force and every other knob at
    the script's own setting (capture/switching.py)."""
    from torchpace.capture.runtime import runtime
    from torchpace.knobs import get
    from torchpace.knobs.base import Switch

    def switch():
        arms = [tuple(arm) for arm in spec.arms]
        if not arms:
            held = next((r.value for r in records if r.name == spec.switch), None)
            arms = [(spec.switch, held)]
        values: dict[str, list] = {}
        where = []  # arm i -> (its knob, the arm's index among that knob's values)
        for name, value in arms:
            values.setdefault(name, []).append(value)
            where.append((name, len(values[name])))
        switches = {}
        for name in values:
            record = next((r for r in records if r.name == name), None)
            if record is None or record.holds is False:
                return f"{name} is not in force: not switched"
            try:
                made = get(name).switch_arms(tuple(values[name]), runtime())
            except Exception as e:  # torchpace's bug: the trial is still an ordinary one
                return f"torchpace could not switch {name} ({e!r})"
            if isinstance(made, str):
                return made
            switches[name] = made
        if len(switches) == 1:
            return switches[spec.switch]

        def set_arm(arm: int) -> None:
            on, index = where[arm - 1] if arm else ("", 0)
            for name, switch_ in switches.items():  # the others off before one goes on
                if name != on:
                    switch_(0)
            if on:
                switches[on](index)

        def finish() -> None:  # every knob's first value, as applied: the last check
            for switch_ in switches.values():
                switch_(1)

        settle = max(getattr(s, "settle_steps", 1) for s in switches.values())
        composite = Switch(set_arm, settle)
        composite.finish = finish
        return composite

    return switch


def _track_memory(session, runtime) -> None:
    from torchpace.capture.memory import MemoryTracker
    from torchpace.capture.session import Phase

    tracker = MemoryTracker(session.facts.memory, lambda: session.phase == Phase.WINDOW)
    tracker.install(runtime)
    session.memory = tracker


def _record_out_of_memory(session, exc: BaseException) -> None:
    """The state of memory at an out-of-memory failure, taken while the failed step's frames
    still hold its tensors; a failure to read it must not hide the user's error."""
    from torchpace.capture.memory import is_out_of_memory

    if session.memory is None or not is_out_of_memory(exc):
        return
    try:
        session.facts.memory.oom = session.memory.out_of_memory(exc, str(session.phase.value))
    except Exception as e:
        print(f"torchpace: could not read the memory state at the failure ({e})",
              file=sys.stderr)  # fmt: skip


def _guard_files(spec: CaptureSpec) -> None:
    from torchpace.capture.file_guard import Guard, install, scope_for

    if spec.file_guard != Guard.OFF:
        scope = scope_for(spec.target, spec.is_module, spec.guard_root or str(spec.out_dir))
        install(Guard(spec.file_guard), spec.guard_dir or str(spec.out_dir), scope)


def _run_script(spec: CaptureSpec) -> None:
    sys.argv = [spec.target, *spec.args]
    if spec.is_module:
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        runpy.run_module(spec.target, run_name="__main__", alter_sys=True)
        return
    sys.path[0] = os.path.dirname(os.path.abspath(spec.target))
    # runpy.run_path's work, done here: its three frames would sit under every frame of
    # the script, and a script that walks its stack (anomaly detection records a traceback
    # for every autograd node; warnings; logging) pays for each (docs/tune.md, fidelity)
    with io.open_code(os.path.abspath(spec.target)) as f:
        code = compile(f.read(), spec.target, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.target, __cached__=None, __loader__=None,
                         __package__="", __spec__=None)  # fmt: skip
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # pickle finds the script's classes, as under python
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_only(spec: CaptureSpec) -> int:
    """`torchpace run`: the knobs applied, then the script exactly as python runs it: its
    output, exceptions and exit code are its own (this process was exec'ed for it)."""
    if spec.seed is not None:
        _seed(spec.seed)
    try:
        _apply_knobs(spec, "`torchpace run`")
    except Exception:
        traceback.print_exc()
        print("torchpace run: applying the configuration's knobs failed (above); the "
              "script did not run; please report it with `torchpace env` output",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERNAL
    try:
        _run_script(spec)
    except (SystemExit, KeyboardInterrupt):
        raise  # python's own handling: the exit code, or death by SIGINT
    except BaseException as e:
        # as python shows it: the script's frames only, through the script's excepthook
        tb = _user_frames(e)
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        return 1
    return 0


def _discard_run_spec(spec_path: str, spec: CaptureSpec) -> None:
    """A RUN spec is written for one exec by `torchpace run`: gone once read, with its
    temporary folder when nothing else is in it."""
    path = os.path.abspath(spec_path)
    try:
        os.unlink(path)
        if os.path.dirname(path) == os.path.abspath(spec.out_dir):
            os.rmdir(spec.out_dir)
    except OSError:
        pass


def main(spec_path: str) -> int:
    try:
        spec = CaptureSpec.load(spec_path)
    except SpecError as e:
        print(f"torchpace: {e}; the capture child and its parent are from different "
              "torchpace versions? reinstall torchpace", file=sys.stderr)  # fmt: skip
        return EXIT_INTERNAL
    if spec.mode == Mode.RUN:
        _discard_run_spec(spec_path, spec)
        return run_only(spec)
    from torchpace.capture.signals import interrupt_on_sigint

    interrupt_on_sigint()  # the watchdog and the parent stop a capture by SIGINT
    _note_sigint()  # a KeyboardInterrupt without one is the script's own (its traceback shown)
    if spec.mode == Mode.PLAIN:
        return _main_plain(spec)
    session = _prepared_session(spec)
    if session is None:
        return EXIT_INTERNAL
    return _run_captured(spec, session)


def _main_plain(spec: CaptureSpec) -> int:
    """Tune's fidelity reference: one step-timing hook, nothing else; and tune's run check
    (tune/run_check.py): the knobs as `torchpace run` applies them."""
    from torchpace.capture.plain import run_plain

    try:
        _apply_knobs(spec, "tune's check of `torchpace run`")
    except Exception:
        traceback.print_exc()
        print("torchpace: applying the knobs failed (above); please report it with "
              "`torchpace env` output", file=sys.stderr)  # fmt: skip
        return EXIT_INTERNAL
    return run_plain(spec, _run_script, _ended_early, _user_traceback, _guard_files)


def _prepared_session(spec: CaptureSpec):
    """The capture's session with its hooks installed and the knobs applied, saved before
    the script starts; None (the error printed) when preparing it failed."""
    from torchpace.capture import api, hooks
    from torchpace.capture.loader_period import LoaderPeriod
    from torchpace.capture.runtime import runtime
    from torchpace.capture.session import Session
    from torchpace.facts.run import RunFacts, Status  # not at the top: `run`'s start-up

    facts = RunFacts(
        command=spec.command, step_source=str(spec.step_on), optimizers=[],
        optimizer_steps_per_step=1.0, warmup=spec.warmup, steps_requested=spec.steps,
        status=Status.RUNNING,
    )  # fmt: skip
    try:
        if spec.seed is not None:
            _seed(spec.seed)
        session = Session(spec, facts)
        hooks.install_optimizer_hook(session)
        hooks.install_dataloader_hooks(session)
        if spec.mode == Mode.TIMING:  # a trial's loader workers' pace, for tune's rows
            session.loader_period = LoaderPeriod()
            session.loader_period.install()
        if spec.mode == Mode.PROFILE:  # the doctor's facts; a trial's timing goes without
            hooks.install_wrapper_hooks(session)
            hooks.install_call_counters(session)
        hooks.install_backward_hook(session)
        hooks.install_model_facts(session, runtime())
        api._attach(session)
        if spec.mode == Mode.PROFILE:
            _track_memory(session, runtime())
        # after the capture's hooks: they wrap them
        facts.knobs = _apply_knobs(spec, "a tune trial")
        if facts.knobs:
            session.on_measure = lambda: _check_knobs(spec, facts.knobs)
        if spec.switch:
            session.switch_of = _switch_of(spec, facts.knobs)
        session.save()
        _guard_files(spec)  # last: torchpace's own files are written by now
    except Exception:
        traceback.print_exc()
        print("torchpace: internal error while preparing the capture (above); please report "
              "it with `torchpace env` output", file=sys.stderr)  # fmt: skip
        return None
    return session


def _run_captured(spec: CaptureSpec, session) -> int:
    """Runs the script under the session, closes it with how the script ended, and returns
    the child's exit code."""
    from torchpace.capture.session import CaptureComplete
    from torchpace.facts.run import Status

    watchdog = _Watchdog(session, spec.timeout_s)
    code = 0
    try:
        _run_script(spec)
        session.close(Status.SCRIPT_EXITED, _ended_early(session, spec))
    except CaptureComplete as e:
        e.__traceback__ = None  # drop the script's frames (and its DataLoader iterators) now
        session.close(Status.COMPLETE, None)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        session.close(Status.SCRIPT_EXITED, f"the script called sys.exit({e.code!r}); "
                      + _ended_early(session, spec))  # fmt: skip
    except KeyboardInterrupt as e:
        if session.run_on_expired:  # the measurement was whole; the run-on's limit ended it
            e.__traceback__ = None
            session.close(Status.COMPLETE, None)
            return 0
        if not watchdog.fired and not _SIGINTS:  # the script raised it itself: an exception
            text = _user_traceback(e)
            print(text, file=sys.stderr, end="")
            session.close(Status.SCRIPT_RAISED, text)
            return 1
        code = _close_interrupted(spec, session, watchdog.fired)
    except OwnFileError as e:  # raised in a hook, under the script's frames: not its error
        print(f"torchpace: {e} (torchpace's own file, not the script's); the run stops. Free "
              "some space on that disk, or give --out on another", file=sys.stderr)  # fmt: skip
        with contextlib.suppress(OSError):
            session.close(Status.SCRIPT_EXITED, f"torchpace: {e}")
        code = EXIT_OWN_WRITE
    except BaseException as e:
        text = _user_traceback(e) + _stdin_hint(e)
        print(text, file=sys.stderr, end="")  # the script's own traceback, as python shows it
        _record_out_of_memory(session, e)
        session.close(Status.SCRIPT_RAISED, text)
        code = 1
    finally:
        watchdog.cancel()
    return code


def _close_interrupted(spec: CaptureSpec, session, by_watchdog: bool) -> int:
    """A SIGINT: the watchdog's (no step within --timeout) or the parent's, which got Ctrl-C,
    SIGTERM or another signal and names it."""
    from torchpace.facts.run import Status

    if by_watchdog:
        what = "step" if session.step_index == 0 else "more steps"
        session.close(
            Status.TIMEOUT,
            f"no {what} within --timeout {spec.timeout_s} s after {session.step_index} "
            "steps; " + _ended_early(session, spec),
        )
        return 1
    why = f"interrupted by torchpace after {session.step_index} steps"
    session.close(Status.INTERRUPTED, why)
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(
            "usage: python -m torchpace.capture.child SPEC.json (started by torchpace doctor)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
