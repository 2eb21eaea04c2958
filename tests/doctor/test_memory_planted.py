"""End to end on planted scripts: a run that dies of an out-of-memory error still gets its
report (TP404 first, its traceback as python shows it, no headroom), a planted error or a
real allocation failure under a memory cap; kept outputs, with their graph or detached,
point TP401 to their line; an activation-heavy job near a memory cap gets TP405, with a
checkpointing estimate held to what checkpointing really frees."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from conftest import ROOT
from json_schemas import validate_output

pytestmark = pytest.mark.slow
PLANTED = ROOT / "tests" / "planted"
MIB = 2**20


def doctor(tmp_path, script, *args, warmup=1, steps=3, options=(), preexec=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    report = tmp_path / "report.json"
    env = dict(os.environ, COLUMNS="120")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "torchpace", "doctor", "--warmup", str(warmup), "--steps",
           str(steps), "--out", str(tmp_path / "run"), "--json", str(report), *options,
           str(PLANTED / script), *args]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          preexec_fn=preexec)  # fmt: skip
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


def test_real_cpu_allocation_failure_under_a_memory_cap(tmp_path):
    # the batch doubles every step under RLIMIT_DATA until the CPU allocator fails
    proc, report = doctor(tmp_path, "oom_mid_step.py", "--cap-mib", "1500", "--steps", "40")
    assert proc.returncode == 1, proc.stderr
    # torch's CPU allocator fails where the batch's tensors are; one CI run of 7fee729 failed
    # elsewhere under the same cap, its traceback cut from the assertion (now shown whole)
    failed_here = ("DefaultCPUAllocator: can't allocate memory", "MemoryError",
                   "Cannot allocate memory")  # fmt: skip
    assert any(m in proc.stderr for m in failed_here), proc.stderr[-3000:]
    first = report["findings"][0]
    assert first["code"] == "TP404", (report["findings"], proc.stderr[-2000:])
    assert "RLIMIT_DATA" in first["detail"] and first["evidence"]["requested_mib"] > 0
    oom = report["memory"]["out_of_memory"]
    assert oom["split"]["capacity_kind"] == "RLIMIT_DATA" and oom["requested_bytes"]
    assert "batch_headroom" not in report["memory"]
    if report["memory"].get("activations_unmeasured"):  # it failed after the profiled steps
        assert any("not measured" in note for note in first["notes"])
    validate_output(report, "doctor_report")


def test_outputs_kept_in_a_list_point_tp401_to_the_model_call(tmp_path):
    proc, report = doctor(tmp_path, "outputs_kept_in_list.py", "--steps", "20", steps=4)
    assert proc.returncode == 0, proc.stderr
    leak = next(f for f in report["findings"] if f["code"] == "TP401")
    assert leak["location"].endswith("outputs_kept_in_list.py:15")  # out = model(x)
    assert leak["evidence"]["kept_activations_kib_per_step"] == 128 * 1000 * 4 / 1024


@pytest.mark.parametrize("clone", [False, True], ids=["detach", "detach-clone"])
def test_detached_outputs_kept_in_a_list_point_tp401_to_the_line_that_keeps_them(tmp_path, clone):
    args = ["--steps", "20", *(["--clone"] if clone else [])]
    proc, report = doctor(tmp_path, "detached_outputs_kept.py", *args, steps=4)
    assert proc.returncode == 0, proc.stderr
    leak = next(f for f in report["findings"] if f["code"] == "TP401")
    assert leak["location"].endswith("detached_outputs_kept.py:26")  # kept.append(...)
    assert leak["evidence"]["kept_copies_kib_per_step"] == 128 * 1000 * 4 / 1024
    assert "detached_outputs_kept.py:26" in proc.stdout


def test_a_job_run_under_ulimit_v_is_measured_against_its_address_space(tmp_path):
    # `ulimit -v 6 GiB` around the doctor: the script's process inherits it; a torch process
    # holds about 3 GiB of address space for its libraries, so its tensors have much less
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, resource.RLIM_INFINITY))

    proc, report = doctor(tmp_path, "activation_heavy.py", "--steps", "20", preexec=cap)
    assert proc.returncode == 0, proc.stderr
    split = report["memory"]["split_at_peak"]
    assert split["capacity_kind"] == "RLIMIT_AS" and split["capacity"] == 6 * 2**30
    assert 2 * 2**30 < split["outside"] < 5 * 2**30  # VmSize besides the step's tensors
    assert split["usable_bytes"] == split["capacity"] - split["outside"]
    assert "the 6.00 GiB RLIMIT_AS less" in " ".join(proc.stdout.split())


# activation_heavy.py at batch 4096 under a cap 40 MiB above its own peak (RLIMIT_DATA)
NEAR_A_CAP = ["--steps", "20", "--batch", "4096", "--cap-room-mib", "40"]


def test_checkpointing_near_a_memory_cap_within_25_percent_of_the_real_saving(tmp_path):
    quick = {"warmup": 2, "options": ("--measure", "0")}
    plain, before = doctor(tmp_path / "plain", "activation_heavy.py", *NEAR_A_CAP, **quick)
    # the same model and batch, checkpointed (uncapped: the saving is a difference of peaks)
    ckpt, after = doctor(
        tmp_path / "ckpt", "activation_heavy.py", *NEAR_A_CAP[:4], "--checkpoint", **quick
    )
    assert plain.returncode == 0 and ckpt.returncode == 0, plain.stderr + ckpt.stderr
    split = before["memory"]["split_at_peak"]
    assert split["capacity_kind"] == "RLIMIT_DATA"
    assert split["parts"]["activations"] / split["peak"] > 0.5  # activation-heavy indeed
    assert split["peak"] / split["usable_bytes"] > 0.7  # near the cap
    tp405 = next(f for f in before["findings"] if f["code"] == "TP405")
    assert tp405["evidence"]["capacity"].endswith("RLIMIT_DATA")
    assert "RLIMIT_DATA" in plain.stdout
    estimate = before["memory"]["checkpointing_frees_bytes"]
    assert tp405["evidence"]["checkpointing_frees_mib"] == round(estimate / MIB, 2)
    real = split["peak"] - after["memory"]["split_at_peak"]["peak"]
    assert real > 0 and abs(estimate - real) / real < 0.25, (estimate / MIB, real / MIB)
    validate_output(before, "doctor_report")


def test_variable_length_batches_are_tp406(tmp_path):
    proc, report = doctor(tmp_path, "variable_length_batches.py", "--steps", "20", steps=4)
    assert proc.returncode == 0, proc.stderr
    codes = [f["code"] for f in report["findings"]]
    assert "TP406" in codes and "TP401" not in codes, codes
