"""The doctor's report written as JSON (``--json`` and the run folder's doctor_report.json).
The dict itself is built by ``torchpace.doctor.result``."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(report: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    tmp.replace(path)
