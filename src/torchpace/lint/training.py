"""What makes code "training code", shared by the rules that only fire there.

A *training step* is the body of the loop that calls `.backward()` or an optimizer step,
including the functions of the same file it calls to do so. That loop is the *training
loop*: it calls backward or the step itself, or calls a *step function*, a function of the
same file (`train_step(batch)`, `self._run_batch(x, y)`) that calls them outside any loop of
its own. A loop that calls a function with its own training loop (`for epoch in ...:
train(epoch)`) is an epoch loop, not a training loop: what it does once per epoch, such as
sampling under `torch.no_grad()` after `train()` and `test()`, is not per step.
"""

from __future__ import annotations

import libcst as cst

from torchpace.lint.frameworks import places_on_a_device
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


def local_callees(index: FileIndex, call: CallSite) -> list[Function]:
    """The functions of this file that ``call`` may run: `f(...)` by name, and
    `self.f(...)` / `cls.f(...)` by method name (the class is not resolved)."""
    func = call.node.func
    if isinstance(func, cst.Name):
        return [f for f in index.functions_named(func.value) if f.class_name is None]
    if (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value in ("self", "cls")
    ):
        methods = index.functions_named(func.attr.value)
        return [f for f in methods if f.class_name is not None]
    return []


def is_step_function(index: FileIndex, function: Function) -> bool:
    """A function that calls backward or an optimizer step outside any loop of its own,
    itself or through another step function: called once, it runs one step."""
    cache = index.__dict__.setdefault("_step_functions", {})
    if id(function) not in cache:
        cache[id(function)] = False  # a recursive call does not make a function a step
        top = [c for c in function.calls if not c.loops]
        cache[id(function)] = trains_directly(top) or any(
            is_step_function(index, callee) for c in top for callee in local_callees(index, c)
        )
    return cache[id(function)]


def calls_step_function(index: FileIndex, calls: list[CallSite]) -> bool:
    """A call to a step function of this file (`loss = train_step(batch)`)."""
    return any(is_step_function(index, f) for call in calls for f in local_callees(index, call))


def loop_trains(index: FileIndex, loop: Loop) -> bool:
    cache = index.__dict__.setdefault("_loop_trains", {})
    if id(loop) not in cache:
        cache[id(loop)] = trains_directly(loop.calls) or calls_step_function(index, loop.calls)
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


# Where tensors may leave the CPU: a move, a device module, a factory given a device.
DEVICE_MODULES = ("torch.cuda", "torch.accelerator", "torch.device", "torch.mps", "torch.xpu")


def uses_a_device(index: FileIndex) -> bool:
    """Whether the file puts anything on a device: `.cuda()`, `.to(...)`, `device=`,
    `torch.cuda.*`, `torch.accelerator.*`, `torch.device(...)`, or a framework not pinned
    to the CPU that does it for the file (Lightning's Trainer, Accelerate, the HF Trainer).
    A file that does none of these (a CPU-only example) has no GPU to wait for."""
    cache = index.__dict__.get("_uses_a_device")
    if cache is None:
        cache = any(
            call.method in ("cuda", "to")
            or (call.name or "").startswith(DEVICE_MODULES)
            or any(a.keyword is not None and a.keyword.value == "device" for a in call.node.args)
            for call in index.calls
        ) or places_on_a_device(index)
        index.__dict__["_uses_a_device"] = cache
    return cache


def exclusive_branches(a: CallSite, b: CallSite) -> bool:
    """Whether two calls sit in different branches of one `if` (`if amp: ... else: ...`), so
    that no run executes both."""
    branch = {id(g.node): g.orelse for g in a.guards if g.node is not None}
    return any(
        g.node is not None and id(g.node) in branch and branch[id(g.node)] != g.orelse
        for g in b.guards
    )
