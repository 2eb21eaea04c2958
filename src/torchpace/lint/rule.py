"""The lint rule interface: one class per rule, with its own examples.

A rule reads a file's index and yields findings. A finding may carry a fix: a node of the
file's syntax tree and the node that replaces it, so that a fix changes only its own span.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import libcst as cst

from torchpace.catalog import CODES, Code
from torchpace.lint.index import FileIndex

SAFE = "safe"
UNSAFE = "unsafe"


@dataclass(eq=False)
class Finding:
    rule: type[Rule]
    node: cst.CSTNode  # where it is reported
    message: str
    replace: cst.CSTNode | None = None  # the node the fix replaces
    replacement: cst.CSTNode | None = None
    # This fix's safety when it differs from the rule's: TP105 moves a random factory to the
    # device, whose generator draws other numbers, so that one fix is unsafe.
    safety: str | None = None
    # Other places the message refers to, as (text with "{line}", node): where a loader was
    # built, where its batches are copied. The engine puts in the line numbers.
    refs: tuple[tuple[str, cst.CSTNode], ...] = ()

    @property
    def fixable(self) -> bool:
        return self.replace is not None and self.replacement is not None

    @property
    def fix_safety(self) -> str | None:
        return self.safety or self.rule.fix_safety


class Rule:
    """Subclasses set the class attributes and implement ``check``."""

    code: ClassVar[str]
    message: ClassVar[str]  # the general message; findings may say more
    fix_title: ClassVar[str | None] = None
    # SAFE, UNSAFE or None (no automatic fix). SAFE means the fixed program computes the same
    # values as the original (docs/lint.md, "Fixes and their safety"); a finding may lower it.
    fix_safety: ClassVar[str | None] = None
    # Snippets that must produce no finding / at least one finding of this rule.
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def entry(cls) -> Code:
        return CODES[cls.code]

    @classmethod
    def name(cls) -> str:
        return CODES[cls.code].name

    def check(self, index: FileIndex) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(
        self,
        node: cst.CSTNode,
        message: str | None = None,
        replace: cst.CSTNode | None = None,
        replacement: cst.CSTNode | None = None,
        safety: str | None = None,
        refs: tuple[tuple[str, cst.CSTNode], ...] = (),
    ) -> Finding:
        return Finding(
            type(self), node, message or self.message, replace, replacement, safety, refs
        )
