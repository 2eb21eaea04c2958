"""The doctor's report written as JSON (``--json`` and the run folder's doctor_report.json):
DoctorReport.to_dict (report/model.py), the layout of docs/schemas/doctor_report.schema.json.
``write_json`` writes any verb's dict (compare's too)."""

from __future__ import annotations

import json
from pathlib import Path

from torchpace.atomic import write_text_atomic
from torchpace.report.model import DoctorReport


def write_report(report: DoctorReport, path: Path) -> None:
    data = report.to_dict()  # the whole dict first, then the one write
    write_json(data, path)


def write_json(report: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(report, indent=2, default=str))
