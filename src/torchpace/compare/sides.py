"""One side of a comparison: a doctor run folder, a doctor report file, or a trace (analysed
here as `torchpace doctor --trace` would), read into the doctor's report (DoctorReport)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
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
    # the trace's model when this side was analysed from it (a large trace is read once)
    model: object | None = field(default=None, compare=False, repr=False)


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
        return _analysed(path, path)
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
        return _analysed(path, trace)
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
    except RecursionError:
        raise CompareInputError(
            f"{path} nests its JSON deeper than a doctor report does; it is not one"
        ) from None
    if not isinstance(report, dict) or report.get("verb") != "doctor":
        raise CompareInputError(f'{path} is not a doctor report (no "verb": "doctor")')
    _check_version(report, path)
    if "per_step" not in report:
        raise CompareInputError(
            f"{path} was written by an older torchpace (no per-step numbers); run "
            "`torchpace doctor` again, or compare the traces themselves"
        )
    _check_layout(report, path)
    try:
        return DoctorReport.from_dict(report)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CompareInputError(
            f"{path} is a doctor report this torchpace cannot read ({type(e).__name__}: {e}); "
            "run `torchpace doctor` again, or compare the traces themselves"
        ) from e


def _check_version(report: dict, path: Path) -> None:
    from torchpace.doctor.result import SCHEMA_VERSION

    version = report.get("schema_version")
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        raise CompareInputError(
            f"{path} has schema_version {version!r}; this torchpace reads doctor reports of "
            f"schema_version 1 to {SCHEMA_VERSION}: compare it with the torchpace that wrote "
            "it, or run `torchpace doctor` again"
        )


def _number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


# What compare reads of a report, by key: (what it must be, the check). A report edited by
# hand or damaged is refused with the key named, not met with a traceback halfway through.
_ROWS = {
    "per_step": ("a list of objects with a finite wall_ms",
                 lambda v: isinstance(v, list) and all(
                     isinstance(s, dict) and _number(s.get("wall_ms")) for s in v)),
    "steps_recorded": ("a list of objects with a phase and a finite wall_ms",
                       lambda v: isinstance(v, list) and all(
                           isinstance(s, dict) and isinstance(s.get("phase"), str)
                           and _number(s.get("wall_ms")) for s in v)),
    "breakdown_ms": ("an object of {median: a number}",
                     lambda v: isinstance(v, dict) and all(
                         isinstance(x, dict) and _number(x.get("median")) for x in v.values())),
    "findings": ("a list of objects with code, title, severity",
                 lambda v: isinstance(v, list) and all(
                     isinstance(f, dict) and all(isinstance(f.get(k), str)
                                                 for k in ("code", "title", "severity"))
                     for f in v)),
    "loaders": ("a list of objects", lambda v: isinstance(v, list) and all(
        isinstance(x, dict) and _number(x.get("batches_seen", 0))
        and (x.get("batch_size") is None or _number(x["batch_size"])) for x in v)),
    "memory": ("an object whose peaks are numbers", lambda v: isinstance(v, dict) and all(
        _number(x) for k, x in v.items() if k.endswith("_peak_bytes") or k == "host_rss_bytes")),
    "gpu": ("an object with gpu_busy_ms's median", lambda v: isinstance(v, dict) and (
        v.get("gpu_busy_ms") is None or (isinstance(v["gpu_busy_ms"], dict) and (
            v["gpu_busy_ms"].get("median") is None or _number(v["gpu_busy_ms"]["median"]))))),
    "device": ("an object", lambda v: isinstance(v, dict)),
    "process": ("an object", lambda v: isinstance(v, dict)),
    "env": ("an object", lambda v: isinstance(v, dict)),
    "status": ("a string", lambda v: isinstance(v, str)),
    "command": ("a list of strings", lambda v: isinstance(v, list)
                and all(isinstance(x, str) for x in v)),
}  # fmt: skip


def _check_layout(report: dict, path: Path) -> None:
    for key, (expected, ok) in _ROWS.items():
        value = report.get(key)
        if value is not None and not ok(value):
            raise CompareInputError(
                f"{path}: {key!r} is not {expected} as the doctor writes it; the report was "
                "edited or damaged: run `torchpace doctor` again"
            )


def _trace_beside(folder: Path, report: DoctorReport) -> Path | None:
    here = folder / TRACE_NAME
    if here.is_file():
        return here
    recorded = Path(report.trace) if report.trace else None
    return recorded if recorded is not None and recorded.is_file() else None


def _analysed(path: Path, trace: Path) -> Side:
    """The side ``path`` from its trace, analysed here as `doctor --trace` would."""
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
    return Side(path, build_report(diagnose(model, facts)), trace, model)
