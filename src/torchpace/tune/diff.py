"""The source change that makes a tuned configuration permanent, as a unified diff.

Each knob can say how its setting would be written in the user's code (``SourceEdit``,
knobs/base.py). This module turns those edits into new file contents with libcst:

- "loader-kwargs": set keyword arguments of the ``DataLoader(...)`` call at the edit's
  location ("train.py:42": the call whose span holds that line), replacing a value already
  given (by keyword, or by position for DataLoader's positional parameters);
- "optimizer-kwargs": the same for the ``torch.optim`` constructor call at the location;
- "statement-after-imports": insert ``code`` after the module's last top-level import (each
  statement only if the module does not already have it at its top level);
- "wrap-assignment": after the assignment at the location, rebind its target as ``code``
  formats it (``{}`` is the target): ``model = torch.compile(model)``.
- "call-argument": every call of ``kwargs["callee"]`` (``set_num_threads``) in the file gets
  ``kwargs["value"]`` as its first argument (the script's own ``torch.set_num_threads(32)``
  that a knob held its value against); where there is none, ``code`` (when given) is
  inserted after the imports;
- "environment": no edit; the setting lives in the environment (PYTORCH_CUDA_ALLOC_CONF),
  and the edit's note beside the diff says what to set.

Everything outside an edit is kept byte for byte (comments, line endings, a BOM, the
encoding). A file that does not parse is never touched; an edit whose location cannot be
found is reported, never guessed. Nothing is written until ``write_diff``, which refuses a
file changed since it was read and writes atomically.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from torchpace.atomic import write_bytes_atomic
from torchpace.knobs.base import SourceEdit
from torchpace.lint.edits import append_arg, keyword_arg

if TYPE_CHECKING:
    from torchpace.facts.run import RunFacts

KINDS = ("loader-kwargs", "optimizer-kwargs", "statement-after-imports", "wrap-assignment",
         "call-argument")  # fmt: skip
# Kinds placed in the script itself when they name no location.
IN_THE_SCRIPT = ("statement-after-imports", "call-argument")
# A setting that lives in the environment, not in the source (PYTORCH_CUDA_ALLOC_CONF): no
# edit, only its note beside the diff.
ENVIRONMENT = "environment"
BOM = b"\xef\xbb\xbf"
# DataLoader's parameters that may be given by position, in order (torch 2.x).
LOADER_POSITIONAL = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)


@dataclass
class EditProblem:
    """An edit that was not made, and why."""

    knob: str
    edit: SourceEdit
    reason: str

    def __str__(self) -> str:
        where = f"{self.edit.location}: " if self.edit.location else ""
        return f"{where}{self.knob}: {self.reason}"


@dataclass
class FileChange:
    path: Path  # the file on disk
    name: str  # as the diff shows it: relative to the root when under it
    original: bytes
    new: bytes
    knobs: list[str] = field(default_factory=list)  # the knobs whose edits changed it
    encoding: str = "utf-8"

    @property
    def diff(self) -> str:
        old = self.original.decode(self.encoding, "replace").splitlines(keepends=True)
        new = self.new.decode(self.encoding, "replace").splitlines(keepends=True)
        # git's a/ b/ prefixes for a path relative to where tune ran (`patch -p1`, `git
        # apply`); an absolute path (a script outside that folder) is shown as it is
        a, b = (
            (self.name, self.name)
            if os.path.isabs(self.name)
            else (f"a/{self.name}", f"b/{self.name}")
        )
        lines = difflib.unified_diff(old, new, a, b)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass
class DiffResult:
    files: list[FileChange] = field(default_factory=list)
    problems: list[EditProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # "knob: note", said beside the diff

    @property
    def text(self) -> str:
        """The unified diff of every changed file ("" when nothing changes)."""
        return "".join(f.diff for f in self.files)

    @property
    def changed(self) -> bool:
        return bool(self.files)


class DiffWriteError(OSError):
    """The diff was not written (a file changed since it was read); nothing was written."""


def parse_location(location: str) -> tuple[str, int | None]:
    """'train.py:42' -> ('train.py', 42); 'train.py' -> ('train.py', None)."""
    path, sep, line = location.rpartition(":")
    if sep and path and line.isdigit():
        return path, int(line)
    return location, None


def source_diff(
    edits_by_knob: Mapping[str, Sequence[SourceEdit]],
    root: Path | str = ".",
    default_file: Path | str | None = None,
    facts: RunFacts | None = None,
) -> DiffResult:
    """The change the edits make to the user's files, not written.

    Locations are relative to ``root`` (where the script ran: the capture records them
    relative to its working directory) unless absolute. An edit without a location is
    placed from ``facts``, the capture of the script: loader keywords at every DataLoader
    it built, optimizer keywords at every optimizer, a wrap at the assignment of the name
    the model was first called by; "statement-after-imports" goes to ``default_file``, the
    script.
    """
    root = Path(root)
    result = DiffResult()
    by_file: dict[Path, list[tuple[str, SourceEdit, int | None]]] = {}
    names: dict[Path, str] = {}
    placed = _Placer(facts, root)
    for knob, edits in edits_by_knob.items():
        for edit in edits:
            if edit.note:
                result.notes.append(f"{knob}: {edit.note}")
            if edit.kind == ENVIRONMENT:
                continue  # not an edit of the source: its note says what to set
            if edit.kind not in KINDS:
                result.problems.append(EditProblem(knob, edit, f"unknown edit kind {edit.kind!r}"))
                continue
            if edit.location is None and edit.kind not in IN_THE_SCRIPT:
                locations, reason = placed.locations(edit.kind)
                if not locations:
                    result.problems.append(EditProblem(knob, edit, reason))
                    continue
                if reason:  # placed for some models, not for all of them
                    result.notes.append(f"{knob}: not every model's edit was placed: {reason}")
                edits_here = [dataclasses.replace(edit, location=loc) for loc in locations]
            else:
                edits_here = [edit]
            for one in edits_here:
                _add(knob, one, root, default_file, by_file, names, result)
    for path, edits in by_file.items():
        _edit_file(path, names[path], edits, result)
    return result


def _add(knob, edit, root, default_file, by_file, names, result) -> None:
    """Files the edit under the file it changes, or reports why it has none."""
    if edit.location:
        file, line = parse_location(edit.location)
    elif default_file is not None:
        file, line = str(default_file), None
    else:
        result.problems.append(EditProblem(knob, edit, "no file to edit was given"))
        return
    if line is None and edit.kind not in IN_THE_SCRIPT:
        result.problems.append(EditProblem(knob, edit, "the location has no line"))
        return
    path = root / file
    key = Path(os.path.abspath(path))
    names.setdefault(key, _display_name(path, root))
    by_file.setdefault(key, []).append((knob, edit, line))


def _display_name(path: Path, root: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:  # outside the folder tune ran in: the normalised absolute path
        return os.path.abspath(path)


def write_diff(result: DiffResult) -> list[Path]:
    """Writes the changed files, each atomically; returns them.

    Every file is first checked to hold what it held when the diff was made: if one was
    changed since (an editor saved it), nothing at all is written and DiffWriteError says
    which.
    """
    changed = []
    for change in result.files:
        try:
            now = change.path.read_bytes()
        except OSError as e:
            changed.append(f"{change.name} ({e.strerror or e})")
            continue
        if now != change.original:
            changed.append(change.name)
    if changed:
        raise DiffWriteError(
            f"{', '.join(changed)} changed since the diff was made; nothing was written: "
            "run torchpace tune --write again to make it from the current files"
        )
    for change in result.files:
        write_bytes_atomic(change.path, change.new)
    return [change.path for change in result.files]


# --- where location-less edits go --------------------------------------------------------


class _Placer:
    """The locations the capture recorded, for edits that name none."""

    def __init__(self, facts: RunFacts | None, root: Path):
        self.facts = facts
        self.root = root
        self._model: tuple[list[str], str] | None = None

    def locations(self, kind: str) -> tuple[list[str], str]:
        """(locations, why there are none)."""
        facts = self.facts
        if facts is None:
            return [], "the edit has no location and no capture was given to place it"
        # why there are none, only where there are none: a reason beside locations found
        # reads as "not every model's edit was placed" under a diff that placed them all
        if kind == "loader-kwargs":
            found = _unique(lf.location for lf in facts.loaders)
            return found, "" if found else "the capture recorded no DataLoader's location"
        if kind == "optimizer-kwargs":
            found = _unique(o.location for o in facts.optimizer_details)
            return found, "" if found else "the capture recorded no optimizer's location"
        if self._model is None:
            self._model = self._model_assignments()
        return self._model

    def _model_assignments(self) -> tuple[list[str], str]:
        """The assignment of each trained model (a GAN's two): the knobs act on every one."""
        models = self.facts.models
        if not models:
            return [], "the capture recorded no model"
        found, reasons = [], []
        for model in models:
            location, reason = self._model_assignment(model)
            found += [location] if location else []
            reasons += [reason] if reason else []
        return _unique(found), "; ".join(reasons)

    def _model_assignment(self, model) -> tuple[str | None, str]:
        if not model.location:
            return None, f"the capture did not record where {model.class_name} was called"
        file, line = parse_location(model.location)
        if line is None:
            return None, f"the model's location {model.location} has no line"
        try:
            module = cst.parse_module((self.root / file).read_bytes())
        except (OSError, cst.ParserSyntaxError, UnicodeDecodeError, LookupError, SyntaxError):
            return None, f"{file} cannot be read or parsed to find where the model is assigned"
        found, reason = find_model_assignment(MetadataWrapper(module), line, model.class_name)
        if found is None:
            return None, f"the model is first called at {model.location}, but {reason}"
        return f"{file}:{found}", ""


def _unique(locations) -> list[str]:
    return list(dict.fromkeys(loc for loc in locations if loc))


def find_model_assignment(wrapper: MetadataWrapper, line: int, class_name: str):
    """(line of the assignment that last binds the name the model is called by, before
    ``line`` where there is one; or None and why).

    The capture knows where the model was first *called* (``outputs = model(x)``);
    rebinding it must follow where it was *assigned*. Among the names called on that line,
    the one assigned in this file is the model; a loss (a class named ``...Loss``) is not;
    the model's class name settles a tie.
    """
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    calls: list[cst.Call] = []
    # (target, line, value code, the branches it runs in)
    assigns: list[tuple[str, int, str, frozenset[int]]] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            calls.append(node)

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            for small in node.body:
                targets = []
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    targets = [small.targets[0].target]
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    targets = [small.target]
                if targets and isinstance(targets[0], (cst.Name, cst.Attribute)):
                    value = small.value
                    start = positions[node].start.line
                    branches = _branches(node, parents)
                    assigns.append((_code(targets[0]), start, _code(value), branches))

    wrapper.module.visit(Collect())
    callees, call_branches = [], frozenset()
    for call in calls:
        where = positions[call]
        if where.start.line <= line <= where.end.line and _dotted(call.func):
            callees.append(_code(call.func))
            call_branches = _branches(call, parents)
    candidates = {}
    for callee in dict.fromkeys(callees):
        bound = [(n, v, b) for t, n, v, b in assigns if t == callee]
        if bound and not any(_calls_a_loss(v) for _, v, _ in bound):
            # the last binding before the call; or, for a loop in a function defined above
            # the code that builds the model, the last one in the file
            before = [b for b in bound if b[0] < line]
            candidates[callee] = before or bound
    if len(candidates) > 1:
        name = class_name.lower()
        named = {c: b for c, b in candidates.items() if any(name in v.lower() for _, v, _ in b)}
        candidates = named or candidates
    if not candidates:
        return None, "no name called on that line is assigned in that file"
    if len(candidates) > 1:
        return None, f"it is not clear which of {', '.join(candidates)} is the model"
    (bound,) = candidates.values()
    # A binding in a branch the call is not in may not have run: after `model = Net()`, an
    # `if args.cuda: model = model.cuda()` runs on a GPU only, and a rebinding placed in it
    # would change nothing on the CPU (pytorch/examples' imagenet binds its model in five
    # branches, and channels_last's edit went into its DataParallel one). The last binding
    # that runs whenever the call does; none: where the model is bound depends on the run.
    sure = [n for n, _, branches in bound if branches <= call_branches]
    if not sure:
        lines = ", ".join(str(n) for n, _, _ in bound)
        return None, (f"it is bound only in branches that depend on the run (lines {lines}): "
                      "where the model ends up cannot be told from the source")  # fmt: skip
    return max(sure), ""


# Blocks that run or not as the program goes: an if's, an else's (of an if, a loop, a try),
# a loop's body, an exception handler's, a match case's. A function's body, a with's, a try's
# own body and its finally run whenever their statement is reached.
_BRANCHING = (cst.If, cst.Else, cst.For, cst.While, cst.ExceptHandler, cst.MatchCase)


def _branches(node: cst.CSTNode, parents) -> frozenset[int]:
    """The conditional blocks ``node`` lies in, by identity (``_BRANCHING``)."""
    found = set()
    while node in parents:
        parent = parents[node]
        if isinstance(parent, _BRANCHING) and isinstance(node, cst.BaseSuite):
            found.add(id(node))
        node = parent
    return frozenset(found)


def _dotted(node: cst.BaseExpression) -> bool:
    """A name or a chain of attributes of one (``model``, ``self.model``)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _calls_a_loss(value: str) -> bool:
    return re.search(r"\b\w*Loss\s*\(", value) is not None


# --- one file -----------------------------------------------------------------------------


def _edit_file(path: Path, name: str, edits, result: DiffResult) -> None:
    def fail(reason: str) -> None:
        for knob, edit, _ in edits:
            result.problems.append(EditProblem(knob, edit, reason))

    try:
        data = path.read_bytes()
    except OSError as e:
        fail(f"{name} cannot be read ({e.strerror or e})")
        return
    bom = BOM if data.startswith(BOM) else b""
    try:
        module = cst.parse_module(data[len(bom) :])
    except cst.ParserSyntaxError as e:
        fail(f"{name}:{e.raw_line} does not parse ({e.message}); the file is left unchanged")
        return
    except (UnicodeDecodeError, LookupError, SyntaxError) as e:
        fail(f"{name} cannot be decoded ({e}); the file is left unchanged")
        return
    if bom + module.bytes != data:
        fail(f"{name}: the parser does not reproduce it byte for byte; it is left unchanged")
        return
    wrapper = MetadataWrapper(module)
    editor = _FileEditor(wrapper, name)
    knobs = []
    for knob, edit, line in edits:
        reason = editor.add(edit, line)
        if reason:
            result.problems.append(EditProblem(knob, edit, reason))
        elif knob not in knobs:
            knobs.append(knob)
    new_module = wrapper.module.visit(editor.transformer())
    new = bom + new_module.bytes
    if new == data:
        return  # every edit was already there
    try:
        ast.parse(new)
    except (SyntaxError, ValueError) as e:  # torchpace's bug; never written
        fail(f"the edited {name} would not compile ({e}); it is left unchanged")
        return
    result.files.append(FileChange(path, name, data, new, knobs, module.encoding))


def _same(a: str, b: str) -> bool:
    try:
        return ast.dump(ast.parse(a.strip())) == ast.dump(ast.parse(b.strip()))
    except SyntaxError:
        return False


def _literal(value) -> cst.BaseExpression | None:
    """The expression for a Python literal value, or None when it has none."""
    text = repr(value)
    try:
        if ast.literal_eval(text) != value:
            return None
    except (ValueError, SyntaxError):
        return None
    return cst.parse_expression(text)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _callee(call: cst.Call) -> tuple[str | None, str]:
    """('torch.optim', 'AdamW') for torch.optim.AdamW(...); (None, 'DataLoader') for a name."""
    func = call.func
    if isinstance(func, cst.Name):
        return None, func.value
    if isinstance(func, cst.Attribute):
        return _code(func.value), func.attr.value
    return None, ""


class _FileEditor:
    def __init__(self, wrapper: MetadataWrapper, name: str):
        self.module = wrapper.module
        self.name = name
        self.positions = wrapper.resolve(PositionProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.calls: list[cst.Call] = []
        self.lines: list[cst.SimpleStatementLine] = []
        self.imported: dict[str, str] = {}  # local name -> "module.Name" it was imported as
        wrapper.module.visit(_Collector(self))
        self.kwargs: dict[int, tuple[cst.Call, str, dict]] = {}  # id(call) -> kind, kwargs
        self.first_argument: dict[int, object] = {}  # id(call) -> its new first argument
        self.after: dict[int, list[cst.BaseStatement]] = {}  # id(statement) -> new ones
        self.at_top: list[cst.BaseStatement] = []  # no import to insert after
        self.inserted: list[str] = []  # statements added at the top level, for idempotence

    def transformer(self) -> _Apply:
        return _Apply(self)

    def add(self, edit: SourceEdit, line: int | None) -> str | None:
        """Records the edit; returns why it cannot be made, or None."""
        if edit.kind in ("loader-kwargs", "optimizer-kwargs"):
            return self._kwargs(edit, line)
        if edit.kind == "statement-after-imports":
            return self._after_imports(edit)
        if edit.kind == "call-argument":
            return self._call_argument(edit)
        return self._wrap(edit, line)

    # -- the first argument of every call of a name -----------------------------------------
    def _call_argument(self, edit: SourceEdit) -> str | None:
        callee, value = edit.kwargs.get("callee"), edit.kwargs.get("value")
        if _literal(value) is None:
            return f"{value!r} is not a literal that can be written in source"
        calls = [c for c in self.calls if _callee(c)[1] == callee and c.args]
        for call in calls:
            self.first_argument[id(call)] = value
        if not calls and edit.code:
            return self._after_imports(dataclasses.replace(edit, kind="statement-after-imports"))
        return None

    # -- keyword arguments of a call ------------------------------------------------------
    def _is_loader(self, call: cst.Call) -> bool:
        owner, name = _callee(call)
        if owner is None:
            return name == "DataLoader" or self.imported.get(name, "").endswith(".DataLoader")
        return name == "DataLoader"

    def _is_optimizer(self, call: cst.Call) -> bool:
        owner, name = _callee(call)
        if not name[:1].isupper():
            return False
        if owner is None:
            return self.imported.get(name, "").startswith("torch.optim.")
        return owner.split(".")[-1] == "optim" or self.imported.get(owner) == "torch.optim"

    def _kwargs(self, edit: SourceEdit, line: int) -> str | None:
        loader = edit.kind == "loader-kwargs"
        wanted = self._is_loader if loader else self._is_optimizer
        what = "DataLoader(...)" if loader else "torch.optim optimizer constructor"
        for key, value in edit.kwargs.items():
            if _literal(value) is None:
                return f"{key}={value!r} is not a literal that can be written in source"
        spanning = [c for c in self.calls if self._spans(c, line) and wanted(c)]
        if not spanning:
            return f"no {what} call at {self.name}:{line}; not edited"
        span = min(self._size(c) for c in spanning)
        innermost = [c for c in spanning if self._size(c) == span]
        if len(innermost) > 1:
            return f"{len(innermost)} {what} calls at {self.name}:{line}; not edited"
        call = innermost[0]
        _, _, kwargs = self.kwargs.setdefault(id(call), (call, edit.kind, {}))
        kwargs.update(edit.kwargs)
        return None

    def _spans(self, node: cst.CSTNode, line: int) -> bool:
        where = self.positions[node]
        return where.start.line <= line <= where.end.line

    def _size(self, node: cst.CSTNode) -> tuple[int, int]:
        where = self.positions[node]
        return (where.end.line - where.start.line, len(_code(node)))

    # -- statements after the imports -------------------------------------------------------
    def _after_imports(self, edit: SourceEdit) -> str | None:
        try:
            statements = list(cst.parse_module(edit.code).body)
        except cst.ParserSyntaxError as e:
            return f"its code does not parse ({e.message})"
        present = [_code(s) for s in self.module.body] + self.inserted
        new = [s for s in statements if not any(_same(_code(s), p) for p in present)]
        if not new:
            return None  # already there
        self.inserted += [_code(s) for s in new]
        imports = [s for s in self.module.body if _is_import_line(s)]
        if imports:
            self.after.setdefault(id(imports[-1]), []).extend(new)
        else:
            self.at_top.extend(new)
        return None

    # -- rebinding an assignment's target ---------------------------------------------------
    def _wrap(self, edit: SourceEdit, line: int) -> str | None:
        statements = [s for s in self.lines if self._spans(s, line)]
        assigns = [
            small
            for s in statements
            for small in s.body
            if isinstance(small, (cst.Assign, cst.AnnAssign))
        ]
        if not statements or not assigns:
            return f"no assignment at {self.name}:{line}; not edited"
        if len(assigns) > 1:
            return f"{len(assigns)} assignments at {self.name}:{line}; not edited"
        assign = assigns[0]
        targets = (
            [t.target for t in assign.targets]
            if isinstance(assign, cst.Assign)
            else [assign.target]
        )
        if len(targets) != 1 or not isinstance(targets[0], (cst.Name, cst.Attribute)):
            return f"the assignment at {self.name}:{line} has no single target to rebind"
        target = _code(targets[0])
        code = edit.code.replace("{}", target)
        try:
            new = list(cst.parse_module(code).body)
        except cst.ParserSyntaxError as e:
            return f"its code does not parse ({e.message})"
        statement = min(statements, key=self._size)
        parent = self.parents[statement]
        body = list(getattr(parent, "body", ()))
        if statement in body:
            following = [_code(s) for s in body[body.index(statement) + 1 :][: len(new)]]
            if len(following) == len(new) and all(
                _same(_code(n), f) for n, f in zip(new, following, strict=True)
            ):
                return None  # already rebound
        self.after.setdefault(id(statement), []).extend(new)
        return None


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


class _Collector(cst.CSTVisitor):
    def __init__(self, editor: _FileEditor):
        super().__init__()
        self.editor = editor

    def visit_Call(self, node: cst.Call) -> None:
        self.editor.calls.append(node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.editor.lines.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = _code(node.module)
        for alias in node.names:
            local = alias.asname.name if alias.asname else alias.name
            if isinstance(local, cst.Name):
                self.editor.imported[local.value] = f"{module}.{_code(alias.name)}"

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            if alias.asname and isinstance(alias.asname.name, cst.Name):
                self.editor.imported[alias.asname.name.value] = _code(alias.name)


class _Apply(cst.CSTTransformer):
    def __init__(self, editor: _FileEditor):
        super().__init__()
        self.editor = editor

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if id(original_node) in self.editor.first_argument:
            value = self.editor.first_argument[id(original_node)]
            args = list(updated_node.args)
            args[0] = args[0].with_changes(value=_literal(value))
            return updated_node.with_changes(args=args)
        entry = self.editor.kwargs.get(id(original_node))
        if entry is None:
            return updated_node
        _, kind, kwargs = entry
        call = updated_node
        for key, value in kwargs.items():
            call = _set_kwarg(call, key, value, kind == "loader-kwargs")
        return call

    def leave_SimpleStatementLine(self, original_node, updated_node):
        new = self.editor.after.get(id(original_node))
        if not new:
            return updated_node
        return cst.FlattenSentinel([updated_node, *new])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.editor.at_top:
            return updated_node
        body = list(updated_node.body)
        at = 1 if body and _is_docstring(body[0]) else 0
        return updated_node.with_changes(body=[*body[:at], *self.editor.at_top, *body[at:]])


def _set_kwarg(call: cst.Call, key: str, value, loader: bool) -> cst.Call:
    expression = _literal(value)
    args = list(call.args)
    existing = next((a for a in args if a.keyword is not None and a.keyword.value == key), None)
    if existing is None and loader and key in LOADER_POSITIONAL:
        positional = [a for a in args if a.keyword is None and not a.star]
        index = LOADER_POSITIONAL.index(key)
        if index < len(positional):
            existing = positional[index]
    if existing is None:
        return append_arg(call, keyword_arg(key, expression))
    try:
        old = ast.literal_eval(_code(existing.value))
    except (ValueError, SyntaxError):
        old = None
    if type(old) is type(value) and old == value:
        return call  # already says so
    args[args.index(existing)] = existing.with_changes(value=expression)
    return call.with_changes(args=args)
