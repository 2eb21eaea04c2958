"""One walk from a script to the doctor's diagnosis: capture the script (capture/runner),
read the trace it wrote (trace/model.load_trace), diagnose both (doctor/analyze.diagnose).
tune captures on its own (capture/job.py: the whole job on several ranks too), then
diagnoses what it captured, or what --from-run holds, with ``diagnose_capture``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torchpace.capture import runner
from torchpace.capture.runner import CaptureResult
from torchpace.capture.spec import CaptureSpec
from torchpace.doctor.analyze import Diagnosis, diagnose
from torchpace.facts.run import RunFacts
from torchpace.trace import TraceError, load_trace


@dataclass(frozen=True)
class Examination:
    captured: CaptureResult
    diagnosis: Diagnosis
    # why the captured trace could not be read (the diagnosis then stands on the run facts
    # alone); None when it was read, or when there was none
    trace_problem: str | None = None

    @property
    def facts(self) -> RunFacts:
        return self.captured.facts


def examine(
    spec: CaptureSpec,
    on_progress: Callable | None = None,
    on_captured: Callable[[], None] | None = None,
) -> Examination:
    """Capture ``spec`` (KeyboardInterrupt goes through: whatever was captured stays in its
    folder), then diagnose what it captured. ``on_progress``: each step's progress, as
    capture_script takes it; ``on_captured``: called when the child has ended, before the
    analysis."""
    captured = runner.capture_script(spec, on_progress=on_progress)
    if on_captured is not None:
        on_captured()
    diagnosis, problem = diagnose_capture(captured.facts, captured.trace_path)
    return Examination(captured, diagnosis, problem)


def diagnose_capture(
    facts: RunFacts | None, trace_path: Path | str | None
) -> tuple[Diagnosis, str | None]:
    """The diagnosis of a capture's run facts and trace (a trace that cannot be read leaves
    the facts alone), and why the trace could not be read, if so."""
    model, problem = None, None
    if trace_path is not None and Path(trace_path).is_file():
        try:
            model = load_trace(trace_path)
        except TraceError as e:
            problem = str(e)
    return diagnose(model, facts), problem
