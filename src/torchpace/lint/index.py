"""One pass over a file's syntax tree, recording what the rules ask about.

Every rule reads this index instead of walking the tree again: which calls a file makes,
what each call resolves to through the imports, which loops, `if`s, `with`s and functions
enclose it, and in what order calls come. One walk per file keeps linting a large tree fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from torchpace.lint.names import ImportMap, dotted
from torchpace.lint.walk import walk

# An optimizer step is `<something optimizer-like>.step()`; `scheduler.step()` and
# `env.step()` are not. Names seen in real code: optimizer, optim, opt, g_opt, opt_d,
# optimizer_G, scaler (GradScaler.step).
OPTIMIZER_NAME = re.compile(r"optim|^opt|opt$|_opt|opt_|scaler", re.IGNORECASE)


@dataclass(eq=False)
class Function:
    node: cst.FunctionDef | None  # None: module level
    name: str
    parent: Function | None
    decorators: list[tuple[cst.Decorator, str | None]] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)  # not those of nested functions
    class_name: str | None = None  # a method: the class it is defined in

    @property
    def parameters(self) -> list[str]:
        """Positional-or-keyword parameter names, `self`/`cls` of a method included."""
        return [p.name.value for p in self.node.params.params] if self.node else []

    @property
    def qualified_name(self) -> str:
        return f"{self.class_name}.{self.name}" if self.class_name else self.name


@dataclass(eq=False)
class Loop:
    node: cst.For | cst.While
    function: Function
    parent: Loop | None  # the enclosing loop in the same function
    targets: set[str]  # names bound by `for <targets> in`
    iter: cst.BaseExpression | None
    calls: list[CallSite] = field(default_factory=list)  # this loop innermost
    assigned: set[str] = field(default_factory=set)  # `name = ...` with this loop innermost
    assignments: list[tuple[str, int]] = field(default_factory=list)  # (name, seq) in order


@dataclass(eq=False)
class Guard:
    """An enclosing `if`; ``loop_depth`` counts the loops around the `if` itself."""

    test: cst.BaseExpression
    loop_depth: int
    node: cst.If | None = None
    orelse: bool = False  # in its `else:` (or `elif`) branch, not its body


@dataclass(eq=False)
class CallSite:
    node: cst.Call
    name: str | None  # qualified name through the imports, when the callee is imported
    method: str | None  # `x.y.method(...)`: "method"
    receiver: cst.BaseExpression | None  # `x.y` in `x.y.method(...)`
    seq: int  # source order
    function: Function
    loops: tuple[Loop, ...]  # enclosing loops of the same function, innermost last
    guards: tuple[Guard, ...]
    withs: tuple[str, ...]  # enclosing `with` items (qualified or dotted name, or method)
    assigned_to: str | None  # `target = <this call>`: the dotted target


@dataclass(eq=False)
class AssignSite:
    """`target = value` (one target; a tuple target is kept as written)."""

    target: cst.BaseExpression
    value: cst.BaseExpression
    function: Function
    seq: int


@dataclass(eq=False)
class ReturnSite:
    value: cst.BaseExpression
    function: Function


@dataclass(eq=False)
class AugAssignSite:
    node: cst.AugAssign
    target: str | None
    value: cst.BaseExpression
    function: Function
    loops: tuple[Loop, ...]
    seq: int


@dataclass
class FileIndex:
    source: str
    module: cst.Module
    imports: ImportMap
    functions: list[Function]
    loops: list[Loop]
    calls: list[CallSite]
    aug_assigns: list[AugAssignSite]
    assigns: list[AssignSite]
    returns: list[ReturnSite]
    statement_of: dict[int, int]  # id(node) -> index of its top-level statement in module.body
    # class name -> its bases as qualified names through the imports (else as written)
    class_bases: dict[str, list[str]] = field(default_factory=dict)

    def class_methods(self, class_name: str, method: str) -> list[Function]:
        return [f for f in self.functions_named(method) if f.class_name == class_name]

    def functions_named(self, name: str) -> list[Function]:
        by_name = self.__dict__.get("_functions_by_name")
        if by_name is None:  # built once: rules ask for every call in every loop
            by_name = {}
            for function in self.functions:
                if function.node is not None:
                    by_name.setdefault(function.name, []).append(function)
            self.__dict__["_functions_by_name"] = by_name
        return by_name.get(name, [])


@dataclass
class _Frame:
    function: Function
    loops: list[Loop] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    withs: list[list[str]] = field(default_factory=list)


def _bound_names(target: cst.BaseExpression) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, cst.Tuple | cst.List):
        names: set[str] = set()
        for element in target.elements:
            names |= _bound_names(element.value)
        return names
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    return set()


def with_item_name(imports: ImportMap, expr: cst.BaseExpression) -> str:
    func = expr.func if isinstance(expr, cst.Call) else expr
    name = imports.resolve(func) or dotted(func)
    if name is None and isinstance(func, cst.Attribute):
        name = func.attr.value
    return name or ""


class _Indexer:
    def __init__(self, imports: ImportMap) -> None:
        self.imports = imports
        module_function = Function(node=None, name="<module>", parent=None)
        self.functions = [module_function]
        self.frames = [_Frame(module_function)]
        self.loops: list[Loop] = []
        self.calls: list[CallSite] = []
        self.aug_assigns: list[AugAssignSite] = []
        self.assigns: list[AssignSite] = []
        self.returns: list[ReturnSite] = []
        self.classes: list[str] = []  # enclosing class definitions, innermost last
        self.class_depth: list[int] = []  # the number of frames where each class began
        self.class_bases: dict[str, list[str]] = {}
        self.assign_targets: dict[int, str] = {}
        self.statement_of: dict[int, int] = {}

    @property
    def frame(self) -> _Frame:
        return self.frames[-1]

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.add_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.add_import_from(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        decorators = []
        for decorator in node.decorators:
            expr = decorator.decorator
            func = expr.func if isinstance(expr, cst.Call) else expr
            decorators.append((decorator, self.imports.resolve(func) or dotted(func)))
        # A method is a function defined directly in a class body (not nested in a method).
        in_class = self.classes and self.class_depth[-1] == len(self.frames)
        class_name = self.classes[-1] if in_class else None
        function = Function(node, node.name.value, self.frame.function, decorators, [], class_name)
        self.functions.append(function)
        self.frames.append(_Frame(function))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.frames.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node.name.value)
        bases = [self.imports.resolve(b.value) or dotted(b.value) for b in node.bases]
        self.class_bases[node.name.value] = [b for b in bases if b is not None]
        self.class_depth.append(len(self.frames))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.classes.pop()
        self.class_depth.pop()

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.returns.append(ReturnSite(node.value, self.frame.function))

    def _push_loop(self, node, targets: set[str], iter_expr) -> None:
        frame = self.frame
        parent = frame.loops[-1] if frame.loops else None
        loop = Loop(node, frame.function, parent, targets, iter_expr)
        frame.loops.append(loop)
        self.loops.append(loop)

    def visit_For(self, node: cst.For) -> None:
        self._push_loop(node, _bound_names(node.target), node.iter)

    def leave_For(self, original_node: cst.For) -> None:
        self.frame.loops.pop()

    def visit_While(self, node: cst.While) -> None:
        self._push_loop(node, set(), None)

    def leave_While(self, original_node: cst.While) -> None:
        self.frame.loops.pop()

    def visit_If(self, node: cst.If) -> None:
        guards = self.frame.guards
        if guards and guards[-1].node is not None and guards[-1].node.orelse is node:
            self._enter_orelse()  # an `elif`: the else branch of the `if` above
        guards.append(Guard(node.test, len(self.frame.loops), node))

    def visit_Else(self, node: cst.Else) -> None:
        guards = self.frame.guards
        # `for`/`while`/`try` have an `else:` too; only an `if`'s is a branch
        if guards and guards[-1].node is not None and guards[-1].node.orelse is node:
            self._enter_orelse()

    def _enter_orelse(self) -> None:
        # A new Guard, not a changed one: calls of the body keep theirs.
        top = self.frame.guards[-1]
        self.frame.guards[-1] = Guard(top.test, top.loop_depth, top.node, orelse=True)

    def leave_If(self, original_node: cst.If) -> None:
        self.frame.guards.pop()

    def visit_With(self, node: cst.With) -> None:
        self.frame.withs.append([with_item_name(self.imports, i.item) for i in node.items])

    def leave_With(self, original_node: cst.With) -> None:
        self.frame.withs.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            self.assigns.append(
                AssignSite(t.target, node.value, self.frame.function, len(self.calls))
            )
        if len(node.targets) == 1:
            target = dotted(node.targets[0].target)
            if target is not None:
                self.assign_targets[id(node.value)] = target
        if self.frame.loops:
            loop = self.frame.loops[-1]
            for t in node.targets:
                names = _bound_names(t.target)
                loop.assigned |= names
                loop.assignments.extend((name, len(self.calls)) for name in names)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        frame = self.frame
        self.aug_assigns.append(
            AugAssignSite(
                node,
                dotted(node.target),
                node.value,
                frame.function,
                tuple(frame.loops),
                len(self.calls),
            )
        )

    def visit_Call(self, node: cst.Call) -> None:
        frame = self.frame
        func = node.func
        method = receiver = None
        if isinstance(func, cst.Attribute):
            method, receiver = func.attr.value, func.value
        site = CallSite(
            node=node,
            name=self.imports.resolve(func),
            method=method,
            receiver=receiver,
            seq=len(self.calls),
            function=frame.function,
            loops=tuple(frame.loops),
            guards=tuple(frame.guards),
            withs=tuple(name for items in frame.withs for name in items),
            assigned_to=self.assign_targets.get(id(node)),
        )
        self.calls.append(site)
        frame.function.calls.append(site)
        if frame.loops:
            frame.loops[-1].calls.append(site)


def add_module_imports(module: cst.Module, imports: ImportMap) -> ImportMap:
    """``imports`` with the module-level ``import``/``from`` statements of ``module`` added."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import):
                    imports.add_import(small)
                elif isinstance(small, cst.ImportFrom):
                    imports.add_import_from(small)
    return imports


def build_index(source: str, module: cst.Module, imports: ImportMap | None = None) -> FileIndex:
    """The index of ``module``; ``imports``: names already imported (by the rest of a file
    linted in parts), which this module's imports add to."""
    # Module-level imports first, so that a function above an import still resolves it.
    imports = add_module_imports(module, imports or ImportMap())
    indexer = _Indexer(imports)
    for number, statement in enumerate(module.body):
        walk(statement, indexer, number)
    return FileIndex(
        source=source,
        module=module,
        imports=imports,
        functions=indexer.functions,
        loops=indexer.loops,
        calls=indexer.calls,
        aug_assigns=indexer.aug_assigns,
        assigns=indexer.assigns,
        returns=indexer.returns,
        statement_of=indexer.statement_of,
        class_bases=indexer.class_bases,
    )
