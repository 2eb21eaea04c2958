"""The doctor's checks are declared as lint's rules are: one check per module, named after its
code's catalog name, declaring that code, making findings of that code only, with the code's
docs page."""

import ast
import inspect
import sys

import pytest
from conftest import ROOT

from torchpace import catalog
from torchpace.doctor.checks import communication, compute, data, environment, memory, syncs
from torchpace.doctor.checks.base import Check

ONE_PER_MODULE = [
    c for family in (data, syncs, compute, memory, environment) for c in family.CHECKS
]
DECLARED = [*ONE_PER_MODULE, *communication.CHECKS]


@pytest.mark.parametrize("check", ONE_PER_MODULE, ids=lambda c: type(c).__name__)
def test_a_check_is_a_module_named_after_its_code(check):
    module = sys.modules[type(check).__module__]
    assert module.__name__.rsplit(".", 1)[1] == catalog.get(check.code).name.replace("-", "_")
    checks = [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, Check)]
    assert [c for c in checks if c is not Check] == [type(check)], "one check per module"


@pytest.mark.parametrize("check", DECLARED, ids=lambda c: type(c).__name__)
def test_a_check_makes_findings_of_its_code_only_and_its_code_has_a_page(check):
    entry = catalog.get(check.code)
    assert "doctor" in entry.seen_by
    assert (ROOT / entry.doc_path).is_file()
    source = inspect.getsource(type(check))
    made = {
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "Finding"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert made == {check.code}


def test_no_code_is_declared_twice():
    codes = [check.code for check in DECLARED]
    assert len(codes) == len(set(codes))
