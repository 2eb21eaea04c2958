"""Lint one file's source: parse, index, run the selected rules, drop `# noqa`'d findings,
and (when asked) apply fixes until none is left to apply.

Works on bytes and returns bytes, so that encodings, a BOM and line endings are exactly
what the file had; libcst round-trips every untouched character.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodePosition, MetadataWrapper, PositionProvider

from torchpace.lint.depth import too_deep
from torchpace.lint.fixer import apply_fixes
from torchpace.lint.index import add_module_imports, build_index
from torchpace.lint.names import ImportMap
from torchpace.lint.parts import MAX_STATEMENT_BYTES, Plan, plan_parts
from torchpace.lint.rule import SAFE, UNSAFE, Finding, Rule
from torchpace.lint.rules import RULES
from torchpace.lint.stack import call_with_deep_stack

BOM = b"\xef\xbb\xbf"
# A file is fixed again after each round, since a fix may uncover or enable another; real
# files settle in one or two rounds, this bound only guards against two fixes undoing
# each other.
MAX_FIX_ROUNDS = 5
NEWLINE = re.compile(r"\r\n?|\n")  # what libcst counts as a line break
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]*(?:\s*,\s*[A-Z]+[0-9]*)*))?", re.I)


@dataclass
class Violation:
    path: str
    line: int
    column: int
    code: str
    name: str
    message: str
    practices: tuple[str, ...]
    fix_title: str | None
    fix_safety: str | None  # of this fix: "safe", "unsafe" or None (no automatic fix)
    fixable: bool  # this finding has a fix

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "code": self.code,
            "name": self.name,
            "practices": list(self.practices),
            "message": self.message,
            "fix_safety": self.fix_safety if self.fixable else None,
            "fix_title": self.fix_title if self.fixable else None,
        }


@dataclass
class FileResult:
    path: str
    violations: list[Violation] = field(default_factory=list)
    error: str | None = None  # the file could not be read or parsed; nothing was written
    fixed: int = 0  # fixes applied (or, with --diff, that would be)
    # said on standard error without failing the run: how a large file was linted
    notes: list[str] = field(default_factory=list)
    original: bytes | None = None
    new_source: bytes | None = None  # set when fixes changed the source


def select_rules(select: list[str], ignore: list[str]) -> list[type[Rule]]:
    def matches(code: str, prefixes: list[str]) -> bool:
        return any(code.startswith(p.upper()) for p in prefixes)

    return [r for r in RULES if matches(r.code, select) and not matches(r.code, ignore)]


def _noqa_lines(code: str) -> dict[int, set[str] | None]:
    """Line -> codes silenced there (None: all of them)."""
    silenced: dict[int, set[str] | None] = {}
    if "noqa" not in code.lower():
        return silenced
    for number, line in enumerate(code.splitlines(), start=1):
        match = NOQA.search(line)
        if match:
            codes = match.group("codes")
            silenced[number] = {c.strip().upper() for c in codes.split(",")} if codes else None
    return silenced


def _is_silenced(code: str, lines: tuple[int, int], noqa: dict[int, set[str] | None]) -> bool:
    for line in set(lines):
        if line in noqa:
            codes = noqa[line]
            if codes is None or any(code.startswith(c) for c in codes):
                return True
    return False


@dataclass(frozen=True)
class _Part:
    """Where a part of a large file sits in it, and what it sees of the rest."""

    line_offset: int  # lines of the file before the part
    file_text: str  # the whole file, for the rules' file-wide text checks
    imports: ImportMap  # the file's top-level imports


def _check(module: cst.Module, source: str, rules: list[type[Rule]], part: _Part | None = None):
    """Findings not silenced by `# noqa`, each with its start position and its message with
    the lines of the places it refers to. ``source`` is the text of ``module``; in a part
    of a file, positions are shifted to the file's lines."""
    if part is None:
        index = build_index(source, module)
        offset = 0
    else:
        index = build_index(part.file_text, module, part.imports)
        offset = part.line_offset
    findings: list[Finding] = [f for rule in rules for f in rule().check(index)]
    if not findings:
        return []
    noqa = _noqa_lines(source)
    refs = [node for f in findings for _, node in f.refs]
    spans = _positions(module, index, [f.node for f in findings] + refs)
    ref_lines = iter(start.line + offset for start, _ in spans[len(findings) :])
    kept = []
    for finding, (start, end) in zip(findings, spans[: len(findings)], strict=True):
        message = finding.message
        if finding.refs:
            where = [text.replace("{line}", str(next(ref_lines))) for text, _ in finding.refs]
            message = f"{message} ({'; '.join(where)})"
        if not _is_silenced(finding.rule.code, (start.line, end.line), noqa):
            kept.append((finding, CodePosition(start.line + offset, start.column), message))
    kept.sort(key=lambda item: (item[1].line, item[1].column, item[0].rule.code))
    return kept


def _positions(module: cst.Module, index, nodes: list[cst.CSTNode]):
    """(start, end) of each node, 1-based lines and 0-based columns.

    Positions come from generating code, which is slow; only the top-level statements
    that hold these nodes are generated with positions, each in a module of its own, and
    shifted by the number of lines before it.
    """
    by_statement: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        by_statement.setdefault(index.statement_of[id(node)], []).append(i)
    line = 1 + sum(_count_lines(module.code_for_node(h)) for h in module.header)
    first_line = {}
    for number, statement in enumerate(module.body[: max(by_statement) + 1]):
        first_line[number] = line
        line += _count_lines(module.code_for_node(statement))
    result: list = [None] * len(nodes)
    for number, wanted in by_statement.items():
        # One statement's positions at a time: the mapping covers every node of the
        # statement, and keeping them all would hold a position per node of the file.
        alone = module.with_changes(header=[], body=[module.body[number]], footer=[])
        positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
        shift = first_line[number] - 1
        for i in wanted:
            where = positions[nodes[i]]
            result[i] = (
                CodePosition(where.start.line + shift, where.start.column),
                CodePosition(where.end.line + shift, where.end.column),
            )
        del positions, alone
    return result


def _count_lines(code: str) -> int:
    return len(NEWLINE.findall(code))


def _parse(data: bytes) -> tuple[cst.Module, bytes]:
    """The module and the BOM it started with (libcst is given the bytes after it)."""
    bom = BOM if data.startswith(BOM) else b""
    return cst.parse_module(data[len(bom) :]), bom


def _text(module: cst.Module, data: bytes) -> str:
    """The source as text, for `# noqa` and substring checks (cheaper than regenerating it)."""
    return data.decode(module.encoding, "replace")


def _compiles(data: bytes) -> bool:
    try:
        ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    return True


def lint_bytes(
    data: bytes, path: str, rules: list[type[Rule]], fix: str | None = None
) -> FileResult:
    """Lint ``data`` (the content of ``path``); with ``fix`` ("safe" or "unsafe") also
    compute the fixed source, never one that does not parse.

    A file nested beyond what can be parsed safely is not parsed (TP902). The rest runs on
    a thread with a deep stack, so that the parser and every walk of the tree have room for
    the nesting the limit allows; a recursion that still runs out is reported the same way.
    """
    deep = too_deep(data)
    if deep is not None:
        return FileResult(path, error=_too_deep_message(path, deep.line, deep.what, deep.limit))
    plan = plan_parts(data)
    try:
        if plan is not None:
            return call_with_deep_stack(_lint_in_parts, data, plan, path, rules, fix)
        return call_with_deep_stack(_lint_parsed, data, path, rules, fix)
    except RecursionError:
        return FileResult(path, error=_too_deep_message(path, None, "nesting", None))


def _too_deep_message(path: str, line: int | None, what: str, limit: int | None) -> str:
    where = f"{path}:{line}" if line is not None else path
    beyond = f"more than {limit} levels of {what}" if limit else "nesting too deep to parse"
    return (
        f"{where}: TP902 [source-too-deeply-nested] {beyond}; the file was skipped "
        "(not linted, left unchanged); see docs/codes/TP902.md"
    )


def _lint_parsed(
    data: bytes, path: str, rules: list[type[Rule]], fix: str | None, part: _Part | None = None
) -> FileResult:
    result = FileResult(path, original=data)
    try:
        module, bom = _parse(data)
    except cst.ParserSyntaxError as e:
        line = e.raw_line + (part.line_offset if part else 0)
        result.error = (
            f"{path}:{line}:{e.raw_column + 1}: cannot parse this file, so it was not "
            f"linted and is left unchanged ({e.message})"
        )
        return result
    except (UnicodeDecodeError, LookupError, SyntaxError) as e:
        result.error = f"{path}: cannot decode this file ({e}); it is left unchanged"
        return result
    allowed = {SAFE} if fix == SAFE else {SAFE, UNSAFE} if fix == UNSAFE else set()
    # libcst may not give back these exact bytes (a trailing lone CR, for one): then a fix
    # could change more than its span, so none is made, and that is said only when a fix
    # was due.
    original_compiles = None
    for _ in range(MAX_FIX_ROUNDS):
        found = _check(module, _text(module, data), rules, part)
        to_fix = [f for f, _, _ in found if f.fixable and f.fix_safety in allowed]
        if not to_fix:
            break
        if result.fixed == 0 and bom + module.bytes != data:
            result.error = (
                f"{path}: not fixed: the parser does not reproduce this file byte for byte "
                "(unusual line endings?); it is left unchanged"
            )
            break
        if original_compiles is None:
            original_compiles = _compiles(data)
        new_module, applied = apply_fixes(module, to_fix)
        new_data = bom + new_module.bytes
        if applied == 0 or (original_compiles and not _compiles(new_data)):
            # A fix that would break the file is not applied; the findings stay reported.
            break
        try:
            module, _ = _parse(new_data)
        except cst.ParserSyntaxError:
            break
        data = new_data
        result.fixed += applied
        result.new_source = new_data
    else:
        found = _check(module, _text(module, data), rules, part)
    result.violations = [_violation(path, f, start, message) for f, start, message in found]
    return result


def _violation(path: str, finding: Finding, start, message: str) -> Violation:
    rule = finding.rule
    entry = rule.entry()
    return Violation(
        path=path,
        line=start.line,
        column=start.column + 1,
        code=rule.code,
        name=entry.name,
        message=message,
        practices=entry.practices,
        fix_title=rule.fix_title,
        fix_safety=finding.fix_safety,
        fixable=finding.fixable,
    )


def _lint_in_parts(
    data: bytes, plan: Plan, path: str, rules: list[type[Rule]], fix: str | None
) -> FileResult:
    """Lint a large file one part at a time (``lint.parts``): only one part's tree is ever
    held. Findings and fixes are those of each part, at the file's lines; the fixed file is
    the parts' fixed bytes in order."""
    result = FileResult(path, original=data)
    file_text = data.decode("utf-8", "replace")
    imports = _top_level_imports(data, plan)
    pieces: list[bytes] = []
    line_offset = 0
    for part in plan.parts:
        original = data[part.start : part.end]
        if part.skipped:
            result.error = (
                f"{path}:{part.first_line}: one statement of {len(original) / 2**20:.1f} MB, "
                f"beyond the {MAX_STATEMENT_BYTES / 2**20:.0f} MB that lint parses in one piece "
                "(its syntax tree would take some 600 times that in memory); that statement "
                "was not linted, the rest of the file was. Exclude generated files with "
                "--exclude or `exclude` in [tool.torchpace.lint]"
            )
            pieces.append(original)
            line_offset += original.count(b"\n")
            continue
        seen = ImportMap()
        seen.aliases = dict(imports.aliases)
        context = _Part(line_offset, file_text, seen)
        done = _lint_parsed(original, path, rules, fix, context)
        if done.error is not None and not done.violations:
            # the part did not parse (nor did the file, then): it is left as it is
            return FileResult(path, error=done.error, original=data)
        result.error = result.error or done.error  # not fixed, but linted
        result.violations += done.violations
        result.fixed += done.fixed
        piece = done.new_source if done.new_source is not None else original
        pieces.append(piece)
        line_offset += piece.count(b"\n")
    if result.fixed:
        result.new_source = b"".join(pieces)
    result.notes.append(
        f"{path}: {len(data) / 2**20:.1f} MB, linted in {len(plan.parts)} parts of top-level "
        "statements to bound memory (docs/lint.md, Large files)"
        + (
            f"; parts cut between code that refers across them at lines "
            f"{', '.join(map(str, plan.forced_cuts[:5]))}"
            f"{' and more' if len(plan.forced_cuts) > 5 else ''}, where a finding that needs "
            "both sides may be missed"
            if plan.forced_cuts
            else ""
        )
    )
    return result


def _top_level_imports(data: bytes, plan: Plan) -> ImportMap:
    """The file's module-level imports, which every part resolves names through (a file
    parsed whole reads them all before its first statement too)."""
    imports = ImportMap()
    text = b"".join(data[start:end] for start, end in plan.import_spans)
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return imports  # the part that holds it says where
    return add_module_imports(module, imports)
