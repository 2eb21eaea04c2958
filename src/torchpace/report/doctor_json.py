"""The doctor's report written as JSON (``--json`` and the run folder's doctor_report.json).
The dict itself is built by ``torchpace.doctor.result``."""

from __future__ import annotations

import json
from pathlib import Path

from torchpace.atomic import write_text_atomic


def write_json(report: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(report, indent=2, default=str))
