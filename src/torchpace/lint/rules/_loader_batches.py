"""Loaders and the batches they yield, shared by the pinned-memory rules (TP102, TP103)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from torchpace.lint.index import CallSite, FileIndex, Function, Loop
from torchpace.lint.names import argument, dotted, keyword, positional, root_name
from torchpace.lint.rules._names import DATALOADER, DTYPES

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn,
#            pin_memory, ...)
PIN_MEMORY_POSITION = 7


@dataclass
class Loader:
    call: CallSite
    target: str  # the name it is assigned to
    pinned: bool | None  # None: not known statically


def loaders(index: FileIndex) -> list[Loader]:
    found = []
    for call in index.calls:
        if call.name in DATALOADER and call.assigned_to is not None:
            known, value = argument(call.node, "pin_memory", PIN_MEMORY_POSITION)
            if not known:
                pinned = None
            elif value is None:
                pinned = False
            elif isinstance(value, cst.Name) and value.value in ("True", "False"):
                pinned = value.value == "True"
            else:
                pinned = None
            found.append(Loader(call, call.assigned_to, pinned))
    return found


def _iterated_name(expr: cst.BaseExpression | None) -> str | None:
    """`loader`, `enumerate(loader)`, `tqdm(loader, ...)`: the loader's name."""
    if isinstance(expr, cst.Call) and expr.args and expr.args[0].keyword is None:
        expr = expr.args[0].value
    return dotted(expr)


def loops_over(index: FileIndex, loader: Loader) -> Iterator[Loop]:
    """Loops over ``loader``: where it is made, or in a function of this file it is
    passed to (`train(model, train_loader)`)."""
    same_scope = loader.call.function
    # A plain name must be the same function's (or a module-level loader); an attribute
    # (`self.train_loader`) is matched across methods.
    anywhere = "." in loader.target or same_scope.node is None
    for loop in index.loops:
        if _iterated_name(loop.iter) == loader.target and (anywhere or loop.function is same_scope):
            yield loop
    for function, parameter in _receivers(index, loader, anywhere):
        for loop in index.loops:
            if loop.function is function and _iterated_name(loop.iter) == parameter:
                yield loop


def _receivers(index: FileIndex, loader: Loader, anywhere: bool):
    """(function, parameter name) for each `helper(..., loader, ...)` call of this file."""
    for call in index.calls:
        func = call.node.func
        if not isinstance(func, cst.Name) or (
            not anywhere and call.function is not loader.call.function
        ):
            continue
        for position, arg in enumerate(call.node.args):
            if arg.star or dotted(arg.value) != loader.target:
                continue
            for function in index.functions_named(func.value):
                params = [p.name.value for p in function.node.params.params]
                if arg.keyword is not None and arg.keyword.value in params:
                    yield function, arg.keyword.value
                elif arg.keyword is None and position < len(params):
                    yield function, params[position]


def device_moves(index: FileIndex, loop: Loop) -> Iterator[CallSite]:
    """`.cuda()` / `.to(device)` of a batch of ``loop``: in the loop, in loops nested in it,
    or in a function of this file that the loop hands the batch to (`train_step(batch)`)."""
    for call in _calls_within(loop):
        if _moves(call, loop.targets):
            yield call
    for call, parameters in _batch_helpers(index, loop):
        for inner in call.calls:
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
    """(function, its parameters that receive a batch) for `helper(batch, ...)` in the loop."""
    for call in _calls_within(loop):
        if not isinstance(call.node.func, cst.Name) or any(a.star for a in call.node.args):
            continue
        positions = [
            i for i, arg in enumerate(positional(call.node)) if root_name(arg.value) in loop.targets
        ]
        if not positions:
            continue
        for function in index.functions_named(call.node.func.value):
            params = [p.name.value for p in function.node.params.params]
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
