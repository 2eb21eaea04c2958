"""A fix marked safe keeps what the program computes; an unsafe one has a program where it
does not (the reason it is unsafe).

Each program below exercises fixes of one rule. It is fixed the way `torchpace lint --fix`
would, then the original and the fixed program both run (CPU, same seed) and everything they
bound is compared: tensor values, dtypes, devices, autograd state, modules' and optimizers'
state, scalers' state, autocast settings.
"""

from __future__ import annotations

import types
import warnings

import pytest
import torch
from lint_helpers import observable

from torchpace.lint.engine import lint_bytes
from torchpace.lint.rule import SAFE, UNSAFE
from torchpace.lint.rules import RULES

RULES_BY_CODE = {rule.code: rule for rule in RULES}

# code -> programs whose every finding of that code has a safe fix (or, where said, none)
SAFE_PROGRAMS = {
    "TP105": [
        # the factories that make the same values wherever they run
        """
import numpy as np
import torch
device = torch.device("cpu")
mask = torch.zeros(4, 4).to(device)
ones = torch.ones(2, 3, dtype=torch.float16).to(device)
filled = torch.full((3,), 0.1).to(device)
eye = torch.eye(3).to(device=device)
steps = torch.arange(10).to(device)
strided = torch.arange(2, 20, 3).to(device)
negative = torch.arange(-4, 4, step=2).to(device)
count = torch.arange(len([3, 1, 2]), dtype=torch.float32).to(device)
data = torch.tensor([[0.1, 0.2], [0.3, 0.4]]).to(device)
array = torch.as_tensor(np.arange(6.0)).to(device)
shape = torch.empty(2, 3, dtype=torch.float64).to(device).shape
""",
        # reported without a fix: on the device it would be a leaf, not a copy of one
        """
import torch
device = torch.device("cpu")
weights = torch.zeros(3, requires_grad=True).to(device)
loss = (weights * 2).sum()
loss.backward()
""",
    ],
    "TP306": [
        """
import torch
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
scaler = torch.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=10)
with torch.cuda.amp.autocast():
    out = model(x)
with torch.cuda.amp.autocast(dtype=torch.bfloat16, cache_enabled=False) as explicit:
    out2 = model(x)
loss = out.float().pow(2).mean() + out2.float().mean()
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
enabled = scaler.is_enabled()
scale = scaler.get_scale()
ctx = torch.cuda.amp.autocast(enabled=True)

@torch.cuda.amp.autocast()
def forward(x):
    return model(x)

out3 = forward(x)
""",
    ],
}

# code -> a program whose fixed version computes something else (and why)
UNSAFE_PROGRAMS = {
    # A parameter that gets a gradient once: with zeros it keeps moving (momentum, weight
    # decay); with None the optimizer skips it.
    "TP303": """
import torch
model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 2), "sometimes": torch.nn.Linear(4, 2)})
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
x = torch.randn(8, 4)
for step in range(3):
    optimizer.zero_grad(set_to_none=False)
    loss = model["used"](x).pow(2).mean()
    if step == 0:
        loss = loss + model["sometimes"](x).mean()
    loss.backward()
    optimizer.step()
""",
    # The conv's bias leaves the parameter set: checkpoints no longer load.
    "TP302": """
import torch.nn as nn
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
keys = list(model.state_dict())
""",
    # torch.amp.autocast takes the process's autocast dtype; torch.cuda.amp.autocast float16.
    "TP306": """
import torch
torch.set_autocast_dtype("cuda", torch.bfloat16)
ctx = torch.cuda.amp.autocast()
torch.set_autocast_dtype("cuda", torch.float16)
""",
}


def run_program(source: str) -> dict:
    """Run ``source`` with seed 0 and return what it bound, comparable by value."""
    namespace: dict = {"__name__": "__program__"}
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cuda.amp's deprecation, CUDA absent
        exec(compile(source, "<program>", "exec"), namespace)
    return {
        name: observable(value)
        for name, value in namespace.items()
        if not name.startswith("__")
        and not isinstance(value, types.ModuleType | types.FunctionType | type)
    }


def fixed(source: str, code: str, mode: str) -> tuple[str, list]:
    """The program after `--fix` (mode "safe") or `--fix --unsafe-fixes`, with the findings
    of ``code`` that remain."""
    result = lint_bytes(source.encode(), "program.py", [RULES_BY_CODE[code]], fix=mode)
    assert result.error is None, result.error
    return (result.new_source or source.encode()).decode(), result.violations


SAFE_CASES = [(code, i) for code, programs in SAFE_PROGRAMS.items() for i in range(len(programs))]


@pytest.mark.parametrize(("code", "number"), SAFE_CASES, ids=lambda v: str(v))
def test_a_safe_fix_computes_the_same_values(code, number):
    source = SAFE_PROGRAMS[code][number]
    before = lint_bytes(source.encode(), "program.py", [RULES_BY_CODE[code]]).violations
    assert before, f"the {code} program has no {code} finding to fix"
    assert not any(v.fixable and v.fix_safety != SAFE for v in before)
    after_source, after = fixed(source, code, SAFE)
    assert not any(v.fixable for v in after), "a safe fix was not applied"
    assert run_program(after_source) == run_program(source)


def test_every_rule_with_safe_fixes_has_a_program():
    assert {r.code for r in RULES if r.fix_safety == SAFE} == set(SAFE_PROGRAMS)


@pytest.mark.parametrize("code", sorted(UNSAFE_PROGRAMS))
def test_an_unsafe_fix_has_a_program_it_changes(code):
    source = UNSAFE_PROGRAMS[code]
    found = lint_bytes(source.encode(), "program.py", [RULES_BY_CODE[code]]).violations
    assert found and all(v.fixable and v.fix_safety == UNSAFE for v in found)
    safe_source, _ = fixed(source, code, SAFE)
    assert safe_source == source, "--fix applied an unsafe fix"
    unsafe_source, _ = fixed(source, code, UNSAFE)
    assert unsafe_source != source
    assert run_program(unsafe_source) != run_program(source)


def test_every_rule_with_unsafe_fixes_has_a_program():
    unsafe = {r.code for r in RULES if r.fix_safety == UNSAFE}
    assert unsafe <= set(UNSAFE_PROGRAMS)


RANDOM_FACTORIES = """
import torch
device = torch.device("cuda")
split = torch.randperm(100).to(device)
noise = torch.randn(4, 4).to(device)
labels = torch.randint(0, 10, (8,)).cuda()
uniform = torch.rand(3).cuda()
"""


def test_random_factories_get_an_unsafe_fix_only():
    found = lint_bytes(RANDOM_FACTORIES.encode(), "p.py", [RULES_BY_CODE["TP105"]]).violations
    assert len(found) == 4
    assert all(v.fix_safety == UNSAFE and "random generator" in v.message for v in found)
    assert fixed(RANDOM_FACTORIES, "TP105", SAFE)[0] == RANDOM_FACTORIES


@pytest.mark.cuda
def test_random_factories_on_the_device_draw_other_numbers():
    """Why TP105's fix of a random factory is unsafe: the CUDA generator, seeded the same,
    gives other numbers than the CPU one (a seeded run's data split would change)."""
    unsafe_source, _ = fixed(RANDOM_FACTORIES, "TP105", UNSAFE)
    assert "device=device" in unsafe_source
    before, after = run_program(RANDOM_FACTORIES), run_program(unsafe_source)
    assert before["split"] != after["split"] and before["noise"] != after["noise"]


@pytest.mark.cuda
@pytest.mark.parametrize("number", range(len(SAFE_PROGRAMS["TP306"])))
def test_the_amp_fix_computes_the_same_on_the_gpu(number):
    """On a GPU autocast is on (float16 matmuls): the old and new API must agree there too."""
    source = SAFE_PROGRAMS["TP306"][number].replace("torch.randn(8, 4)", "torch.randn(8, 4).cuda()")
    source = source.replace("torch.nn.Linear(4, 2)", "torch.nn.Linear(4, 2).cuda()")
    after_source, _ = fixed(source, "TP306", SAFE)
    assert after_source != source
    assert run_program(after_source) == run_program(source)
