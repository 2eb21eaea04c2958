"""TP401 tensor-accumulated-across-steps (P22)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule
from torchpace.lint.training import backward_target


class TensorAccumulatedAcrossSteps(Rule):
    code = "TP401"
    message = "loss tensor accumulated across iterations keeps every step's graph alive"
    VALID = (
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total += loss.item()\n",
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total += loss.detach()\n",
        "for x in loader:\n    loss = f(x)\n    total = 0\n    total += loss\n"
        "    loss.backward()\n",
    )
    INVALID = (
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total_loss += loss\n",
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    losses.append(loss)\n",
    )

    def check(self, index):
        for site in index.aug_assigns:
            if not site.loops or not isinstance(site.node.operator, cst.AddAssign):
                continue
            loop = site.loops[-1]
            value = dotted(site.value)
            if value in self._losses(loop) and site.target not in loop.assigned:
                yield self.finding(site.node, f"{self.message}: add {value}.detach() or .item()")
        for loop in index.loops:
            losses = self._losses(loop)
            for call in loop.calls:
                if call.method != "append" or len(call.node.args) != 1:
                    continue
                value = dotted(call.node.args[0].value)
                receiver = dotted(call.receiver)
                if value in losses and receiver not in loop.assigned:
                    yield self.finding(
                        call.node, f"{self.message}: append {value}.detach() or .item()"
                    )

    @staticmethod
    def _losses(loop) -> set[str]:
        return {t for c in loop.calls if (t := backward_target(c)) is not None}
