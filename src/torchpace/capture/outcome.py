"""How a captured run ended, as a verb's exit code and the line that tells the user why.

Shared by every verb that runs a script under capture (doctor; tune and run next), so that
they agree on what each capture status means: the script's own exit code wins where it
failed, a stopped-early run says how far it got, and Ctrl-C is 130 as in a shell.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchpace.capture.signals import describe_returncode, exit_status
from torchpace.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED
from torchpace.facts.run import RunFacts, Status


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    message: str | None  # "torchpace <verb>: ..." for stderr; None when the run went as asked


def run_outcome(
    verb: str, facts: RunFacts, returncode: int, target: str, report_code: int
) -> Outcome:
    """``returncode``: the script's process; ``report_code``: what the verb's report decided
    (1 when --fail-on matched), used when the script itself ended well."""

    def said(message: str, code: int) -> Outcome:
        return Outcome(code, f"torchpace {verb}: {message}")

    ended = describe_returncode(returncode)  # "ended with exit code 3", "killed by SIGSEGV ..."
    returncode = exit_status(returncode)  # a death by signal N exits 128 + N, as in a shell
    seen = len(facts.window)
    if facts.status == Status.COMPLETE and seen:
        # The capture ended the script (rc 0), or --continue let it run on and it failed.
        return Outcome(returncode or report_code, None)
    if facts.status == Status.INTERRUPTED:
        return said(
            "interrupted (Ctrl-C)" + (f" after {seen} profiled steps" if seen else ""),
            EXIT_INTERRUPTED,
        )
    if facts.status == Status.SCRIPT_RAISED and facts.memory.oom is not None:
        return said(
            f"{target} ran out of memory in step {facts.memory.oom.step} (its traceback is "
            "above); TP404 in the report says what held the memory and the ways out",
            returncode or EXIT_FAILURE,
        )
    if facts.status == Status.SCRIPT_RAISED:
        return said(
            f"{target} raised an exception (its traceback is above) {_how_far(facts)}; "
            "fix the script and run again",
            returncode or EXIT_FAILURE,
        )
    if facts.status == Status.TIMEOUT:
        return said(f"timed out: {facts.error or 'no step came in time'}", EXIT_FAILURE)
    # SCRIPT_EXITED (sys.exit, os._exit, the end of the script before the window closed),
    # and any status the child could not finish writing (RUNNING).
    if not seen:
        # TP901 is the finding every report carries when no step reached the window.
        return said(
            f"{target} {ended} before any step was profiled: "
            f"{facts.error or 'no optimizer step was seen'}; see the TP901 finding",
            returncode or EXIT_FAILURE,
        )
    return said(
        f"{target} {ended} after {seen} of {facts.steps_requested} "
        "profiled steps; the report covers those",
        returncode or report_code,
    )


def _how_far(facts: RunFacts) -> str:
    """Where in the run it ended: a script that raised in step 4 did not raise "before its
    first step", even if the profiled window had not begun."""
    if facts.window:
        return f"after {len(facts.window)} profiled steps"
    if facts.steps:
        return f"after {len(facts.steps)} steps, none of them profiled yet"
    return "before its first step"


def exception_line(error: str) -> str:
    """The line that names the exception in a traceback ("ModuleNotFoundError: ..."): the
    first unindented line after the last frame. Not simply the last line: a message may
    run over several (torch.load's weights_only error ends with a link to the docs)."""
    lines = error.strip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    if frames:
        after = [line for line in lines[frames[-1] + 1 :] if line and not line[0].isspace()]
        if after:
            return after[0]
    return lines[-1] if lines else ""
