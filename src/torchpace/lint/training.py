"""What makes code "training code", shared by the rules that only fire there.

A training loop is a loop that itself calls ``.backward()`` or an optimizer step, or calls a
function of the same file that does. An epoch loop around a batch loop is not one: once per
epoch is not per step.
"""

from __future__ import annotations

import libcst as cst

from torchpace.lint.index import OPTIMIZER_NAME, CallSite, FileIndex, Function, Loop
from torchpace.lint.names import dotted, positional


def is_backward(call: CallSite) -> bool:
    return call.method == "backward" or call.name == "torch.autograd.backward"


def backward_target(call: CallSite) -> str | None:
    """The tensor that ``call`` backpropagates from: `loss` in `loss.backward()`,
    `scaler.scale(loss).backward()`, `accelerator.backward(loss)`."""
    if not is_backward(call):
        return None
    receiver = call.receiver
    if (
        isinstance(receiver, cst.Call)
        and isinstance(receiver.func, cst.Attribute)
        and receiver.func.attr.value == "scale"
        and positional(receiver)
    ):
        return dotted(positional(receiver)[0].value)
    if isinstance(receiver, cst.Name | cst.Attribute) and not positional(call.node):
        return dotted(receiver)
    args = positional(call.node)
    return dotted(args[0].value) if args else None


def is_optimizer_step(call: CallSite) -> bool:
    if call.method != "step":
        return False
    receiver = call.receiver
    if isinstance(receiver, cst.Call):
        receiver = receiver.func
    name = dotted(receiver)
    return name is not None and bool(OPTIMIZER_NAME.search(name.split(".")[-1]))


def trains_directly(calls: list[CallSite]) -> bool:
    return any(is_backward(c) or is_optimizer_step(c) for c in calls)


def function_trains(function: Function) -> bool:
    return trains_directly(function.calls)


def calls_training_function(index: FileIndex, calls: list[CallSite]) -> bool:
    """A call to a function of this file that trains (`loss = train_step(batch)`)."""
    return any(
        isinstance(call.node.func, cst.Name)
        and any(function_trains(f) for f in index.functions_named(call.node.func.value))
        for call in calls
    )


def loop_trains(index: FileIndex, loop: Loop) -> bool:
    cache = index.__dict__.setdefault("_loop_trains", {})
    if id(loop) not in cache:
        cache[id(loop)] = trains_directly(loop.calls) or calls_training_function(index, loop.calls)
    return cache[id(loop)]


def training_loop_of(index: FileIndex, call: CallSite) -> Loop | None:
    """The innermost enclosing loop that trains, if any."""
    for loop in reversed(call.loops):
        if loop_trains(index, loop):
            return loop
    return None


def file_trains(index: FileIndex) -> bool:
    return any(is_backward(c) for c in index.calls) and any(
        is_optimizer_step(c) for c in index.calls
    )


def has_modulo(expr: cst.BaseExpression) -> bool:
    class Finder(cst.CSTVisitor):
        found = False

        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if isinstance(node.operator, cst.Modulo):
                self.found = True

    finder = Finder()
    expr.visit(finder)
    return finder.found


def under_interval(call: CallSite, loop: Loop) -> bool:
    """Inside an `if step % N == 0:` within ``loop``: a periodic action, not a per-step one.

    Logging the loss every N steps is the recommended practice; flagging it would be a
    false alarm."""
    depth = call.loops.index(loop) + 1
    return any(g.loop_depth >= depth and has_modulo(g.test) for g in call.guards)
