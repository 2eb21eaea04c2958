"""Loaders and the batches they yield, shared by the pinned-memory rules (TP102, TP103).

A loader is followed within its file, the way real training code passes it around: from the
`DataLoader(...)` call to the names that hold it (`loader = ...`), through the functions that
return it, alone or in a tuple (`train_loader = build_loader(...)`, `model, loader =
build(ds)`, `out = build(ds); out[1]`), the tuples it is put in and unpacked from, the
functions and classes it is passed to (`train(model, loader)`, `train(*build(ds))`,
`Trainer(model, loader)` and the parameter of their `__init__`) and the attributes that keep
it (`self.train_data = train_data`, matched in every method). Then every loop over one of
those names is a loop over its batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst

from torchpace.lint.index import CallSite, FileIndex, Function, Loop
from torchpace.lint.names import argument, dotted, keyword, positional, root_name
from torchpace.lint.rules._names import DATALOADER, DTYPES
from torchpace.lint.training import local_callees

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, ...)
PIN_MEMORY_POSITION = 7
# `for i in range(len(loader))` iterates over numbers, not over the loader's batches.
NOT_WRAPPERS = {"range", "len"}
# A loader reaches few names; this bounds the search on pathological files.
MAX_FLOW_STEPS = 200


@dataclass(frozen=True, eq=True)
class Holder:
    """A name that holds a loader: a plain name in one function, or (function None) an
    attribute or a module-level name, matched in every function of the file."""

    function: Function | None
    name: str


@dataclass
class Loader:
    call: CallSite  # the DataLoader(...) call: where the loader is built
    pinned: bool | None  # None: not known statically
    holders: list[Holder]  # the names it is known by
    loops: list[Loop]  # the loops over its batches


def loaders(index: FileIndex) -> list[Loader]:
    cache = index.__dict__.get("_loaders")
    if cache is not None:
        return cache
    found = []
    for call in index.calls:
        if call.name not in DATALOADER:
            continue
        known, value = argument(call.node, "pin_memory", PIN_MEMORY_POSITION)
        if known:
            pinned = _flag(value) if value is not None else False
        else:
            pinned = _pinned_through_kwargs(index, call)
        holders, loops = _follow(index, call)
        if loops:
            found.append(Loader(call, pinned, holders, loops))
    index.__dict__["_loaders"] = found
    return found


def _flag(value: cst.BaseExpression) -> bool | None:
    """True/False written as such; None for anything computed."""
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return value.value == "True"
    return None


# `pin_memory` may be absent from a keyword dict (one branch of `{...} if accel else {}`).
ABSENT = "absent"
MAX_DICT_DEPTH = 4


def _pinned_through_kwargs(index: FileIndex, call: CallSite) -> bool | None:
    """`DataLoader(ds, **kwargs)` where this file builds `kwargs` from dict literals:
    `kwargs = {'pin_memory': True} if use_accel else {}`, `kwargs.update(accel_kwargs)`.
    True when some branch pins (the one that copies to the GPU), False when none can, None
    when the dict cannot be read (built elsewhere, or from computed values)."""
    values: set = set()
    for arg in call.node.args:
        if arg.star == "*":
            return None
        if arg.star == "**":
            name = dotted(arg.value)
            found = _dict_values(index, name, call.function, 0) if name else None
            if found is None:
                return None
            values |= found
    if True in values:
        return True
    return False if values <= {False, ABSENT} else None


def _dict_values(index: FileIndex, name: str, scope: Function, depth: int) -> set | None:
    """The values `pin_memory` may take in the dict ``name`` (ABSENT: may be missing)."""
    if depth > MAX_DICT_DEPTH:
        return None
    visible = (scope, index.functions[0])  # its function's names, then the module's
    assigned = [s for s in index.assigns if dotted(s.target) == name and s.function in visible]
    if not assigned:
        return None
    values: set = set()
    for site in assigned:
        found = _literal_values(index, site.value, scope, depth)
        if found is None:
            return None
        values |= found
    if _changed_otherwise(index, name):
        return None
    for update in index.calls:
        if update.method != "update" or dotted(update.receiver) != name:
            continue
        if update.function not in visible:
            continue
        args = update.node.args
        if len(args) != 1 or args[0].keyword is not None or args[0].star:
            return None
        found = _literal_values(index, args[0].value, scope, depth)
        if found is None:
            return None
        values |= found  # added to what the dict held (an update may sit under an `if`)
    return values


def _changed_otherwise(index: FileIndex, name: str) -> bool:
    """`kwargs["pin_memory"] = True`, `kwargs |= {...}`, `kwargs.setdefault(...)`: changes
    this reading does not follow, so the dict is not known."""
    return (
        any(
            isinstance(site.target, cst.Subscript) and dotted(site.target.value) == name
            for site in index.assigns
        )
        or any(site.target == name for site in index.aug_assigns)
        or any(
            call.method not in ("update", "get", "items", "keys", "values", "copy")
            and dotted(call.receiver) == name
            for call in index.calls
        )
    )


def _literal_values(index, expr, scope: Function, depth: int) -> set | None:
    if isinstance(expr, cst.IfExp):
        body = _literal_values(index, expr.body, scope, depth)
        orelse = _literal_values(index, expr.orelse, scope, depth)
        return None if body is None or orelse is None else body | orelse
    if isinstance(expr, cst.Name):
        return _dict_values(index, expr.value, scope, depth + 1)
    if not isinstance(expr, cst.Dict):
        return None
    values = {ABSENT}
    for element in expr.elements:
        if isinstance(element, cst.StarredDictElement):
            return None
        key = element.key
        if isinstance(key, cst.SimpleString) and key.evaluated_value == "pin_memory":
            values = {_flag(element.value)}
    return values


# What the flow search carries: expressions that evaluate to the loader, or to a tuple that
# holds it; where to look for them (a function, or None: anywhere); and the path to the
# loader inside that tuple: () for the loader itself, (1,) for `(model, loader)`, (1, 0) for
# `(model, (train, val))`.
Path = tuple[int, ...]


@dataclass(frozen=True)
class Matcher:
    """A test for the expressions that evaluate to the loader (or the tuple holding it), and
    the key every such expression has (see ``_keys``): the search looks only at the sites
    filed under that key, so following N loaders through a file of N functions stays
    linear, not N x N."""

    key: object
    test: Callable[[cst.BaseExpression], bool]

    def __call__(self, expr: cst.BaseExpression) -> bool:
        return self.test(expr)


def _callee_key(func: cst.BaseExpression) -> tuple[str, str] | None:
    if isinstance(func, cst.Name):
        return ("call", func.value)
    if isinstance(func, cst.Attribute):
        return ("call", func.attr.value)
    return None


def _keys(expr: cst.BaseExpression) -> set:
    """What a matcher may ask of ``expr``: its dotted name, the name of the function it calls,
    those of the elements of the tuple or list it writes out, or of what it indexes."""
    keys: set = set()
    stack = [expr]
    while stack:
        expr = stack.pop()
        name = dotted(expr)
        if name is not None:
            keys.add(name)
        if isinstance(expr, cst.Call):
            key = _callee_key(expr.func)
            if key is not None:
                keys.add(key)
        elif isinstance(expr, cst.Subscript):
            stack.append(expr.value)
        elif isinstance(expr, cst.Tuple | cst.List):
            stack.extend(element.value for element in expr.elements)
    return keys


@dataclass
class _Sites:
    """The file's assignments, returns, calls and loops, filed by the keys of the
    expressions the flow search tests (values, returned values, arguments, iterables)."""

    assigns: dict
    returns: dict
    calls: dict
    loops: dict


def _sites(index: FileIndex) -> _Sites:
    cached = index.__dict__.get("_loader_sites")
    if cached is not None:
        return cached

    def file(table: dict, keys: set, site) -> None:
        for key in keys:
            table.setdefault(key, []).append(site)

    sites = _Sites({}, {}, {}, {})
    for assign in index.assigns:
        file(sites.assigns, _keys(assign.value), assign)
    for returned in index.returns:
        file(sites.returns, _keys(returned.value), returned)
    for call in index.calls:
        keys: set = set()
        for arg in call.node.args:
            keys |= _keys(arg.value)
        file(sites.calls, keys, call)
    for loop in index.loops:
        keys = set()
        for expr in _iterated(loop.iter):
            keys |= _keys(expr)
        file(sites.loops, keys, loop)
    index.__dict__["_loader_sites"] = sites
    return sites


def _holder(function: Function, target: cst.BaseExpression) -> Holder | None:
    name = dotted(target)
    if name is None:
        return None
    anywhere = "." in name or function.node is None
    return Holder(None if anywhere else function, name)


def _elements(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """The elements of a tuple or list written out, up to the first starred one (after it,
    positions are not known)."""
    if not isinstance(expr, cst.Tuple | cst.List):
        return None
    elements = []
    for element in expr.elements:
        if isinstance(element, cst.StarredElement):
            break
        elements.append(element.value)
    return elements


def _paths_in(expr: cst.BaseExpression, matches: Matcher, path: Path) -> Iterator[Path]:
    """Where the loader sits in ``expr``: ``path`` when ``expr`` matches, and inside the
    tuples and lists it writes out (`model.cuda(), loader` holds it at (1,))."""
    if matches(expr):
        yield path
        return
    for i, element in enumerate(_elements(expr) or ()):
        for inner in _paths_in(element, matches, path):
            yield (i, *inner)


def _unpack(target: cst.BaseExpression, path: Path) -> Iterator[tuple[cst.BaseExpression, Path]]:
    """The part of an assignment's target that receives the loader, and where the loader is
    in what that part receives: `model, loader = pair` gives `loader`; `out = pair` gives
    `out` with the path unchanged."""
    if not path:
        yield target, path
        return
    if isinstance(target, cst.Tuple | cst.List):
        if any(isinstance(e, cst.StarredElement) for e in target.elements):
            return
        if path[0] < len(target.elements):
            yield from _unpack(target.elements[path[0]].value, path[1:])
        return
    yield target, path


def _parameters(index: FileIndex, call: CallSite, position: int | None, name: str | None):
    """(function, parameter) that receive the argument at ``position`` (or the keyword
    ``name``) of a call to a function, a method (`self.f(...)`) or a class (its `__init__`)
    of this file."""
    func = call.node.func
    skip = 0 if isinstance(func, cst.Name) else 1  # self.f(x): x is f's second parameter
    targets = [(f, skip) for f in local_callees(index, call)]
    if isinstance(func, cst.Name):
        targets += [(f, 1) for f in index.class_methods(func.value, "__init__")]
    for function, skip in targets:
        params = function.parameters[skip:]
        if name is not None:
            if name in params:
                yield function, name
        elif position is not None and position < len(params):
            yield function, params[position]


def _arguments(call: CallSite, matches: Matcher, path: Path):
    """(position or None, keyword or None, path) of the arguments of ``call`` that carry the
    loader: `train(model, loader)`, `train(loader=loader)`, `train(*build(ds))` (the
    elements of a starred tuple are the next positions)."""
    position: int | None = 0
    for arg in call.node.args:
        if arg.star == "**":
            continue
        if arg.star == "*":
            for inner in _paths_in(arg.value, matches, path):
                if inner and position is not None:
                    yield position + inner[0], None, inner[1:]
            position = None  # how many it spread is not known
            continue
        name = arg.keyword.value if arg.keyword is not None else None
        for inner in _paths_in(arg.value, matches, path):
            yield (position if name is None else None), name, inner
        if name is None and position is not None:
            position += 1


def _follow(index: FileIndex, built: CallSite) -> tuple[list[Holder], list[Loop]]:
    """The names that hold the loader built by ``built``, and the loops over it."""
    holders: list[Holder] = []
    loops: list[Loop] = []
    seen: set[tuple[Holder, Path]] = set()
    returned: set[tuple[int, Path]] = set()
    sites = _sites(index)
    work: list[tuple[Matcher, Function | None, Path]] = [
        (Matcher(_callee_key(built.node.func), lambda expr: expr is built.node), built.function, ())
    ]

    def hold(holder: Holder | None, path: Path) -> None:
        if holder is None or (holder, path) in seen:
            return
        seen.add((holder, path))
        if not path:
            holders.append(holder)
        work.append((_named(holder.name), holder.function, path))

    steps = 0
    while work and steps < MAX_FLOW_STEPS:
        steps += 1
        matches, scope, path = work.pop()
        if path:  # `pair[1]`, `build(ds)[1]`: the element is what the rest of the path says
            work.append((_subscript(matches, path[0]), scope, path[1:]))
        for site in sites.assigns.get(matches.key, ()):
            if scope is None or site.function is scope:
                for found in _paths_in(site.value, matches, path):
                    for target, rest in _unpack(site.target, found):
                        hold(_holder(site.function, target), rest)
        for site in sites.returns.get(matches.key, ()):
            if scope is not None and site.function is not scope:
                continue
            if site.function.node is None:
                continue
            for found in _paths_in(site.value, matches, path):
                key = (id(site.function), found)
                if key not in returned:
                    returned.add(key)
                    work.append((_calls_to(index, site.function), None, found))
        for call in sites.calls.get(matches.key, ()):
            if scope is not None and call.function is not scope:
                continue
            for position, name, rest in _arguments(call, matches, path):
                for function, parameter in _parameters(index, call, position, name):
                    hold(Holder(function, parameter), rest)
        if path:
            continue
        for loop in sites.loops.get(matches.key, ()):
            in_scope = scope is None or loop.function is scope
            if in_scope and loop not in loops and any(map(matches, _iterated(loop.iter))):
                loops.append(loop)
    return holders, loops


def _subscript(matches: Matcher, position: int) -> Matcher:
    """`x[position]` where ``x`` matches."""

    def test(expr: cst.BaseExpression) -> bool:
        if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1:
            return False
        index = expr.slice[0].slice
        return (
            isinstance(index, cst.Index)
            and isinstance(index.value, cst.Integer)
            and index.value.evaluated_value == position
            and matches(expr.value)
        )

    return Matcher(matches.key, test)


def _named(name: str) -> Matcher:
    return Matcher(name, lambda expr: dotted(expr) == name)


def _calls_to(index: FileIndex, function: Function) -> Matcher:
    """Calls of ``function``: only those filed under its name can be (`f(...)`,
    `self.f(...)`)."""
    key = ("call", function.name)
    return Matcher(key, lambda expr: isinstance(expr, cst.Call) and _calls(index, expr, function))


def _calls(index: FileIndex, node: cst.Call, function: Function) -> bool:
    by_node = index.__dict__.get("_call_sites")
    if by_node is None:
        by_node = {id(call.node): call for call in index.calls}
        index.__dict__["_call_sites"] = by_node
    call = by_node.get(id(node))
    return call is not None and function in local_callees(index, call)


def _iterated(expr: cst.BaseExpression | None) -> Iterator[cst.BaseExpression]:
    """What a `for` loop may iterate over: `loader`, or the first argument of wrappers such
    as `enumerate(loader)`, `tqdm(loader, ...)`, `enumerate(tqdm(loader), start=1)`."""
    while expr is not None:
        yield expr
        if (
            isinstance(expr, cst.Call)
            and expr.args
            and expr.args[0].keyword is None
            and (dotted(expr.func) or "").split(".")[-1] not in NOT_WRAPPERS
        ):
            expr = expr.args[0].value
        else:
            return


def loops_over(index: FileIndex, loader: Loader) -> list[Loop]:
    """Loops over ``loader``'s batches, under any of the names that hold it."""
    return loader.loops


def device_moves(index: FileIndex, loop: Loop) -> Iterator[CallSite]:
    """`.cuda()` / `.to(device)` of a batch of ``loop``: in the loop, in loops nested in it,
    or in a function of this file that the loop hands the batch to (`train_step(batch)`)."""
    for call in _calls_within(loop):
        if _moves(call, loop.targets):
            yield call
    for function, parameters in _batch_helpers(index, loop):
        for inner in function.calls:
            if _moves(inner, parameters):
                yield inner


def _moves(call: CallSite, batch_names: set[str]) -> bool:
    if call.method not in ("cuda", "to") or root_name(call.receiver) not in batch_names:
        return False
    return call.method == "cuda" or _is_device_move(call.node)


def _calls_within(loop: Loop) -> Iterator[CallSite]:
    yield from loop.calls
    for call in loop.function.calls:
        if loop in call.loops and call.loops[-1] is not loop:
            yield call


def _batch_helpers(index: FileIndex, loop: Loop) -> Iterator[tuple[Function, set[str]]]:
    """(function, its parameters that receive a batch) for `helper(batch, ...)` and
    `self.helper(batch, ...)` in the loop."""
    for call in _calls_within(loop):
        if any(a.star for a in call.node.args):
            continue
        positions = [
            i for i, arg in enumerate(positional(call.node)) if root_name(arg.value) in loop.targets
        ]
        if not positions:
            continue
        method_call = not isinstance(call.node.func, cst.Name)  # self.helper(batch)
        for function in local_callees(index, call):
            params = function.parameters[1:] if method_call else function.parameters
            received = {params[i] for i in positions if i < len(params)}
            if received:
                yield function, received


def _is_device_move(call: cst.Call) -> bool:
    if keyword(call, "device") is not None:
        return True
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        return False
    first = call.args[0].value
    if isinstance(first, cst.SimpleString):
        text = first.evaluated_value  # "cpu" or "meta": no copy to a GPU
        return isinstance(text, str) and text.startswith("cuda")
    name = dotted(first)
    if name is None:
        return isinstance(first, cst.Call | cst.Subscript)  # torch.device(...), devices[i]
    return name not in DTYPES and "dtype" not in name.lower()


def mentions_cuda(index: FileIndex) -> bool:
    return "cuda" in index.source


def _in(function: Function, other: Function) -> str:
    """`, in train()` when ``function`` is not ``other``: where to look in a long file."""
    if function is other or function.node is None:
        return ""
    return f", in {function.qualified_name}()"


def copied_at(loader: Loader, move: CallSite) -> tuple[str, cst.CSTNode]:
    """The reference from a loader's finding to where its batches are copied."""
    return f"copied at line {{line}}{_in(move.function, loader.call.function)}", move.node


def built_at(loader: Loader, move: CallSite) -> tuple[str, cst.CSTNode]:
    """The reference from a copy's finding to where its loader is built."""
    where = _in(loader.call.function, move.function)
    return f"the DataLoader is built at line {{line}}{where}", loader.call.node
