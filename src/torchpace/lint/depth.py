"""How deeply a file nests, measured on its tokens before anything parses it.

libcst's parser recurses once per level of nesting: 2,000 nested parentheses overflow its
C stack (a segfault, which would take the whole lint down with it), a 1,000-term sum exceeds
Python's recursion limit in every walk of the tree, and its time grows with the square of
the depth (a list nested 500 deep takes seconds). A file whose nesting is beyond
``MAX_NESTING`` is therefore not parsed at all: lint names it (TP902) and goes on.

The measure is an upper bound on the depth of the syntax tree, read from the tokens: every
open bracket, plus, within each bracket (and within the statement), the operators, dots,
trailers (`f()()`, `a[0][0]`), keywords that chain (`and`, `if ... else`, `lambda`, ...)
and adjacent strings since the last comma, plus the statement's indentation and the
`elif`s of the chains it sits in. Comparisons and commas make flat nodes; everything else
that chains makes one tree level per token at most, so the bound is never below the real
depth (it may be above: `a * b + c * d` counts 3 where the tree is 2 deep).

Tokenizing is linear and does not recurse; the scan stops at the first statement beyond
the limit.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from dataclasses import dataclass

# Beyond anything written by hand or run by CPython (its parser refuses more than 200 nested
# brackets and overflows on sums of a few thousand terms), and what libcst parses in about a
# second.
MAX_NESTING = 1000
MAX_BRACKETS = 200  # CPython's own limit: a deeper file does not run under Python either

_OPEN = {"(", "[", "{"}
_CLOSE = {")", "]", "}"}
_RESET = {",", ";"}  # a new element: what came before it is a sibling, not a parent
_CHAINING_KEYWORDS = {
    "and",
    "or",
    "not",
    "if",
    "else",
    "lambda",
    "await",
    "for",
    "in",
    "is",
    "yield",
    "from",
}
# A bracket right after one of these is a call or a subscript of it: one more level.
_TRAILER_AFTER = {tokenize.NAME, tokenize.NUMBER, tokenize.STRING}


@dataclass(frozen=True)
class TooDeep:
    line: int  # where the nesting passes the limit
    what: str  # "brackets" or "nesting", for the message
    limit: int


def too_deep(data: bytes) -> TooDeep | None:
    """The first place where ``data`` nests beyond the limits; None when it stays within
    them, or when it does not tokenize (the parser then says why)."""
    try:
        return _scan(tokenize.tokenize(io.BytesIO(data).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError):
        return None  # not Python as tokenize reads it: the parser reports it


def _scan(tokens) -> TooDeep | None:
    chains = [0]  # per open bracket, outermost (the statement) first: tokens that chain
    chained = 0  # sum(chains)
    indents = [0]  # per indentation level: the `elif`s of the chain it is in
    nested_statements = 0  # len(indents) - 1 + sum(indents)
    previous_type, previous = tokenize.NEWLINE, ""
    statement_start = True
    for token in tokens:
        kind, text = token.type, token.string
        if kind == tokenize.OP:
            if text in _OPEN:
                called = previous_type in _TRAILER_AFTER and not keyword.iskeyword(previous)
                if called or previous in _CLOSE:  # f(...), a[...], f()(...): a trailer
                    chains[-1] += 1
                    chained += 1
                chains.append(0)
                if len(chains) - 1 > MAX_BRACKETS:
                    return TooDeep(token.start[0], "brackets", MAX_BRACKETS)
            elif text in _CLOSE:
                if len(chains) > 1:
                    chained -= chains.pop()
            elif text in _RESET:
                chained -= chains[-1]
                chains[-1] = 0
            else:
                chains[-1] += 1
                chained += 1
        elif kind == tokenize.NAME:
            if statement_start:
                if text == "elif":
                    indents[-1] += 1
                    nested_statements += 1
                elif text not in ("else", "except", "finally"):
                    nested_statements -= indents[-1]
                    indents[-1] = 0
            if text in _CHAINING_KEYWORDS:
                chains[-1] += 1
                chained += 1
        elif kind == tokenize.STRING:
            if previous_type == tokenize.STRING:  # "a" "b": a concatenation
                chains[-1] += 1
                chained += 1
        elif kind == tokenize.NEWLINE:
            chains, chained = [0], 0
        elif kind == tokenize.INDENT:
            indents.append(0)
            nested_statements += 1
        elif kind == tokenize.DEDENT and len(indents) > 1:
            nested_statements -= indents.pop() + 1
        if kind not in (tokenize.NL, tokenize.COMMENT):
            statement_start = kind in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            previous_type, previous = kind, text
        if len(chains) - 1 + chained + nested_statements > MAX_NESTING:
            return TooDeep(token.start[0], "nesting", MAX_NESTING)
    return None
