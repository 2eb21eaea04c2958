"""Reported lines and columns agree with Python's own parser, whatever precedes them."""

from __future__ import annotations

import ast

import pytest

from torchpace.lint.engine import lint_bytes
from torchpace.lint.rules import RULES

SOURCE = '''#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""A module docstring
over three lines.
"""
import torch.nn as nn

a = nn.DataParallel(m); b = nn.DataParallel(m)


@decorator(
    "x",
)
def build(model):
    # a comment
    x = """a string
    with lines"""
    if model:
        return nn.DataParallel(
            model,
        ), [nn.DataParallel(model) for _ in range(2)]


class Wrapper:
    def __init__(self, model):
        self.model = (
            nn.DataParallel(model)
        )
'''


def _expected(source: str) -> list[tuple[int, int]]:
    calls = [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "nn.DataParallel"
    ]
    return sorted((c.lineno, c.col_offset + 1) for c in calls)


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_positions_match_the_python_parser(newline):
    source = SOURCE.replace("\n", newline)
    result = lint_bytes(source.encode(), "f.py", [r for r in RULES if r.code == "TP501"])
    found = [(v.line, v.column) for v in result.violations]
    assert found == _expected(SOURCE) and len(found) == 5
