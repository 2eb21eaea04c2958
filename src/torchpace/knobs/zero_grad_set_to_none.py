"""zero-grad-set-to-none: ``zero_grad()`` frees the gradients instead of writing zeros (P09).

``set_to_none=True`` is torch's default since 2.0; only an explicit ``set_to_none=False``
pays for a memset of every gradient each step. What changes: between ``zero_grad()`` and the
next backward, ``p.grad`` is None instead of a zero tensor (code that reads it then breaks),
and a parameter that gets no gradient in a step is skipped by the optimizer instead of being
stepped with a zero gradient (momentum and weight decay no longer move it that step).
"""

from __future__ import annotations

import functools

from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable


class ZeroGradSetToNone(Knob):
    name = "zero-grad-set-to-none"
    title = "zero_grad(set_to_none=True): gradients freed instead of zeroed"
    answers = ("TP303",)
    practices = ("P09",)

    def plan(self, ctx: TuneContext) -> Plan:
        if ctx.facts.calls.zero_grad_keep <= 0:
            return not_applicable(
                "the script never called zero_grad(set_to_none=False): gradients are "
                "already set to None (torch's default)"
            )
        return Plan(
            (True,),
            f"zero_grad(set_to_none=False) was called {ctx.facts.calls.zero_grad_keep} times; "
            "after it p.grad becomes None instead of zeros",
        )

    def apply(self, value, runtime) -> str:
        import torch

        if not value:
            return "nothing done (zero-grad-set-to-none=false)"
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            original = owner.zero_grad
            if getattr(original, "_torchpace_none", False):
                continue

            def zero_grad(self, set_to_none: bool = True, __original=original):
                return __original(self, True)

            zero_grad = functools.wraps(original)(zero_grad)
            zero_grad._torchpace_none = True
            owner.zero_grad = zero_grad
        # an optimizer class that defines its own zero_grad is not reached
        return "Optimizer.zero_grad and Module.zero_grad always set_to_none=True"

    def describe(self, value) -> str:
        return "zero_grad(set_to_none=True)" if value else "zero_grad as the script calls it"

    # No edit of a kind tune writes: `torchpace lint --fix --unsafe-fixes` rewrites
    # set_to_none=False (TP303, unsafe: the optimizer then skips parameters without a gradient).


KNOB = ZeroGradSetToNone()
