"""Validation of torchpace's JSON outputs against their schemas in docs/schemas/."""

import json

import pytest
from conftest import ROOT

SCHEMAS = ROOT / "docs" / "schemas"


def validate_output(report: dict, name: str) -> None:
    """``name``: the schema's file stem, e.g. ``doctor_report``. Skips without jsonschema
    (the test extra installs it)."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(report)
