"""The capture child: ``python -m torchpace.capture.child SPEC.json``.

Runs the user's script as ``python train.py args`` would (argv, ``__main__``, ``sys.path[0]``,
cwd unchanged, stdout/stderr straight through) with the capture hooks installed, and writes
``run_facts.json`` and the trace into the run folder, however the script ends.
"""

from __future__ import annotations

import _thread
import json
import os
import runpy
import sys
import threading
import traceback

EXIT_INTERRUPTED = 130
# torchpace itself failed before the script ran (the runner says so instead of blaming it).
EXIT_INTERNAL = 70


def _no_step_hint(spec: dict) -> str:
    if spec["step_on"] == "optimizer":
        return ("no optimizer.step() was seen; for a loop without an optimizer use "
                "--step-on dataloader, or call torchpace.step() once per iteration with "
                "--step-on manual")  # fmt: skip
    if spec["step_on"] == "dataloader":
        return "no DataLoader batch was fetched twice; use --step-on manual with torchpace.step()"
    return "torchpace.step() was never called; call it once per iteration"


def _ended_early(session, spec) -> str:
    seen = session.step_index
    if seen == 0:
        return _no_step_hint(spec)
    needed = f"{spec['warmup']} warm-up + {spec['steps']} profiled steps"
    return (
        f"the script ended after {seen} steps, before the {needed}; "
        "run more steps or lower --warmup/--steps"
    )


class _Watchdog:
    """Ends a script that gives no step (or never completes the window) within the timeout."""

    def __init__(self, session, timeout_s: float | None):
        self.fired = False
        self._timer = None
        if timeout_s:
            self._timer = threading.Timer(timeout_s, self._fire)
            self._timer.daemon = True
            self._timer.start()
        self.session = session

    def _fire(self) -> None:
        if self.session.phase in ("warmup", "window"):
            self.fired = True
            _thread.interrupt_main()  # raises KeyboardInterrupt in the script's thread

    def cancel(self) -> None:
        if self._timer:
            self._timer.cancel()


# runpy is frozen in Python 3.11+: its frames are named `<frozen runpy>`, not its file.
_OUR_FRAMES = (__file__, runpy.__file__, "<frozen runpy>")


def _user_traceback(exc: BaseException) -> str:
    """The traceback without the frames of torchpace and runpy above the user's script."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OUR_FRAMES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)

    from torchpace.capture import api, hooks
    from torchpace.capture.facts import RunFacts
    from torchpace.capture.session import CaptureComplete, Session

    facts = RunFacts(
        command=spec["command"], step_source=spec["step_on"], optimizers=[],
        optimizer_steps_per_step=1.0, warmup=spec["warmup"], steps_requested=spec["steps"],
        status="running",
    )  # fmt: skip
    try:
        session = Session(spec, facts)
        hooks.install_optimizer_hook(session)
        hooks.install_dataloader_hooks(session)
        hooks.install_wrapper_hooks(session)
        api._attach(session)
    except Exception:
        traceback.print_exc()
        print("torchpace: internal error while preparing the capture (above); please report "
              "it with `torchpace env` output", file=sys.stderr)  # fmt: skip
        return EXIT_INTERNAL
    watchdog = _Watchdog(session, spec.get("timeout_s"))

    target = spec["target"]
    sys.argv = [target, *spec["args"]]
    code = 0
    try:
        if spec["is_module"]:
            sys.path[0] = os.getcwd()  # what `python -m` puts first
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
        session.close("script-exited", _ended_early(session, spec))
    except CaptureComplete as e:
        e.__traceback__ = None  # drop the script's frames (and its DataLoader iterators) now
        session.close("complete", None)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        session.close("script-exited", f"the script called sys.exit({e.code!r}); "
                      + _ended_early(session, spec))  # fmt: skip
    except KeyboardInterrupt:
        if watchdog.fired:
            session.close("timeout", f"no {'step' if session.step_index == 0 else 'more steps'} "
                          f"within --timeout {spec['timeout_s']} s after {session.step_index} "
                          f"steps; " + _ended_early(session, spec))  # fmt: skip
            code = 1
        else:
            session.close("interrupted", f"interrupted (Ctrl-C) after {session.step_index} steps")
            code = EXIT_INTERRUPTED
    except BaseException as e:
        text = _user_traceback(e)
        print(text, file=sys.stderr, end="")  # the script's own traceback, as python shows it
        session.close("script-raised", text)
        code = 1
    finally:
        watchdog.cancel()
    return code


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(
            "usage: python -m torchpace.capture.child SPEC.json (started by torchpace doctor)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
