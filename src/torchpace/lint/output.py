"""Findings as text (like ruff), JSON, or GitHub Actions annotations."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from torchpace.lint.engine import FileResult, Violation


def _github_escape(text: str, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def text_line(v: Violation) -> str:
    return f"{v.path}:{v.line}:{v.column}: {v.code} [{v.name}] {v.message}"


def github_line(v: Violation) -> str:
    return (
        f"::warning file={_github_escape(v.path, True)},line={v.line},col={v.column},"
        f"title={_github_escape(f'{v.code} {v.name}', True)}::{_github_escape(v.message)}"
    )


def summary(results: list[FileResult], fix_mode: str | None) -> str:
    violations = [v for r in results for v in r.violations]
    fixed = sum(r.fixed for r in results)
    failed = sum(1 for r in results if r.error)
    files = f"{failed} file{'s' if failed != 1 else ''}"
    not_linted = (
        f"{files} could not be read, parsed or fixed, or {'were' if failed != 1 else 'was'} "
        "skipped (named on standard error)."
    )
    if not violations and not fixed:
        # Never "All checks passed." when a file could not be read: it was not checked.
        return (
            f"No problems found in the other files; {not_linted}"
            if failed
            else "All checks passed."
        )
    total = len(violations) + fixed
    parts = [f"Found {total} problem{'s' if total != 1 else ''}"]
    if fixed:
        parts.append(f" ({fixed} fixed, {len(violations)} remaining)")
    lines = ["".join(parts) + "."]
    safe = sum(1 for v in violations if v.fixable and v.fix_safety == "safe")
    unsafe = sum(1 for v in violations if v.fixable and v.fix_safety == "unsafe")
    if safe and fix_mode is None:
        lines.append(f"{safe} fixable with the --fix option.")
    if unsafe and fix_mode != "unsafe":
        lines.append(f"{unsafe} more fixable with --fix --unsafe-fixes (read docs/lint.md first).")
    if failed:
        lines.append(not_linted)
    return "\n".join(lines)


# docs/schemas/lint_report.schema.json; raised when a key is renamed, removed or changes
# meaning (version 1 replaced the bare list of findings of earlier releases)
SCHEMA_VERSION = 1


def report(
    results: list[FileResult], fmt: str, fix_mode: str | None, out: TextIO | None = None
) -> None:
    out = out or sys.stdout
    errors = [r.error for r in results if r.error]
    violations = [v for r in results for v in r.violations]
    if fmt == "json":
        from torchpace._version import __version__

        document = {
            "schema_version": SCHEMA_VERSION,
            "verb": "lint",
            "torchpace": __version__,
            "files": len(results),
            "findings": [v.to_dict() for v in violations],
            "errors": errors,  # files that could not be linted, and why
        }
        json.dump(document, out, indent=2)
        out.write("\n")
    elif fmt == "github":
        for v in violations:
            out.write(github_line(v) + "\n")
        for error in errors:
            out.write(f"::error::{_github_escape(error)}\n")
    else:
        for v in violations:
            out.write(text_line(v) + "\n")
        out.write(summary(results, fix_mode) + "\n")
    for error in errors:
        print(f"torchpace lint: {error}", file=sys.stderr)
    for note in (n for r in results for n in r.notes):
        print(f"torchpace lint: note: {note}", file=sys.stderr)
