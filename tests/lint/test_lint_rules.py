"""Every rule against its golden fixtures and its own examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lint_helpers import (
    FIXTURES,
    RULES_BY_NAME,
    expected_lines,
    fix_fixtures,
    fixed_source,
    lint_fixtures,
    rule_for,
)

from torchpace.catalog import CODES
from torchpace.lint.engine import lint_bytes
from torchpace.lint.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
DOC_SECTIONS = ("## What it does", "## Why it matters", "## Example", "## Use instead")


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("fixture", lint_fixtures(), ids=_id)
def test_findings_match_the_golden_file(fixture: Path):
    expected = fixture.with_suffix(".txt").read_text().splitlines()
    assert expected_lines(fixture) == expected


@pytest.mark.parametrize("fixture", fix_fixtures(), ids=_id)
def test_fix_matches_the_golden_file(fixture: Path):
    out = Path(str(fixture).replace(".in.py", ".out.py"))
    assert fixed_source(fixture) == out.read_bytes()


@pytest.mark.parametrize("fixture", lint_fixtures() + fix_fixtures(), ids=_id)
def test_fixing_twice_changes_nothing_the_second_time(fixture: Path):
    once = lint_bytes(fixture.read_bytes(), "f.py", RULES, fix="unsafe")
    source = once.new_source or fixture.read_bytes()
    twice = lint_bytes(source, "f.py", RULES, fix="unsafe")
    assert twice.new_source is None and twice.fixed == 0
    compile(source, str(fixture), "exec")  # every fixed file still parses


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_examples(rule):
    assert rule.VALID and rule.INVALID, f"{rule.code} needs its own examples"
    for snippet in rule.VALID:
        found = lint_bytes(snippet.encode(), "valid.py", [rule]).violations
        assert not found, f"{rule.code} false alarm on:\n{snippet}"
    for snippet in rule.INVALID:
        found = lint_bytes(snippet.encode(), "invalid.py", [rule]).violations
        assert [v.code for v in found] and {v.code for v in found} == {rule.code}, snippet


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_metadata_and_docs(rule):
    entry = CODES[rule.code]
    assert "lint" in entry.seen_by
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name())
    assert rule.message and rule.fix_safety in (None, "safe", "unsafe")
    assert (rule.fix_title is None) == (rule.fix_safety is None)
    page = (ROOT / entry.doc_path).read_text()
    for section in (*DOC_SECTIONS, "## Fix safety"):
        assert section in page, f"{entry.doc_path} lacks {section}"
    assert f"`{rule.name()}`" in page, f"{entry.doc_path} does not name the rule"
    assert (FIXTURES / rule.name()).is_dir(), f"no fixtures for {rule.name()}"


def test_codes_are_unique_and_cover_every_lint_code_of_the_catalog():
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    # family 9 is lint's report about itself (TP902: a file it skipped), not a rule
    rule_codes = {c for c, e in CODES.items() if "lint" in e.seen_by and c[2] != "9"}
    assert set(codes) == rule_codes
    assert set(RULES_BY_NAME) == {p.name for p in FIXTURES.iterdir() if p.is_dir()}


def test_rules_without_fix_offer_none():
    for rule in RULES:
        if rule.fix_safety is None:
            for snippet in rule.INVALID:
                found = lint_bytes(snippet.encode(), "x.py", [rule]).violations
                assert not any(v.fixable for v in found), rule.code


def test_fixture_rule_lookup():
    assert rule_for(FIXTURES / "data-parallel" / "dp.py").code == "TP501"


def test_user_guide_lists_every_rule():
    guide = (ROOT / "docs" / "lint.md").read_text()
    for rule in RULES:
        assert f"[{rule.code}](codes/{rule.code}.md) | `{rule.name()}`" in guide
