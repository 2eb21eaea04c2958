"""TP201 sync-in-training-loop (P18)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.frameworks import LOG_TENSOR, framework_of, step_methods
from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule
from torchpace.lint.training import (
    backward_target,
    has_modulo,
    is_backward,
    is_optimizer_step,
    local_callees,
    training_loop_of,
    under_interval,
    uses_a_device,
)

# Tensor methods that wait for the device to finish everything queued so far.
SYNC_METHODS = {"item", "cpu", "numpy", "tolist", "nonzero"}
PRINT = "print(tensor)"


def _loss_names(calls) -> set[str]:
    return {t for c in calls if (t := backward_target(c)) is not None}


def _is_step_function(function, framework_steps: set[int] = frozenset()) -> bool:
    """A function whose body is one training step: backward and optimizer step, no loop;
    or a method a framework calls once per batch (``framework_steps``: their ids), such as a
    LightningModule's `training_step`."""
    if id(function) in framework_steps:
        return True
    top = [c for c in function.calls if not c.loops]
    return (
        function.node is not None
        and any(is_backward(c) for c in top)
        and any(is_optimizer_step(c) for c in top)
    )


def _returned_names(index, function) -> set[str]:
    """`return loss` in a framework's step method: the loss it backpropagates."""
    return {
        name
        for r in index.returns
        if r.function is function and (name := dotted(r.value)) is not None
    }


def _logged_calls(calls) -> set[int]:
    """ids of the calls inside the arguments of `self.log(...)` / `self.log_dict(...)`."""

    class Collect(cst.CSTVisitor):
        def __init__(self):
            self.ids: set[int] = set()

        def visit_Call(self, node: cst.Call) -> None:
            self.ids.add(id(node))

    collect = Collect()
    for call in calls:
        if call.method in ("log", "log_dict") and dotted(call.receiver) == "self":
            for arg in call.node.args:
                arg.visit(collect)
    return collect.ids


def _printed_names(call: cst.Call) -> set[str]:
    names = set()
    for arg in call.args:
        value = arg.value
        if isinstance(value, cst.FormattedString):
            for part in value.parts:
                if isinstance(part, cst.FormattedStringExpression):
                    names.add(dotted(part.expression))
        else:
            names.add(dotted(value))
    return names - {None}


def _periodic(guards, depth: int) -> bool:
    """Under an `if step % N == 0:` entered within ``depth`` enclosing loops or deeper."""
    return any(g.loop_depth >= depth and has_modulo(g.test) for g in guards)


def _per_step_callers(index, framework_steps: set[int]) -> dict[int, cst.Call]:
    """id(function) -> a call that runs it every training step: from a training loop's body
    or a step function's (not under a periodic `if`), or from a function so called outside
    any `if` of its own (a flag such as `if self.control.should_log:` is as periodic as
    `step % N`, and cannot be told from it)."""
    roots = []
    for call in index.calls:
        loop = training_loop_of(index, call) if call.loops else None
        if loop is not None:
            if not under_interval(call, loop):
                roots.append(call)
        elif (
            not call.loops
            and _is_step_function(call.function, framework_steps)
            and not _periodic(call.guards, 0)
        ):
            roots.append(call)
    callers: dict[int, cst.Call] = {}
    while roots:
        call = roots.pop()
        for function in local_callees(index, call):
            if id(function) not in callers and not _is_step_function(function, framework_steps):
                callers[id(function)] = call.node
                # Inside the callee, any `if` may be a periodic one (`if should_log:`).
                roots += [c for c in function.calls if not c.guards]
    return callers


class SyncInTrainingLoop(Rule):
    """## What it does

    Flags `.item()`, `.cpu()`, `.numpy()`, `.tolist()`, `.nonzero()` and `print(tensor)` inside
    the training step.

    The training step is the body of the loop that calls `.backward()` or an optimizer
    `.step()`, either itself or through a *step function* of the same file (`train_step(batch)`,
    `self._run_batch(x, y)`: a function that calls backward or the step outside any loop of its
    own), and the body of such a step function. A loop that calls a function with its own
    training loop (`for epoch in range(n): train(epoch); test(epoch)`) is an epoch loop: what it
    does once per epoch, such as sampling a few images under `torch.no_grad()` and saving them,
    costs nothing per step and is not reported. A sync under an `if step % N == 0:` is a
    periodic one, the recommended practice, and is not reported either. The functions the step
    calls are part of it: a `.item()` in `test(model)` called after every optimizer step is
    reported, with the line of the call. Inside those functions only what runs unconditionally
    counts: an `if` there may be a periodic flag (`if self.control.should_log:`), which cannot
    be told from any other condition. A file that puts nothing on a device (no `.cuda()`,
    `.to(...)`, `device=`, `torch.cuda`/`torch.accelerator`) computes on the CPU, where these
    calls wait for nothing: it is not reported.

    ## Why it matters

    Each of these waits for the GPU to finish everything queued so far, so the CPU stops running
    ahead: the next step's kernels are launched late and the GPU idles. Reading the loss every
    step can cost several percent of step time on a fast GPU.

    ## Example

    ```python
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running += loss.item()
    ```

    ## Use instead

    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        running += loss.detach()          # stays on the device
        if step % 100 == 0:
            print(running.item() / 100)  # one sync per 100 steps
    ```

    ## Fix safety

    No automatic fix: where to read a value is a decision about the program. Lines already
    guarded by a logging interval still show up; silence them with `# noqa: TP201`.

    ## Under a framework

    Lightning's `training_step` and an HF `Trainer` subclass's `compute_loss` / `training_step`
    are training steps: the framework calls them once per batch. `self.log("loss", loss)` is not
    a sync (Lightning takes the tensor); `self.log("loss", loss.item())` is, and the message
    says to pass the tensor. A file whose framework is not pinned to the CPU trains on a device
    even without `.to(device)` ([frameworks.md](../frameworks.md#lint-on-framework-scripts)).
    """

    code = "TP201"
    message = "CPU-GPU sync inside the training loop"
    VALID = (
        "for x, y in loader:\n    loss = f(x, y)\n    loss.backward()\n    opt.step()\n"
        "    if step % 100 == 0:\n        print(loss.item())\n",
        "# no device anywhere: CPU tensors\nfor x, y in data:\n    loss = f(x, y)\n"
        "    loss.backward()\n    opt.step()\n    running += loss.item()\n",
        "for epoch in range(3):\n    for x in loader:\n        loss = f(x)\n"
        "        loss.backward()\n    print(total.item())\n",
        "for x in loader:\n    acc = (f(x) == y).sum().item()\n",
    )
    INVALID = (
        "for x, y in loader:\n    loss = f(x.cuda(), y.cuda())\n    loss.backward()\n"
        "    opt.step()\n    running += loss.item()\n",
        "for x, y in loader:\n    loss = f(x.to(device), y)\n    loss.backward()\n"
        "    print(loss)\n",
    )

    def check(self, index):
        if not uses_a_device(index):
            return  # tensors stay on the CPU: `.item()` waits for nothing
        callers = None
        framework = framework_of(index)
        # the methods a framework calls once per batch (Lightning's training_step)
        framework_steps = {id(f) for f in step_methods(index)}
        logged = None
        for call in index.calls:
            what = self._sync(call)
            if what is None:
                continue
            loop = training_loop_of(index, call) if call.loops else None
            refs = ()
            if loop is not None:
                if under_interval(call, loop):
                    continue
                losses = _loss_names(loop.calls)
            elif (
                not call.loops
                and not call.guards
                and _is_step_function(call.function, framework_steps)
            ):
                # the body of one training step
                losses = _loss_names(call.function.calls) | _returned_names(index, call.function)
            else:
                # A function the training step calls (`test(model)` after each step),
                # itself or through others: its syncs run every step too.
                if callers is None:
                    callers = _per_step_callers(index, framework_steps)
                caller = callers.get(id(call.function))
                if caller is None or call.guards:
                    continue  # under an `if` (`if self.should_log:`) it may not run each step
                losses, refs = set(), (("called in the training step at line {line}", caller),)
            if what == PRINT and not (_printed_names(call.node) & losses):
                continue
            message = f"{self.message}: {what} waits for the GPU"
            if framework in LOG_TENSOR:
                logged = _logged_calls(index.calls) if logged is None else logged
                if id(call.node) in logged:
                    message += f"; {LOG_TENSOR[framework]}"
            yield self.finding(call.node, message, refs=refs)

    @staticmethod
    def _sync(call) -> str | None:
        if call.method in SYNC_METHODS and not call.node.args:
            # `.cpu().numpy()` is one sync: report the first call of the chain only.
            receiver = call.receiver
            if (
                isinstance(receiver, cst.Call)
                and isinstance(receiver.func, cst.Attribute)
                and receiver.func.attr.value in SYNC_METHODS
            ):
                return None
            return f".{call.method}()"
        if isinstance(call.node.func, cst.Name) and call.node.func.value == "print":
            return PRINT
        return None
