"""Shared by the lint tests: run one rule (or all) over a fixture the way the CLI does."""

from __future__ import annotations

from pathlib import Path

import torch

from torchpace.lint.engine import lint_bytes
from torchpace.lint.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures"
RULES_BY_NAME = {rule.name(): rule for rule in RULES}


def rule_for(fixture: Path):
    return RULES_BY_NAME[fixture.parent.name]


def expected_lines(fixture: Path) -> list[str]:
    """The findings of a fixture as `line:col CODE message`, the format of the .txt files."""
    result = lint_bytes(fixture.read_bytes(), str(fixture), [rule_for(fixture)])
    assert result.error is None, result.error
    return [f"{v.line}:{v.column} {v.code} {v.message}" for v in result.violations]


def fixed_source(fixture: Path) -> bytes:
    rule = rule_for(fixture)
    result = lint_bytes(fixture.read_bytes(), str(fixture), [rule], fix=rule.fix_safety)
    assert result.error is None, result.error
    return result.new_source if result.new_source is not None else fixture.read_bytes()


def lint_fixtures() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.py") if not p.name.endswith((".in.py", ".out.py")))


def fix_fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.in.py"))


def observable(value):
    """What a program computed, in a form that compares by value."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            str(value.dtype),
            value.device.type,
            tuple(value.shape),
            value.requires_grad,
            value.is_leaf,
            value.detach().cpu().tolist(),
        )
    if isinstance(value, torch.amp.GradScaler):
        return ("GradScaler", value._device, value.is_enabled(), observable(value.state_dict()))
    if isinstance(value, torch.amp.autocast):
        return (
            "autocast",
            value.device,
            str(value.fast_dtype),
            value._enabled,
            value._cache_enabled,
        )
    if isinstance(value, torch.nn.Module | torch.optim.Optimizer):
        return (type(value).__name__, observable(value.state_dict()))
    if isinstance(value, dict):
        return {k: observable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [observable(v) for v in value]
    if isinstance(value, torch.Size | torch.dtype | torch.device):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"no comparison for {type(value).__name__}: add one to _observable")
