"""Deeply nested files: skipped with TP902 by name, never a crash, the other files linted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from torchpace.lint.depth import MAX_BRACKETS, MAX_NESTING, too_deep
from torchpace.lint.engine import lint_bytes
from torchpace.lint.rules import RULES

FIXABLE = "import torch\nx = torch.zeros(3).cuda()\n"
FIXED = 'import torch\nx = torch.zeros(3, device="cuda")\n'
PARENS_2000 = "x = " + "(" * 2000 + "1" + ")" * 2000 + "\n"
SUM_8000 = "x = " + "+".join(["1"] * 8000) + "\n"


def _lint(*args: str) -> subprocess.CompletedProcess:
    # A separate process: before TP902 these files crashed the interpreter (exit 139).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "torchpace", "lint", "--jobs", "1", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _tree(tmp_path):
    (tmp_path / "parens.py").write_text(PARENS_2000)
    (tmp_path / "long_sum.py").write_text(SUM_8000)
    (tmp_path / "train.py").write_text(FIXABLE)
    return tmp_path


@pytest.mark.parametrize("fix", [False, True], ids=["lint", "fix"])
def test_deep_files_are_skipped_by_name_and_the_others_linted(tmp_path, fix):
    tree = _tree(tmp_path)
    proc = _lint(*(["--fix"] if fix else []), str(tree))
    assert proc.returncode == 2, proc.stderr  # as for a file that does not parse
    for name, line in (("parens.py", 1), ("long_sum.py", 1)):
        assert f"{tree / name}:{line}: TP902 [source-too-deeply-nested]" in proc.stderr
        assert "skipped" in proc.stderr
    assert (tree / "parens.py").read_text() == PARENS_2000
    assert (tree / "long_sum.py").read_text() == SUM_8000
    assert "2 files could not be read, parsed or fixed, or were skipped" in proc.stdout
    if fix:
        assert (tree / "train.py").read_text() == FIXED
        assert "1 fixed" in proc.stdout
    else:
        assert f"{tree / 'train.py'}:2:5: TP105" in proc.stdout


def test_json_lists_the_skipped_files_in_errors(tmp_path):
    proc = _lint("--format", "json", str(_tree(tmp_path)))
    report = json.loads(proc.stdout)
    assert [f["code"] for f in report["findings"]] == ["TP105"]
    assert sorted(e.split(":")[0].rsplit("/", 1)[-1] for e in report["errors"]) == [
        "long_sum.py",
        "parens.py",
    ]
    assert all("TP902" in e for e in report["errors"])


def test_a_valid_1000_term_sum_is_linted_not_an_internal_error():
    source = "x = " + "+".join(["1"] * 1000) + "\n" + FIXABLE
    result = lint_bytes(source.encode(), "s.py", RULES)
    assert result.error is None, result.error  # was: internal error RecursionError
    assert [(v.line, v.code) for v in result.violations] == [(3, "TP105")]
    longer = "x = " + "+".join(["1"] * 1200) + "\n"
    assert lint_bytes(longer.encode(), "s.py", RULES).error.startswith("s.py:1: TP902")


def test_deep_but_allowed_code_is_linted_and_fixed_by_libcst():
    """Nesting under the limits but past Python's default recursion limit (1000 frames): the
    parse, the walk, the positions and libcst's fix all recurse through it."""
    terms = "+".join(["1"] * 600)
    source = f"import torch\nx = {terms} + torch.zeros(3).cuda()\n"
    result = lint_bytes(source.encode(), "deep.py", RULES, fix="safe")
    assert result.error is None and result.fixed == 1
    assert (
        result.new_source
        == source.replace(".cuda()", "").replace("zeros(3)", 'zeros(3, device="cuda")').encode()
    )
    brackets = MAX_BRACKETS - 5
    nested = "import torch\nx = " + "f(" * brackets + "torch.zeros(3).cuda()" + ")" * brackets
    result = lint_bytes(nested.encode(), "nested.py", RULES)
    assert result.error is None and [(v.line, v.code) for v in result.violations] == [(2, "TP105")]


SHAPES = {
    "parentheses": lambda n: "x = " + "(" * n + "1" + ")" * n,
    "lists": lambda n: "x = " + "[" * n + "]" * n,
    "calls": lambda n: "x = " + "f(" * n + ")" * n,
    "sum": lambda n: "x = " + "+".join(["a"] * (n + 1)),
    "attributes": lambda n: "x = a" + ".b" * n,
    "trailers": lambda n: "x = f" + "()" * n,
    "subscripts": lambda n: "x = a" + "[0]" * n,
    "booleans": lambda n: "x = " + " and ".join(["a"] * (n + 1)),
    "not": lambda n: "x = " + "not " * n + "a",
    "unary": lambda n: "x = " + "-" * n + "a",
    "ternary": lambda n: "x = " + " if c else ".join(["a"] * (n // 2 + 1)),
    "lambdas": lambda n: "x = " + "lambda: " * (n // 2) + "a",
    "strings": lambda n: "x = " + " ".join(['"a"'] * (n + 1)),
    "elif": lambda n: "if a:\n    pass\n" + "elif a:\n    pass\n" * n,
    "split lines": lambda n: "x = (\n" + "a +\n" * n + "a)",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_of_nesting_counts(shape):
    make = SHAPES[shape]
    limit = MAX_BRACKETS if shape in ("parentheses", "lists", "calls") else MAX_NESTING
    assert too_deep((make(limit + 10) + "\n").encode()) is not None
    assert too_deep((make(limit // 2) + "\n").encode()) is None


def test_long_flat_code_is_not_deep():
    flat = "x = [" + ", ".join(f"a{i} + b{i}" for i in range(5000)) + "]\n"
    flat += "".join(f"def f{i}(a, b):\n    return a + b\n" for i in range(2000))
    assert too_deep(flat.encode()) is None


def test_untokenizable_files_are_left_to_the_parser():
    assert too_deep(b"x = (\n") is None  # the parser then says why it cannot parse it
    result = lint_bytes(b"x = (\n", "open.py", RULES)
    assert "cannot parse" in result.error
