"""Names as the source spells them, resolved through its imports.

Rules match fully qualified names (``torch.utils.data.DataLoader``) so that every spelling a
user may choose (``import torch.nn as nn``, ``from torch.utils.data import DataLoader as DL``)
is recognised. A name that cannot be traced to an import resolves to None, and rules stay
silent on it: a local class called ``DataLoader`` is not torch's.
"""

from __future__ import annotations

import libcst as cst


class ImportMap:
    """Local name -> fully qualified name, from every import statement in a file."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.aliases[alias.asname.name.value] = full
            else:
                # `import torch.nn` binds `torch`
                root = full.split(".")[0]
                self.aliases[root] = root

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module)
        if module is None:
            return
        for alias in node.names:
            name = dotted(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{module}.{name}"

    def resolve(self, expr: cst.BaseExpression | None) -> str | None:
        """The qualified name of a Name/Attribute chain rooted in an import, else None."""
        parts: list[str] = []
        while isinstance(expr, cst.Attribute):
            parts.append(expr.attr.value)
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return None
        root = self.aliases.get(expr.value)
        if root is None:
            return None
        return ".".join([root, *reversed(parts)])


def dotted(expr: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` for a Name/Attribute chain as written; None for anything else."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    return ".".join([expr.value, *reversed(parts)])


def root_name(expr: cst.BaseExpression | None) -> str | None:
    """The leftmost plain name of ``a.b[0].c(...)``: ``a``; None when there is none."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute | cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        else:
            return None


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def has_star_args(call: cst.Call) -> bool:
    """``f(*a)`` or ``f(**kw)``: any argument may hide there, so rules stay silent."""
    return any(a.star for a in call.args)


def is_true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def is_false(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def is_zero(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Integer) and int(expr.value, 0) == 0


def argument(call: cst.Call, name: str, index: int) -> tuple[bool, cst.BaseExpression | None]:
    """(known, value) of a parameter given by keyword or position.

    known is False when ``*args``/``**kwargs`` might carry it; value is None when the
    argument is absent (the callee's default applies).
    """
    arg = keyword(call, name)
    if arg is not None:
        return True, arg.value
    if has_star_args(call):
        return False, None
    pos = positional(call)
    if len(pos) > index:
        return True, pos[index].value
    return True, None
