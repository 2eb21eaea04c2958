"""Memory: TP401 (growth across steps: a leak), TP403 (peak close to capacity), TP405
(activations dominate: checkpointing would free them), TP406 (input shapes change), TP301
(evaluation with autograd on), TP402 (empty_cache in the step), TP407 (fragmentation); TP404
(the script ran out of memory) is out_of_memory.py, run by doctor/analyze.py.

One module per check (the check and its code); this one lists the family."""

from __future__ import annotations

from torchpace.doctor.checks.activations_dominate_memory import ActivationsDominate
from torchpace.doctor.checks.allocator_fragmentation import Fragmentation
from torchpace.doctor.checks.empty_cache_in_loop import EmptyCacheInLoop
from torchpace.doctor.checks.grad_enabled_in_eval import EvalWithAutograd
from torchpace.doctor.checks.low_memory_headroom import LowHeadroom
from torchpace.doctor.checks.tensor_accumulated_across_steps import MemoryGrowth
from torchpace.doctor.checks.variable_input_shapes import VariableInputShapes
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

CHECKS = [
    MemoryGrowth(),
    LowHeadroom(),
    ActivationsDominate(),
    VariableInputShapes(),
    EvalWithAutograd(),
    EmptyCacheInLoop(),
    Fragmentation(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
