"""docs/codes/<CODE>.md, written from the source: ``python -m torchpace.code_pages``.

A code's page is its catalog entry (the heading and the line under it: the title, the
name, the practices, who sees it, the tune knobs that answer it) followed by the docs of
what finds it: the lint rule's docstring, then the doctor check's. A docstring's sections
(from its first ``## `` heading on) are the page; what comes before them is for the reader
of the code. So the page and the rule cannot drift apart, as ruff renders ``ruff rule
CODE`` from the rule's own source. A code that no single rule or check owns (TP404, made
from the memory analysis; TP505, from the cross-rank view; TP901 and TP902, torchpace's own
diagnostics) keeps the body written in its page; its heading is generated all the same.

``--check`` writes nothing and exits 1 naming each page that differs from its source (the
test suite runs it); without it, every page that differs is rewritten.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from torchpace import catalog, knobs
from torchpace.atomic import write_text_atomic
from torchpace.doctor.checks import FAMILIES
from torchpace.lint.rules import RULES

# The repository's docs/codes/, from this file's place in src/torchpace/.
CODES_DIR = Path(__file__).resolve().parents[2] / "docs" / "codes"
SECTION = "## "


def rules_by_code() -> dict[str, type]:
    return {rule.code: rule for rule in RULES}


def checks_by_code() -> dict[str, type]:
    return {check.code: type(check) for family in FAMILIES for check in family.CHECKS}


def sections_of(doc: str | None) -> str:
    """A docstring's ``## `` sections, the page's part of it ('' when it has none)."""
    text = inspect.cleandoc(doc or "")
    at = text.find(SECTION) if text.startswith(SECTION) else text.find("\n" + SECTION)
    return "" if at < 0 else text[at:].strip("\n")


def heading(entry: catalog.Code, has_rule: bool) -> str:
    """The page's first lines, from the catalog and the knob registry."""
    if has_rule:
        kind = "Lint rule"
    elif entry.code[2] == "9":  # the family of torchpace's own diagnostics
        kind = "Doctor finding" if "doctor" in entry.seen_by else "Lint diagnostic"
    else:
        kind = "Doctor check"
    line = f"{kind}: `{entry.name}`"
    if entry.practices:
        word = "practice" if len(entry.practices) == 1 else "practices"
        line += f" ({word} {', '.join(entry.practices)})"
    line += f". Seen by: {', '.join(entry.seen_by)}."
    answering = [name for name in knobs.NAMES if entry.code in knobs.get(name).answers]
    if answering:
        word = "Tune knob" if len(answering) == 1 else "Tune knobs"
        line += f" {word}: {', '.join(f'`{name}`' for name in answering)}."
    return f"# {entry.code}: {entry.title}\n\n{line}\n"


def body_of_page(text: str) -> str:
    """A written page's sections: everything from its first ``## `` heading."""
    return sections_of(text)


def render(code: str, current: str | None) -> str:
    """The page of ``code``: the heading, then the sections of its rule's and its check's
    docstrings; for a code neither owns, the sections already in ``current``."""
    entry = catalog.CODES[code]
    rule, check = rules_by_code().get(code), checks_by_code().get(code)
    owned = [sections_of(owner.__doc__) for owner in (rule, check) if owner is not None]
    if any(owned):
        body = "\n\n".join(part for part in owned if part)
    else:
        body = body_of_page(current or "")
    return heading(entry, rule is not None) + ("\n" + body + "\n" if body else "")


def undocumented(code: str) -> list[str]:
    """The rule or check of ``code`` whose docstring has no sections yet: writing its page
    would drop the part of it that the page holds alone."""
    owners = (rules_by_code().get(code), checks_by_code().get(code))
    return [o.__name__ for o in owners if o is not None and not sections_of(o.__doc__)]


def stale(codes_dir: Path = CODES_DIR) -> dict[Path, str]:
    """Each page that differs from its source, with the text it should have (pages whose
    rule or check has no docs yet are left out: ``undocumented``)."""
    out = {}
    for code in catalog.CODES:
        if undocumented(code):
            continue
        path = codes_dir / f"{code}.md"
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        wanted = render(code, current)
        if wanted != current:
            out[path] = wanted
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchpace.code_pages",
        description="write docs/codes/<CODE>.md from the lint rules' and doctor checks' "
        "docstrings and the catalog",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--dir", type=Path, default=CODES_DIR, help="the pages' folder")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"{args.dir} is not a folder: give --dir the docs/codes/ folder", file=sys.stderr)
        return 2
    missing = {code: names for code in catalog.CODES if (names := undocumented(code))}
    for code, names in missing.items():
        print(
            f"{code}: {', '.join(names)} has no '## ' sections in its docstring: move its part "
            f"of {args.dir / (code + '.md')} there first (its page is left as it is)",
            file=sys.stderr,
        )
    pages = stale(args.dir)
    for path, text in pages.items():
        if args.check:
            print(f"{path}: differs from its rule's or check's docstring", file=sys.stderr)
        else:
            write_text_atomic(path, text)
            print(f"wrote {path}")
    return 1 if missing or (args.check and pages) else 0


if __name__ == "__main__":
    sys.exit(main())
