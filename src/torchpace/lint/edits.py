"""Argument edits for fixes that keep the rest of a call exactly as written."""

from __future__ import annotations

import libcst as cst

_SPACE = cst.SimpleWhitespace(" ")
_NO_SPACE = cst.SimpleWhitespace("")


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )


def append_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    """``f(a)`` -> ``f(a, new)``; a trailing comma and one-argument-per-line layout are kept."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the new argument takes it; the old last one gets the separator
        # used between the earlier arguments (a newline and indent in a multi-line call).
        separator = args[-2].comma if len(args) > 1 else cst.Comma(whitespace_after=_SPACE)
        args[-1] = last.with_changes(comma=_without_comments(separator))
        args.append(new.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=_SPACE))
        args.append(new)
    return call.with_changes(args=args)


def _without_comments(comma: cst.Comma) -> cst.Comma:
    """A borrowed separator without the comments written after it (they belong to the
    argument they follow, and would be copied)."""
    after = comma.whitespace_after
    if not isinstance(after, cst.ParenthesizedWhitespace):
        return comma
    return comma.with_changes(
        whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    )


def prepend_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    if not call.args:
        return call.with_changes(args=[new])
    return call.with_changes(
        args=[new.with_changes(comma=cst.Comma(whitespace_after=_SPACE)), *call.args]
    )


def remove_arg(call: cst.Call, arg: cst.Arg) -> cst.Call:
    args = list(call.args)
    position = next(i for i, a in enumerate(args) if a is arg)
    del args[position]
    if not args:
        return call.with_changes(args=[], whitespace_before_args=_NO_SPACE)
    if position == len(args):
        # The removed one was last: its comma (none, or a trailing one) moves to the new last.
        args[-1] = args[-1].with_changes(comma=arg.comma)
    return call.with_changes(args=args)
