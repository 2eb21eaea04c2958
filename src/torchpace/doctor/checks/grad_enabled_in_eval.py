"""TP301 grad-enabled-in-eval: Evaluation runs with autograd on (seen at run time)."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class EvalWithAutograd(Check):
    """TP301 at run time: the model runs forward with autograd on in steps where no backward
    follows (evaluation, inference): autograd saves activations for nothing.

    ## In a profile (torchpace doctor)

    The capture sees the model's calls (a forward pre-hook on the model the optimizer trains)
    and whether autograd unpacked any saved tensor in the step (a backward ran). When at least
    half of the profiled steps (`EvalWithAutograd.MIN_STEP_SHARE`) called the model with
    autograd on and trainable parameters but ran no backward, the doctor reports TP301 with the
    activations autograd held in those steps for nothing (the saved-tensors hook's count).
    Profile an evaluation loop with `--step-on dataloader`.
    """

    code = "TP301"

    # Most of the profiled steps must be such steps: one validation batch in a training
    # window is not an evaluation loop.
    MIN_STEP_SHARE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        wasted = [s for s in steps if s.grad_forwards and not s.backward_ran]
        if not steps or len(wasted) / len(steps) < self.MIN_STEP_SHARE:
            return []
        held = max(s.split.activations for s in wasted)
        return [
            Finding(
                "TP301",
                evidence={
                    "steps_without_backward": len(wasted),
                    "steps": len(steps),
                    "forwards_with_grad_per_step": r(
                        sum(s.grad_forwards for s in wasted) / len(wasted), 1
                    ),
                    "activations_held_mib": r(held / MIB),
                },
                severity="medium",
                location=profile.facts.model.location if profile.facts.model else None,
                detail=f"the model ran forward with autograd on in {len(wasted)} of "
                f"{len(steps)} steps with no backward; autograd held "
                f"{memory.size(held)} of activations for nothing",
                fix="wrap evaluation in `with torch.inference_mode():` (or torch.no_grad()) and "
                "call model.eval()",
                notes=["the time saved (autograd bookkeeping) is not estimated; the memory is"],
            )
        ]
