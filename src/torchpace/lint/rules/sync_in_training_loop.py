"""TP201 sync-in-training-loop (P18)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule
from torchpace.lint.training import (
    backward_target,
    is_backward,
    is_optimizer_step,
    training_loop_of,
    under_interval,
)

# Tensor methods that wait for the device to finish everything queued so far.
SYNC_METHODS = {"item", "cpu", "numpy", "tolist", "nonzero"}
PRINT = "print(tensor)"


def _loss_names(calls) -> set[str]:
    return {t for c in calls if (t := backward_target(c)) is not None}


def _is_step_function(function) -> bool:
    """A function whose body is one training step: backward and optimizer step, no loop."""
    top = [c for c in function.calls if not c.loops]
    return (
        function.node is not None
        and any(is_backward(c) for c in top)
        and any(is_optimizer_step(c) for c in top)
    )


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


class SyncInTrainingLoop(Rule):
    code = "TP201"
    message = "CPU-GPU sync inside the training loop"
    VALID = (
        "for x, y in loader:\n    loss = f(x, y)\n    loss.backward()\n    opt.step()\n"
        "    if step % 100 == 0:\n        print(loss.item())\n",
        "for epoch in range(3):\n    for x in loader:\n        loss = f(x)\n"
        "        loss.backward()\n    print(total.item())\n",
        "for x in loader:\n    acc = (f(x) == y).sum().item()\n",
    )
    INVALID = (
        "for x, y in loader:\n    loss = f(x, y)\n    loss.backward()\n    opt.step()\n"
        "    running += loss.item()\n",
        "for x, y in loader:\n    loss = f(x, y)\n    loss.backward()\n    print(loss)\n",
    )

    def check(self, index):
        for call in index.calls:
            what = self._sync(call)
            if what is None:
                continue
            if call.loops:
                loop = training_loop_of(index, call)
                if loop is None or under_interval(call, loop):
                    continue
                losses = _loss_names(loop.calls)
            elif not call.guards and _is_step_function(call.function):
                losses = _loss_names(call.function.calls)  # the body of one training step
            else:
                continue
            if what == PRINT and not (_printed_names(call.node) & losses):
                continue
            yield self.finding(call.node, f"{self.message}: {what} waits for the GPU")

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
