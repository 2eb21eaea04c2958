"""Planted GPU loops of our own (tests/planted/gpu_ab.py), each A/B-tested by hand: the
loop as written and with the fix the doctor should name, timed by the script itself in
separate runs on the same GPU. The doctor must put that finding first (or among the first
two where compile legitimately leads) with an estimate within 1.5x of the measured saving.
Skipped without CUDA."""

import subprocess
import sys

import pytest
from conftest import ROOT

from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.doctor.analyze import diagnose
from torchpace.trace import load_trace

pytestmark = [pytest.mark.cuda, pytest.mark.slow]
SCRIPT = ROOT / "tests" / "planted" / "gpu_ab.py"


def measured_ms(tmp_path, case: str, fixed: bool, env) -> float:
    report = tmp_path / f"{case}-{fixed}.txt"
    cmd = [sys.executable, str(SCRIPT), "--case", case, "--report", str(report)]
    subprocess.run(cmd + (["--fixed"] if fixed else []), check=True, env=env, timeout=300)
    return float(report.read_text())


def doctor(tmp_path, case: str):
    out = tmp_path / f"doctor-{case}"
    out.mkdir()
    spec = CaptureSpec(str(SCRIPT), ["--case", case, "--steps", "2000"], out, measure_s=2.0)
    result = capture_script(spec)
    return diagnose(load_trace(result.trace_path), result.facts)


def ab(tmp_path, case, env):
    """(the doctor's diagnosis, the saving measured by hand in ms/step, the step as written)"""
    base = measured_ms(tmp_path, case, False, env)
    fixed = measured_ms(tmp_path, case, True, env)
    base_again = measured_ms(tmp_path, case, False, env)  # alternated: drift cancels
    base = (base + base_again) / 2
    return doctor(tmp_path, case), base - fixed, base


def within(estimate, measured, factor=1.5):
    return measured > 0 and measured / factor <= estimate <= measured * factor


def test_syncs_in_a_launch_bound_loop(tmp_path, child_env):
    d, saving, base = ab(tmp_path, "syncs", child_env)
    first = d.findings[0]
    assert first.code == "TP201", [f.to_dict() for f in d.findings]
    assert within(first.saving_ms, saving), (first.saving_ms, saving, base)


def test_float_data_from_pageable_memory(tmp_path, child_env):
    d, saving, base = ab(tmp_path, "floats", child_env)
    codes = [f.code for f in d.findings]
    assert codes[0] == "TP102", codes
    assert within(d.findings[0].saving_ms, saving), (d.findings[0].saving_ms, saving, base)
    for f in d.findings:  # noise frames: never called images, never told to be uint8
        if f.code == "TP106":
            assert "images" not in f.detail and "uint8" not in f.fix


def test_launch_bound_optimizer(tmp_path, child_env):
    d, saving, base = ab(tmp_path, "optimizer", child_env)
    codes = [f.code for f in d.findings]
    assert "TP313" in codes[:2], codes
    (f,) = [f for f in d.findings if f.code == "TP313"]
    assert f.knob == "fused-optimizer"
    assert within(f.saving_ms, saving), (f.saving_ms, saving, base)
