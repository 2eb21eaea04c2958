"""Lint on real code: pytorch/examples (../shared/corpus), against a reviewed golden file.

tests/lint/corpus/pytorch_examples.txt holds every finding with a verdict ("right" or "false
alarm", and why), the true problems lint misses, and the safe fixes `--fix` makes. The tests
skip where the corpus folder is absent.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import pytest
import torch
from libcst.metadata import MetadataWrapper, PositionProvider
from lint_helpers import observable

from torchpace.lint.engine import lint_bytes
from torchpace.lint.index import build_index
from torchpace.lint.rule import SAFE
from torchpace.lint.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "pytorch_examples"
GOLDEN = Path(__file__).parent / "corpus" / "pytorch_examples.txt"
MISSED = re.compile(r"missed: (?P<path>\S+):(?P<line>\d+) (?P<code>TP\d+) x(?P<count>\d+) ")
FIX = re.compile(r"fix: (?P<path>\S+):(?P<line>\d+) (?P<before>.+) -> (?P<after>.+)")
VERDICT = re.compile(r"    (?P<verdict>right|false alarm): \S")


@dataclass
class Golden:
    findings: list[str]  # `path:line:column CODE message`
    verdicts: list[str]  # "right" or "false alarm", one per finding
    missed: list[re.Match]
    fixes: list[tuple[str, int, str, str]]  # (path, line, before, after)

    @property
    def right(self) -> int:
        return self.verdicts.count("right")

    def recall(self, code: str, found: int) -> tuple[int, int]:
        missed = sum(int(m["count"]) for m in self.missed if m["code"] == code)
        return found, found + missed


def read_golden() -> Golden:
    golden = Golden([], [], [], [])
    for line in GOLDEN.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("    "):
            match = VERDICT.match(line)
            assert match, f"a verdict is 'right: why' or 'false alarm: why', not {line!r}"
            assert len(golden.verdicts) == len(golden.findings) - 1, f"second verdict: {line}"
            golden.verdicts.append(match["verdict"])
        elif line.startswith("missed:"):
            match = MISSED.match(line)
            assert match, f"malformed: {line}"
            golden.missed.append(match)
        elif line.startswith("fix:"):
            match = FIX.match(line)
            assert match, f"malformed: {line}"
            golden.fixes.append(
                (match["path"], int(match["line"]), match["before"], match["after"])
            )
        else:
            golden.findings.append(line)
    assert len(golden.verdicts) == len(golden.findings), "every finding needs its verdict"
    return golden


@pytest.fixture(scope="module")
def corpus() -> dict[str, bytes]:
    if not CORPUS.is_dir():
        pytest.skip(f"{CORPUS} is absent (the shared corpus is not in this checkout)")
    return {p.relative_to(CORPUS).as_posix(): p.read_bytes() for p in sorted(CORPUS.rglob("*.py"))}


@pytest.fixture(scope="module")
def results(corpus):
    return {path: lint_bytes(data, path, RULES) for path, data in corpus.items()}


def _lines(results) -> list[str]:
    return [
        f"{v.path}:{v.line}:{v.column} {v.code} {v.message}"
        for path in sorted(results, key=lambda p: Path(p).parts)  # as the CLI walks folders
        for v in results[path].violations
    ]


@pytest.mark.slow
def test_findings_on_pytorch_examples_match_the_reviewed_golden_file(results):
    assert all(r.error is None for r in results.values())
    assert _lines(results) == read_golden().findings


@pytest.mark.slow
def test_the_missed_problems_are_still_missed(results):
    """A miss that lint starts finding must move to the findings, with its verdict."""
    for missed in read_golden().missed:
        found = results[missed["path"]].violations
        assert not [v for v in found if v.code == missed["code"] and v.line == int(missed["line"])]


def test_the_user_guide_states_the_measured_precision():
    golden = read_golden()
    guide = (ROOT / "docs" / "lint.md").read_text()
    total = len(golden.findings)
    assert f"{golden.right} of {total} findings right" in guide
    # the recall table: found and true cases (found + missed) as the golden file has them
    rows = re.findall(r"^\| (TP\d+) \| (\d+) \| (\d+) \| \d+% \|", guide, re.MULTILINE)
    assert rows, "docs/lint.md has no recall table"
    for code, found, true_cases in rows:
        right = sum(
            1
            for finding, verdict in zip(golden.findings, golden.verdicts, strict=True)
            if finding.split()[1] == code and verdict == "right"
        )
        assert (int(found), int(true_cases)) == golden.recall(code, right), code


@pytest.mark.slow
def test_every_safe_fix_on_the_corpus_keeps_the_values(corpus):
    """`--fix` on pytorch/examples: each rewritten expression, before and after, evaluated on
    the CPU with the same seed, gives the same value; the fixes are the ones reviewed."""
    made = []
    for path, data in corpus.items():
        module = lint_bytes(data, path, RULES)  # parses, or the golden test fails first
        if not any(v.fixable and v.fix_safety == SAFE for v in module.violations):
            continue
        tree = cst.parse_module(data)
        index = build_index(data.decode(tree.encoding), tree)
        positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
        empty = cst.Module(body=[])
        for rule in RULES:
            for finding in rule().check(index):
                if finding.fixable and finding.fix_safety == SAFE:
                    line = positions[finding.replace].start.line
                    before = tree.code_for_node(finding.replace)
                    after = empty.code_for_node(finding.replacement)
                    made.append((path, line, before, after))
                    assert _evaluate(after) == _evaluate(before), f"{path}: {before} -> {after}"
    assert sorted(made) == sorted(read_golden().fixes)
    # the whole `--fix` result still compiles
    for path, data in corpus.items():
        fixed = lint_bytes(data, path, RULES, fix=SAFE).new_source
        if fixed is not None:
            compile(fixed, path, "exec")


# Values for the free names of the fixed expressions: any device index or name becomes the
# CPU (this machine has no GPU); anything else must be added here by hand.
DEVICE_NAME = re.compile(r"device|rank|gpu|cuda", re.IGNORECASE)
BINDINGS: dict[str, object] = {}


def _evaluate(expression: str):
    names = {
        node.id
        for node in ast.walk(ast.parse(expression, mode="eval"))
        if isinstance(node, ast.Name)
    }
    namespace: dict = {"torch": torch}
    for name in names - {"torch"} - set(dir(builtins)):
        if DEVICE_NAME.search(name):
            namespace[name] = torch.device("cpu")
        else:
            assert name in BINDINGS, f"give {name!r} of {expression!r} a value in BINDINGS"
            namespace[name] = BINDINGS[name]
    torch.manual_seed(0)
    return observable(eval(expression, namespace))
