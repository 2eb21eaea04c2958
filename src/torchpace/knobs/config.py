"""``torchpace.toml``: the configuration `torchpace tune` chose, read by `torchpace run` and
``torchpace.apply()``.

```toml
# written by torchpace tune on 2026-11-23 ...
[torchpace]
version = 1
script = "train.py"          # informative

[knobs]
num-workers = 2
cudnn-benchmark = true

[measured]                   # informative: what tune measured
baseline-ms-per-step = 203.6

[environment]                # the fingerprint (knobs/fingerprint.py)
device = "NVIDIA H100 80GB HBM3 (sm 9.0)"
torch = "2.14"
cores = 16
```

Every section and key is checked: a typo in a knob's name would otherwise be a setting
silently not applied. An error names the file, the line and the key, and lists the valid
names. The file is written by a small serializer for these flat tables (no TOML-writing
dependency) and replaced atomically.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from torchpace.atomic import write_text_atomic
from torchpace.knobs import fingerprint as fp
from torchpace.knobs.fingerprint import Fingerprint

DEFAULT_PATH = "torchpace.toml"
VERSION = 1
SECTIONS = ("torchpace", "knobs", "measured", "environment")
TORCHPACE_KEYS = {"version": int, "script": str}
SCALARS = (bool, int, float, str)


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file, line and key, and says
    what to do."""


class EnvironmentMismatch(ConfigError):
    """The configuration was measured on another machine or torch than this one."""

    def __init__(self, message: str, differences: list[str]):
        super().__init__(message)
        self.differences = differences


@dataclass
class TuneConfig:
    knobs: dict[str, Any]  # registry name -> value
    fingerprint: Fingerprint | None  # None: no [environment] recorded, nothing to check
    measured: dict[str, Any] = field(default_factory=dict)  # informative
    script: str | None = None  # informative: the script it was tuned on
    path: Path | None = None  # where it was read from


# --- reading ----------------------------------------------------------------------------


# A torchpace.toml is a few KiB; a file past this is refused before it is parsed.
MAX_CONFIG_BYTES = 2**20


def load_config(path: Path | str = DEFAULT_PATH) -> TuneConfig:
    path = Path(path)
    try:
        with path.open("rb") as f:  # no more than the cap read: a 50 MB file took 37 s, 1 GB
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; run `torchpace tune your_script.py` first to measure and "
            "write one, or give the configuration's path"
        ) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: over {MAX_CONFIG_BYTES // 2**20} MiB, far more than a configuration "
            "holds (tune writes a few KiB); give the torchpace.toml that tune wrote"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e}); TOML files are UTF-8") from None
    return parse_config(text, path)


def parse_config(text: str, path: Path | str = DEFAULT_PATH) -> TuneConfig:
    path = Path(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise ConfigError(
            f"{where}: not valid TOML: {e}; fix that line, or delete the file and run "
            "`torchpace tune` again"
        ) from None
    checker = _Checker(text, path)
    for name, value in doc.items():
        if name in SECTIONS and isinstance(value, dict):
            continue
        if not isinstance(value, dict):
            problem = (
                f"{name} must be a [{name}] table"
                if name in SECTIONS
                else f"unknown key {name!r} outside the sections"
            )
        else:
            problem = f"unknown section [{name}]"
        checker.fail(None, name, problem, f"the sections are: {_names(SECTIONS)}")
    head = doc.get("torchpace", {})
    for key, value in head.items():
        if key not in TORCHPACE_KEYS:
            checker.unknown("torchpace", key, list(TORCHPACE_KEYS))
        checker.type("torchpace", key, value, TORCHPACE_KEYS[key])
    if head.get("version", VERSION) != VERSION:
        checker.fail(
            "torchpace",
            "version",
            f"version {head['version']} is not one this torchpace reads (it reads {VERSION})",
            "upgrade torchpace, or run `torchpace tune` again with this one",
        )
    knobs = _check_knobs(doc.get("knobs", {}), checker)
    measured = doc.get("measured", {})
    for key, value in measured.items():
        checker.type("measured", key, value, SCALARS)
    env = doc.get("environment")
    fingerprint = None
    if env is not None:
        for key, value in env.items():
            if key not in fp.KEYS:
                checker.unknown("environment", key, list(fp.KEYS))
            checker.type("environment", key, value, fp.KEY_TYPES[key])
        fingerprint = Fingerprint.from_table(env)
    return TuneConfig(knobs, fingerprint, dict(measured), head.get("script"), path)


def _check_knobs(table: dict, checker: _Checker) -> dict:
    import torchpace.knobs as registry

    out = {}
    for name, value in table.items():
        if not registry.is_knob(name):
            checker.unknown("knobs", name, list(registry.NAMES), what="knob")
        expected = _value_type(name)
        if isinstance(value, dict) and getattr(_knob(name), "per_location", False):
            out[name] = _check_per_location(name, value, expected, checker)
            continue
        checker.type("knobs", name, value, expected or SCALARS)
        out[name] = _checked(name, value, expected, checker)
    return out


def _checked(name: str, value, expected, checker: _Checker):
    types = _as_tuple(expected) if expected is not None else SCALARS
    if type(value) is int and float in types and int not in types:
        value = float(value)  # `lr-scale = 2` for a float knob
    _check_value(name, value, checker)
    return value


def _check_per_location(name: str, table: dict, expected, checker: _Checker) -> dict:
    """``num-workers = {"train.py:42" = 0}``: a value per DataLoader, keyed by where the
    script builds it (file:line, as tune's report names it)."""
    if not table:
        checker.fail("knobs", name, f"{name} is an empty table",
                     'give a value, or one per location: {"train.py:42" = 0}')  # fmt: skip
    out = {}
    for location, value in table.items():
        _, sep, line = location.rpartition(":")
        if not sep or not line.isdigit():
            checker.fail("knobs", name, f"{name}: {location!r} is not a location",
                         'locations are file:line, e.g. {"train.py:42" = 0}')  # fmt: skip
        checker.type("knobs", name, value, expected or SCALARS)
        out[location] = _checked(name, value, expected, checker)
    return out


def _knob(name: str):
    import torchpace.knobs as registry

    try:
        return registry.get(name)
    except ImportError:  # the knob's module is absent from this install: apply() will say so
        return None


def _value_type(name: str):
    """The knob's declared ``value_type``, when its module declares one."""
    return getattr(_knob(name), "value_type", None)


def _check_value(name: str, value, checker: _Checker) -> None:
    """The knob's own limits on its value: one of its choices, or at least its minimum."""
    knob = _knob(name)
    choices = getattr(knob, "choices", None)
    if choices is not None and value not in choices:
        valid = ", ".join(format_value(c) for c in choices)
        checker.fail("knobs", name, f"{name} = {format_value(value)} is not a value it takes",
                     f"use one of: {valid}")  # fmt: skip
    minimum = getattr(knob, "minimum", None)
    if minimum is not None and not isinstance(value, bool) and value < minimum:
        checker.fail("knobs", name, f"{name} = {value} is below its least value, {minimum}", "")
    bound = knob.maximum() if hasattr(knob, "maximum") else None
    if bound is not None and not isinstance(value, bool) and value > bound[0]:
        most, why = bound
        checker.fail("knobs", name, f"{name} = {value} is above its most, {most} ({why})",
                     f"use at most {most}; tune's own plan stays far below it")  # fmt: skip


def _as_tuple(t) -> tuple:
    return t if isinstance(t, tuple) else (t,)


def _type_ok(value, expected) -> bool:
    types = _as_tuple(expected)
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and float in types:
        return True
    return isinstance(value, types)


_TOML_TYPE = {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "a string"}


def _type_name(expected) -> str:
    types = _as_tuple(expected)
    if set(types) == set(SCALARS):
        return "a single value (a boolean, number or string)"
    return " or ".join(_TOML_TYPE.get(t, t.__name__) for t in types)


def _names(names) -> str:
    return ", ".join(names)


class _Checker:
    def __init__(self, text: str, path: Path):
        self.text = text
        self.path = path

    def fail(self, table: str | None, key: str, problem: str, hint: str) -> None:
        line = find_line(self.text, table, key)
        where = f"{self.path}:{line}" if line else str(self.path)
        raise ConfigError(f"{where}: {problem}" + (f"; {hint}" if hint else ""))

    def unknown(self, table: str, key: str, valid: list[str], what: str = "key") -> None:
        import difflib

        close = difflib.get_close_matches(key, valid, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        self.fail(
            table,
            key,
            f"unknown {what} {key!r} in [{table}]",
            f"{hint}the {what}s there are: {_names(valid)}",
        )

    def type(self, table: str, key: str, value, expected) -> None:
        if not _type_ok(value, expected):
            self.fail(
                table,
                key,
                f"{key} in [{table}] must be {_type_name(expected)}, not {_toml_kind(value)}",
                "",
            )


def _toml_kind(value) -> str:
    if isinstance(value, bool):
        return f"the boolean {format_value(value)}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {format_value(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*[=.]""")


def find_line(text: str, table: str | None, key: str) -> int | None:
    """The 1-based line of ``key`` in ``[table]`` (or of the header ``[key]`` when table is
    None), found by scanning the text; None when it cannot be placed (an inline table)."""
    current = None
    table_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            current = _unquote(header.group(1))
            if table is None and current == key:
                return number
            if current == table and table_line is None:
                table_line = number
            continue
        m = _KEY.match(line)
        if m and current == table and _unquote(m.group(1)) == key:
            return number
        if m and table is None and current is None and _unquote(m.group(1)) == key:
            return number
    return table_line


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    return s


# --- checking the environment ------------------------------------------------------------


def check_environment(
    config: TuneConfig,
    force: bool = False,
    current: Fingerprint | None = None,
    force_hint: str = "force",
) -> list[str]:
    """The fingerprint differences between the configuration and this environment.

    Raises EnvironmentMismatch naming each one unless ``force``; with ``force`` returns
    them so that the caller can say what it applies anyway.
    """
    if config.fingerprint is None:
        return []
    differences = fp.compare(config.fingerprint, current or fp.current())
    if differences and not force:
        where = config.path or DEFAULT_PATH
        raise EnvironmentMismatch(
            f"{where} was measured in another environment:\n"
            + "".join(f"  - {d}\n" for d in differences)
            + "its settings may be slower here: run `torchpace tune` again in this environment, "
            f"or apply it anyway with {force_hint}",
            differences,
        )
    return differences


def idle_without_cuda(knobs: dict, cuda_available=None) -> str | None:
    """One line naming the knobs of ``knobs`` that do nothing here, because they act on a
    GPU alone and this machine has no CUDA device, and why; None when there are none. A
    configuration with no [environment] table (or one from another machine, forced) would
    otherwise apply them without a word. Imports torch only when such a knob is set."""
    from torchpace import knobs as registry

    idle = {n: registry.get(n).cuda_only for n in knobs if registry.is_knob(n)}
    idle = {n: why for n, why in idle.items() if why}
    if not idle:
        return None
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if cuda_available:
        return None
    reasons = "; ".join(f"{name}: {why}" for name, why in idle.items())
    return (
        f"{', '.join(idle)} will do nothing here: torch sees no CUDA device on this machine "
        f"({reasons}); `torchpace tune` here finds the settings that act on it"
    )


# --- writing ------------------------------------------------------------------------------


def format_value(value) -> str:
    """One TOML value: a boolean, integer, float or basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_escape(c) for c in value) + '"'
    if isinstance(value, dict):  # a value per location: an inline table
        return (
            "{ "
            + ", ".join(f"{format_key(k)} = {format_value(v)}" for k, v in value.items())
            + " }"
        )
    raise TypeError(f"torchpace.toml values are booleans, numbers or strings, not {value!r}")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_ESCAPES["\r"] = "\\r"


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\u{ord(c):04x}"
    return c


def format_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else format_value(key)


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in (text.splitlines() or [""]))


def format_config(
    config: TuneConfig, comments: Sequence[str] = (), date: datetime.date | None = None
) -> str:
    """The file's text; ``comments`` go at the top (what was measured, the speedup)."""
    import torchpace.knobs as registry

    for name in config.knobs:
        if not registry.is_knob(name):
            raise ValueError(f"no tune knob named {name!r}")
    import datetime

    when = (date or datetime.date.today()).isoformat()
    header = _comment(f"written by torchpace tune on {when}")
    header += "".join(_comment(c) for c in comments)
    header += _comment(
        "use it with `torchpace run script.py args...`, or call torchpace.apply() at the top "
        "of the script; see docs/run.md"
    )
    out = []
    head = {"version": VERSION}
    if config.script:
        head["script"] = config.script
    out.append(_table("torchpace", head))
    order = {name: i for i, name in enumerate(registry.NAMES)}
    knobs = dict(sorted(config.knobs.items(), key=lambda kv: order.get(kv[0], len(order))))
    out.append(_table("knobs", knobs))
    if config.measured:
        out.append(_table("measured", config.measured))
    if config.fingerprint is not None:
        out.append(_table("environment", config.fingerprint.to_table()))
    return header + "\n" + "\n".join(out)


def _table(name: str, values: dict) -> str:
    return f"[{name}]\n" + "".join(
        f"{format_key(k)} = {format_value(v)}\n" for k, v in values.items()
    )


def write_config(path: Path | str, config: TuneConfig, comments: Sequence[str] = ()) -> None:
    """Writes the file atomically; what it wrote reads back as ``config``."""
    text = format_config(config, comments)
    parse_config(text, path)  # a value this serializer cannot express fails here, not later
    write_text_atomic(path, text)
