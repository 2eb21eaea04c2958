"""Apply fixes to a syntax tree, and write a fixed file without ever losing the original.

A fix replaces one node by another; everything outside that node is kept as libcst read it.
Writing goes through ``torchpace.atomic``: a temporary file in the same directory, fsynced,
then renamed over the original, so a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import os
from pathlib import Path

import libcst as cst

from torchpace.atomic import write_bytes_atomic
from torchpace.lint.rule import Finding


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements
        self.applied = 0
        self._applied_before: list[int] = []

    def on_visit(self, node) -> bool:
        self._applied_before.append(self.applied)
        return True

    def on_leave(self, original_node, updated_node):
        applied_before = self._applied_before.pop()
        replacement = self.replacements.get(id(original_node))
        if replacement is None:
            return updated_node
        if self.applied > applied_before:
            return updated_node  # a fix inside this node was applied: the next round retries
        self.applied += 1
        return replacement


def apply_fixes(module: cst.Module, findings: list[Finding]) -> tuple[cst.Module, int]:
    """The module with the findings' fixes; nested fixes are applied in later rounds."""
    replacements = {}
    for finding in findings:
        replacements.setdefault(id(finding.replace), finding.replacement)
    transformer = _Replace(replacements)
    return module.visit(transformer), transformer.applied


def write_atomic(path: Path, data: bytes, expected: bytes) -> None:
    """Replace ``path``'s content by ``data``, keeping its mode.

    ``expected`` is the content the fix was computed from: if the file changed meanwhile
    (an editor saved it), nothing is written and the error says so.
    """
    real = Path(os.path.realpath(path))
    if real.read_bytes() != expected:
        raise OSError(f"{path} changed while it was being linted; it was not rewritten")
    write_bytes_atomic(real, data, keep_mode=True)
