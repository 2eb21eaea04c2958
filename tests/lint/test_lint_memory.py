"""A large file is linted in parts, one syntax tree at a time (issue 23: a 5 MB file took
3 GB, libcst's tree of the whole file). Counted and compared, not timed."""

from __future__ import annotations

import gc

import libcst as cst
import pytest

from torchpace.lint import engine, parts
from torchpace.lint.engine import lint_bytes
from torchpace.lint.parts import plan_parts
from torchpace.lint.rules import RULES

HEADER = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader\n"
# Findings that need more than one top-level statement: a loader built by a function of its
# own (TP101, TP102 at the loop), a BatchNorm after a biased conv (TP203, fixable), a
# `.item()` every step (TP3xx); and a decorated function, an if/else and a try/except at
# the top level, which must each stay one statement.
BLOCK = """

class Net{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))


def make_loader_{i}(dataset):
    return DataLoader(dataset, batch_size=64)


@torch.no_grad()
def evaluate_{i}(model, loader):
    return [model(x.cuda()) for x, _ in loader]


if torch.cuda.is_available():
    DEVICE_{i} = "cuda"
else:
    DEVICE_{i} = "cpu"

try:
    import apex  # noqa: F401
except ImportError:
    pass


def train_{i}(dataset, optimizer):
    model = Net{i}().to(DEVICE_{i})
    total = 0.0
    for x, y in make_loader_{i}(dataset):
        loss = model(x.to(DEVICE_{i})).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total
"""


def generated(size: int) -> bytes:
    text, i = [HEADER], 0
    while sum(map(len, text)) < size:
        text.append(BLOCK.format(i=i))
        i += 1
    return "".join(text).encode()


def _rows(result) -> list[tuple]:
    return [(v.line, v.column, v.code, v.message) for v in result.violations]


@pytest.fixture
def small_parts(monkeypatch):
    """Limits small enough that a file of a few blocks is linted in parts."""
    monkeypatch.setattr(parts, "WHOLE_FILE_BYTES", 4_000)
    monkeypatch.setattr(parts, "PART_BYTES", 2_000)
    monkeypatch.setattr(parts, "MAX_PART_BYTES", 8_000)


def _whole(monkeypatch):
    monkeypatch.setattr(parts, "WHOLE_FILE_BYTES", 10**12)


def test_a_large_file_is_parsed_one_bounded_part_at_a_time(monkeypatch):
    """With the default limits, no tree of more than MAX_PART_BYTES of source is built, and
    the tree of a part is gone when the next part is parsed: memory is bounded by a part,
    not by the file (the whole file used to be one tree, ~600x its size)."""
    data = generated(parts.WHOLE_FILE_BYTES + 20_000)
    parsed: list[int] = []
    parse_module = cst.parse_module

    def recording(source, *args, **kwargs):
        gc.collect()
        still = sum(1 for o in gc.get_objects() if isinstance(o, cst.Module))
        assert still == 0, f"{still} earlier trees still held while parsing the next part"
        parsed.append(len(source))
        return parse_module(source, *args, **kwargs)

    monkeypatch.setattr(engine.cst, "parse_module", recording)
    result = lint_bytes(data, "big.py", list(RULES))
    assert result.error is None
    assert len(parsed) > 4
    assert max(parsed) <= parts.MAX_PART_BYTES
    assert {v.code for v in result.violations} >= {"TP101", "TP102", "TP201"}
    assert result.notes and "linted in" in result.notes[0] and "big.py" in result.notes[0]


def test_parts_find_what_the_whole_file_finds(monkeypatch, small_parts):
    data = generated(30_000)
    in_parts = lint_bytes(data, "f.py", list(RULES))
    assert "parts" in in_parts.notes[0]
    _whole(monkeypatch)
    whole = lint_bytes(data, "f.py", list(RULES))
    assert not whole.notes
    assert len(_rows(whole)) > 20
    assert _rows(in_parts) == _rows(whole)


def test_parts_fix_what_the_whole_file_fixes(monkeypatch, small_parts):
    data = generated(30_000)
    in_parts = lint_bytes(data, "f.py", list(RULES), fix="unsafe")
    _whole(monkeypatch)
    whole = lint_bytes(data, "f.py", list(RULES), fix="unsafe")
    assert whole.fixed > 5
    assert (in_parts.fixed, in_parts.new_source) == (whole.fixed, whole.new_source)
    assert _rows(in_parts) == _rows(whole)


def test_a_statement_beyond_the_limit_is_named_and_the_rest_is_linted(monkeypatch, small_parts):
    monkeypatch.setattr(parts, "MAX_STATEMENT_BYTES", 20_000)
    huge = "TABLE = [\n" + "    1.0,\n" * 4_000 + "]\n"
    data = generated(10_000) + huge.encode() + BLOCK.format(i=99).encode()
    table_line = data[: data.index(b"TABLE")].count(b"\n") + 1
    result = lint_bytes(data, "gen.py", list(RULES), fix="unsafe")
    assert result.error.startswith(f"gen.py:{table_line}: one statement of")
    assert "--exclude" in result.error
    assert result.fixed > 0 and result.new_source.count(huge.encode()) == 1  # left as it was
    assert any(v.line > table_line + 4_000 for v in result.violations)  # linted after it


def test_a_cut_between_related_code_is_said(monkeypatch, small_parts):
    """`main` at the end calls every block's function: keeping them together would make
    one part of the whole file, so the cut is forced and lint names where."""
    data = generated(30_000)
    calls = "".join(f"    train_{i}(None, None)\n" for i in range(30))
    data += f"\n\ndef main():\n{calls}".encode()
    plan = plan_parts(data)
    assert plan.forced_cuts
    assert max(p.end - p.start for p in plan.parts) <= parts.MAX_PART_BYTES
    result = lint_bytes(data, "f.py", list(RULES))
    assert "cut between code that refers across them at lines" in result.notes[0]


def test_statements_stay_whole(small_parts):
    """A part starts only where a top-level statement starts: never between a decorator
    and its function, an `if` and its `else`, a `try` and its `except`."""
    data = generated(30_000)
    lines = data.decode().splitlines()
    plan = plan_parts(data)
    assert len(plan.parts) > 3
    assert plan.parts[0].start == 0 and plan.parts[-1].end == len(data)
    for before, part in zip(plan.parts, plan.parts[1:], strict=False):
        assert before.end == part.start
        first = lines[part.first_line - 1]
        assert first[:1] not in (" ", "") and not first.startswith(("else", "except"))
        above = [line for line in lines[: part.first_line - 1] if line.strip()][-1]
        assert not above.startswith("@")


def test_files_that_must_be_parsed_whole(small_parts):
    data = generated(30_000)
    assert plan_parts(data[:3_000]) is None  # small
    assert plan_parts(b"# -*- coding: latin-1 -*-\n" + data) is None  # a later part loses it
    assert plan_parts(data.replace(b"\n", b"\r")) is None  # lone CRs count lines differently
    assert plan_parts(data + b"x = (\n") is None  # does not tokenize: the parser says where
