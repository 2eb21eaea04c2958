"""`[tool.torchpace.lint]` in the nearest pyproject.toml, and the files a run covers."""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from torchpace.catalog import CODES

KEYS = {"select", "ignore", "exclude"}
# Never user code: version control, virtual environments, caches, installed packages.
SKIPPED_DIRS = {
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "__pycache__",
    "site-packages",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
}
CODE_PREFIX = re.compile(r"TP\d{0,3}", re.IGNORECASE)


class ConfigError(Exception):
    """A usage error: the message names the input and says what to do."""


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["TP"])
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    root: Path = field(default_factory=Path.cwd)  # excludes are relative to it
    source: str = "defaults"


def check_prefixes(prefixes: list[str], where: str) -> list[str]:
    for prefix in prefixes:
        if not CODE_PREFIX.fullmatch(prefix) or not any(
            c.startswith(prefix.upper()) for c in CODES
        ):
            raise ConfigError(
                f"{where}: {prefix!r} matches no torchpace code; give a code or a prefix "
                "such as TP101, TP2 or TP (see docs/lint.md for the rule table)"
            )
    return [p.upper() for p in prefixes]


def find_pyproject(start: Path) -> Path | None:
    directory = start if start.is_dir() else start.parent
    for candidate in [directory, *directory.parents]:
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def load_settings(start: Path) -> Settings:
    path = find_pyproject(start.resolve())
    if path is None:
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); fix the file or remove it") from None
    table = data.get("tool", {}).get("torchpace", {}).get("lint", {})
    unknown = set(table) - KEYS
    if unknown:
        raise ConfigError(
            f"{path}: [tool.torchpace.lint] has unknown keys {sorted(unknown)}; "
            f"allowed: {sorted(KEYS)}"
        )
    for key, value in table.items():
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{path}: [tool.torchpace.lint] {key} must be a list of strings")
    where = f"{path} [tool.torchpace.lint]"
    return Settings(
        select=check_prefixes(table.get("select", ["TP"]), where),
        ignore=check_prefixes(table.get("ignore", []), where),
        exclude=list(table.get("exclude", [])),
        root=path.parent,
        source=str(path),
    )


def _excluded(path: Path, settings: Settings) -> bool:
    try:
        relative = path.resolve().relative_to(settings.root.resolve()).as_posix()
    except ValueError:
        relative = path.as_posix()
    return any(
        fnmatch.fnmatch(relative, g) or fnmatch.fnmatch(path.name, g) for g in settings.exclude
    )


def _is_venv(directory: str, names: list[str]) -> bool:
    return "pyvenv.cfg" in names or os.path.basename(directory) in SKIPPED_DIRS


def python_files(given: Path, settings: Settings) -> Iterator[Path]:
    """The Python files under ``given``. A file named on the command line is linted whatever
    its suffix, unless an exclude glob matches it (pre-commit names files one by one).

    Links are followed only where they stay inside ``given``: a link out of the tree could
    reach (and a fix rewrite) files the user never pointed at.
    """
    if not given.is_dir():
        if not _excluded(given, settings):
            yield given
        return
    root = given.resolve()
    for directory, dirs, files in os.walk(given):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIPPED_DIRS
            and not _excluded(Path(directory, d), settings)
            and not os.path.islink(os.path.join(directory, d))
        )
        if _is_venv(directory, files) and Path(directory) != given:
            dirs[:] = []
            continue
        for name in sorted(files):
            path = Path(directory, name)
            if not name.endswith(".py") or _excluded(path, settings):
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(root):
                continue
            yield path
