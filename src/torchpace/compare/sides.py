"""One side of a comparison: a doctor run folder, a doctor report file, or a trace (analysed
here as `torchpace doctor --trace` would), read into the doctor's report (DoctorReport)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from torchpace import run_files
from torchpace.capture.window import TRACE_NAME
from torchpace.facts.run import FACTS_NAME, RunFacts
from torchpace.report.model import DoctorReport

DOCTOR_REPORT = run_files.DOCTOR_REPORT
TUNE_REPORT = run_files.TUNE_REPORT
TRACE_SUFFIXES = (".json", ".json.gz")


class CompareInputError(ValueError):
    """A or B is not something compare can read; the message names it and says what to give."""


@dataclass(frozen=True)
class Side:
    path: Path  # as the user gave it
    report: DoctorReport
    trace: Path | None  # the trace beside it, for the operator and kernel deltas


def load_side(path: Path) -> Side:
    path = Path(path)
    if not path.exists():
        raise CompareInputError(
            f"{path} does not exist; give a run folder that `torchpace doctor` wrote "
            "(torchpace-runs/<timestamp>/) or a torch.profiler trace"
        )
    if path.is_dir():
        return _folder(path)
    if path.name.endswith(TRACE_SUFFIXES) and not _is_doctor_report(path):
        return Side(path, _analyse(path), path)
    if _is_doctor_report(path):
        report = _read_report(path)
        return Side(path, report, _trace_beside(path.parent, report))
    raise CompareInputError(
        f"{path} is neither a doctor run folder, a doctor report nor a trace "
        "(.json/.json.gz from torch.profiler)"
    )


def _folder(path: Path) -> Side:
    report_path = path / DOCTOR_REPORT
    if report_path.is_file():
        report = _read_report(report_path)
        return Side(path, report, _trace_beside(path, report))
    trace = path / TRACE_NAME
    if trace.is_file():
        return Side(path, _analyse(trace), trace)
    if (path / TUNE_REPORT).is_file():
        raise CompareInputError(
            f"{path} is a tune run; compare reads doctor runs: run `torchpace doctor` on the "
            "script before and after the change (tune's own report already compares its trials)"
        )
    raise CompareInputError(
        f"{path} holds neither {DOCTOR_REPORT} nor {TRACE_NAME}; give a folder that "
        "`torchpace doctor` wrote, or the trace file itself"
    )


def _is_doctor_report(path: Path) -> bool:
    if not path.name.endswith(".json"):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(512)
    except OSError:
        return False
    return '"verb": "doctor"' in head


def _read_report(path: Path) -> DoctorReport:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CompareInputError(f"{path} could not be read as a doctor report: {e}") from e
    if not isinstance(report, dict) or report.get("verb") != "doctor":
        raise CompareInputError(f'{path} is not a doctor report (no "verb": "doctor")')
    if "per_step" not in report:
        raise CompareInputError(
            f"{path} was written by an older torchpace (no per-step numbers); run "
            "`torchpace doctor` again, or compare the traces themselves"
        )
    try:
        return DoctorReport.from_dict(report)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CompareInputError(
            f"{path} is a doctor report this torchpace cannot read ({type(e).__name__}: {e}); "
            "run `torchpace doctor` again, or compare the traces themselves"
        ) from e


def _trace_beside(folder: Path, report: DoctorReport) -> Path | None:
    here = folder / TRACE_NAME
    if here.is_file():
        return here
    recorded = Path(report.trace) if report.trace else None
    return recorded if recorded is not None and recorded.is_file() else None


def _analyse(trace: Path) -> DoctorReport:
    from torchpace.doctor.analyze import diagnose
    from torchpace.doctor.result import build_report
    from torchpace.trace import TraceError, load_trace

    try:
        model = load_trace(trace)
    except TraceError as e:
        raise CompareInputError(str(e)) from e
    facts_path = trace.parent / FACTS_NAME
    facts = None
    if facts_path.is_file():
        try:
            facts = RunFacts.load(facts_path)
        except (OSError, ValueError, TypeError, KeyError):
            facts = None  # a trace alone is still comparable
    return build_report(diagnose(model, facts))
