"""Reading the report's dataclasses back from JSON written by this version or an earlier one,
and writing enum-keyed dicts: shared by every part of the doctor's report (report/model.py,
memory_model.py, comms_model.py, window_model.py)."""

from __future__ import annotations

import dataclasses
from typing import Any


def known(cls, d: dict, **overrides) -> Any:
    """``cls`` from the keys of ``d`` it has fields for (others ignored: a newer writer); a
    field ``d`` lacks (an older writer) takes its default, else None."""
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            kwargs[f.name] = overrides[f.name]
        elif f.name in d:
            kwargs[f.name] = d[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = None
    return cls(**kwargs)


def enum_keyed(enum, d: dict | None, value) -> dict:
    """A JSON object keyed by an enum's values, read back with the enum's members as keys
    (keys it does not know are left out)."""
    known = {m.value: m for m in enum}
    return {known[k]: value(v) for k, v in (d or {}).items() if k in known}


def str_keyed(d: dict) -> dict:
    return {str(k): v for k, v in d.items()}
