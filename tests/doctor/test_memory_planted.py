"""End to end on planted scripts: a run that dies of an out-of-memory error still gets its
report (TP404 first, its traceback as python shows it, no headroom); kept outputs point TP401
to their line; the checkpointing estimate against what checkpointing really frees."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow
PLANTED = ROOT / "tests" / "planted"
MIB = 2**20


def doctor(tmp_path, script, *args, warmup=1, steps=3, options=()):
    tmp_path.mkdir(parents=True, exist_ok=True)
    report = tmp_path / "report.json"
    env = dict(os.environ, COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torchpace", "doctor", "--warmup", str(warmup), "--steps",
           str(steps), "--out", str(tmp_path / "run"), "--json", str(report), *options,
           str(PLANTED / script), *args]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    return proc, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("fail_at", [0, 2], ids=["in-warmup", "in-window"])
def test_oom_mid_step_gets_a_report(tmp_path, fail_at):
    proc, report = doctor(tmp_path, "oom_mid_step.py", "--fail-at", str(fail_at))
    assert proc.returncode == 1, proc.stderr
    # the user's traceback, as python shows it, then the report
    assert "Traceback (most recent call last)" in proc.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in proc.stderr
    first = report["findings"][0]
    assert first["code"] == "TP404", report["findings"]
    assert first["evidence"]["step"] == fail_at and first["evidence"]["phase"] == "backward"
    assert "oom_mid_step.py:" in first["location"]
    assert not any(f["code"] in ("TP104", "TP901") for f in report["findings"])
    oom = report["memory"]["out_of_memory"]
    params = (256 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10) * 4
    assert oom["split"]["parameters"] == params
    assert oom["split"]["activations"] > 0 and oom["ways_out"]
    assert "headroom_bytes" not in report["memory"]
    assert "TP404" in proc.stdout and "way out 1" in proc.stdout


def test_outputs_kept_in_a_list_point_tp401_to_the_model_call(tmp_path):
    proc, report = doctor(tmp_path, "outputs_kept_in_list.py", "--steps", "20", steps=4)
    assert proc.returncode == 0, proc.stderr
    leak = next(f for f in report["findings"] if f["code"] == "TP401")
    assert leak["location"].endswith("outputs_kept_in_list.py:15")  # out = model(x)
    assert leak["evidence"]["kept_activations_kib_per_step"] == 128 * 1000 * 4 / 1024


def test_checkpointing_estimate_within_25_percent_of_the_real_saving(tmp_path):
    plain, before = doctor(tmp_path / "plain", "activation_heavy.py", "--steps", "20")
    ckpt, after = doctor(tmp_path / "ckpt", "activation_heavy.py", "--steps", "20", "--checkpoint")
    assert plain.returncode == 0 and ckpt.returncode == 0, plain.stderr + ckpt.stderr
    split = before["memory"]["split_at_peak"]
    assert split["parts"]["activations"] / split["peak"] > 0.5  # activation-heavy indeed
    estimate = before["memory"]["checkpointing_frees_bytes"]
    real = split["peak"] - after["memory"]["split_at_peak"]["peak"]
    assert real > 0 and abs(estimate - real) / real < 0.25, (estimate / MIB, real / MIB)


def test_variable_length_batches_are_tp406(tmp_path):
    proc, report = doctor(tmp_path, "variable_length_batches.py", "--steps", "20", steps=4)
    assert proc.returncode == 0, proc.stderr
    codes = [f["code"] for f in report["findings"]]
    assert "TP406" in codes and "TP401" not in codes, codes
