"""Split a large file into parts that lint parses one at a time.

libcst's tree takes about 600 times the source's size in memory (some 20 nodes of ~800 bytes
per line), so a multi-megabyte generated file parsed whole takes gigabytes. A file above
``WHOLE_FILE_BYTES`` is therefore cut, between top-level statements, into parts of about
``PART_BYTES``; each part is parsed, linted (and fixed) and dropped before the next, so that
memory is bounded by the largest part, not by the file.

The rules look across statements: a loop calls a function defined elsewhere in the file, a
loader built at module level is iterated further down. So that a part holds what its
statements refer to, the cut is never made between a statement that mentions a top-level
name (a function, a class, a module-level variable) and the statement that defines it,
unless keeping them together would make a part larger than ``MAX_PART_BYTES``: there the
cut is forced, and lint says so (its line), since a finding that needs both sides may be
missed. A single statement above ``MAX_STATEMENT_BYTES`` (a generated literal of megabytes)
is not parsed at all: lint names it and lints the rest.

Everything here reads tokens, one at a time (``tokenize`` is linear and keeps nothing of
the file); what is kept is a few numbers and names per top-level statement.
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
from array import array
from dataclasses import dataclass, field

WHOLE_FILE_BYTES = 256 * 1024  # beyond any hand-written training script (about 6,000 lines)
# A part's tree takes ~10 MB: small beside the interpreter, and cut only where nothing
# refers across the cut, so that smaller parts cost no findings.
PART_BYTES = 16 * 1024
MAX_PART_BYTES = 256 * 1024  # a part kept whole for its references stops growing here
MAX_STATEMENT_BYTES = 1024 * 1024  # one statement's tree alone would take ~600 MB

# A line that starts with one of these continues the compound statement above it.
_CONTINUATIONS = {"else", "elif", "except", "finally"}
_DEFINERS = {"def", "class"}
_ASSIGN_AFTER = {"=", ":", ",", "+=", "-=", "*=", "/=", "|=", "&=", "//=", "**=", "%="}


@dataclass(frozen=True)
class Part:
    first_line: int  # 1-based line of the file where the part starts
    start: int  # byte offsets in the file
    end: int
    skipped: bool = False  # one statement too large to parse


@dataclass
class Plan:
    parts: list[Part]
    import_spans: list[tuple[int, int]]  # byte spans of the top-level import statements
    forced_cuts: list[int] = field(default_factory=list)  # lines cut between related code


@dataclass
class _Statements:
    """What the token scan keeps per top-level statement."""

    first_lines: array = field(default_factory=lambda: array("q"))
    names: list[tuple[str, ...]] = field(default_factory=list)  # the names it mentions
    defined: dict[str, list[int]] = field(default_factory=dict)  # name -> statements
    imports: list[int] = field(default_factory=list)


def plan_parts(data: bytes) -> Plan | None:
    """How to lint ``data`` in parts; None when it must be parsed whole: it is small, it
    is not UTF-8 (a later part would lose the encoding declaration), it has lone CR line
    endings (tokenize and libcst would count its lines differently), or it does not
    tokenize (the parser then says where)."""
    if len(data) <= WHOLE_FILE_BYTES:
        return None
    if data.count(b"\r") != data.count(b"\r\n"):
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if encoding not in ("utf-8", "utf-8-sig"):
            return None
        statements = _scan(tokenize.tokenize(io.BytesIO(data).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError):
        return None
    if len(statements.first_lines) < 2:
        return None
    line_starts = array("q", [0, 0])  # line_starts[n]: byte offset of line n (1-based)
    line_starts.extend(m.end() for m in re.finditer(b"\n", data))
    starts = array("q", (line_starts[line] for line in statements.first_lines))
    starts[0] = 0  # the first part holds the file's header (docstring, comments) too
    starts.append(len(data))
    joined = _joined(statements)
    parts, forced = _pack(statements.first_lines, starts, joined)
    imports = [(starts[i], starts[i + 1]) for i in statements.imports]
    return Plan(parts, imports, forced)


def _scan(tokens) -> _Statements:
    result = _Statements()
    depth = 0  # indentation level
    line_start = True  # the next significant token starts a logical line
    decorating = False  # the statement so far is decorators: the def/class is still to come
    previous = ""
    names: set[str] = set()
    statement_tokens = 0  # significant tokens of the current statement's first logical line
    first_name = ""
    for token in tokens:
        kind, text = token.type, token.string
        if kind in (tokenize.NL, tokenize.COMMENT, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        if kind == tokenize.INDENT:
            depth += 1
            line_start = True
            continue
        if kind == tokenize.DEDENT:
            depth -= 1
            line_start = True
            continue
        if kind == tokenize.NEWLINE:
            line_start = True
            continue
        if line_start and depth == 0:
            continuation = decorating or (kind == tokenize.NAME and text in _CONTINUATIONS)
            if not continuation:
                if result.first_lines:
                    result.names.append(tuple(names))
                names = set()
                result.first_lines.append(token.start[0])
                statement_tokens = 0
                first_name = ""
                if text in ("import", "from"):
                    result.imports.append(len(result.first_lines) - 1)
            decorating = text == "@" or (decorating and text not in _DEFINERS | {"async"})
        line_start = False
        number = len(result.first_lines) - 1
        statement_tokens += 1
        if kind == tokenize.NAME and not keyword.iskeyword(text):
            if previous in _DEFINERS and depth == 0:
                result.defined.setdefault(text, []).append(number)
            elif previous != ".":
                names.add(text)
            if statement_tokens == 1:
                first_name = text
        elif statement_tokens == 2 and text in _ASSIGN_AFTER and first_name:
            result.defined.setdefault(first_name, []).append(number)  # `name = ...` at top
        previous = text
    if result.first_lines:
        result.names.append(tuple(names))
    return result


def _joined(statements: _Statements) -> array:
    """joined[j] > 0: statements j-1 and j must stay in one part (one refers to the other
    or both lie between two that do)."""
    count = len(statements.first_lines)
    opened = array("q", bytes(8 * (count + 1)))
    for number, names in enumerate(statements.names):
        for name in names:
            where = statements.defined.get(name)
            if not where:
                continue
            low, high = min(where[0], number), max(where[-1], number)
            if low < high:
                opened[low + 1] += 1
                opened[high + 1] -= 1
    running = 0
    for j in range(count + 1):
        running += opened[j]
        opened[j] = running
    return opened


def _pack(first_lines: array, starts: array, joined: array) -> tuple[list[Part], list[int]]:
    parts: list[Part] = []
    forced: list[int] = []
    begin = 0  # the first statement of the part being filled
    count = len(first_lines)

    def close(end: int, skipped: bool = False) -> None:
        nonlocal begin
        first = 1 if begin == 0 else first_lines[begin]
        parts.append(Part(first, starts[begin], starts[end], skipped))
        begin = end

    for j in range(count):
        size = starts[j + 1] - starts[j]
        filled = starts[j] - starts[begin]
        if size > MAX_STATEMENT_BYTES:  # alone, and not parsed
            if filled:
                close(j)
            close(j + 1, skipped=True)
            continue
        if filled and ((filled >= PART_BYTES and not joined[j]) or filled + size > MAX_PART_BYTES):
            if joined[j]:
                forced.append(first_lines[j])
            close(j)
    if begin < count:
        close(count)
    return parts, forced
