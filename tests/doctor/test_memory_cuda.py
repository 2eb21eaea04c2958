"""The memory report on a GPU: a job that runs out of CUDA memory (a batch that doubles each
step under a per-process memory cap) and the split at the peak from the CUDA allocator.
Skipped without CUDA."""

from __future__ import annotations

import pytest
from test_memory_planted import MIB, doctor

pytestmark = [pytest.mark.cuda, pytest.mark.slow]


def test_cuda_oom_gets_tp404_with_allocator_figures_and_no_headroom(tmp_path):
    proc, report = doctor(tmp_path, "oom_mid_step.py", "--cuda-fraction", "0.05", "--steps", "60")
    assert proc.returncode == 1, proc.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in proc.stderr
    first = report["findings"][0]
    assert first["code"] == "TP404", report["findings"]
    codes = [f["code"] for f in report["findings"]]
    assert "TP104" not in codes and "headroom_bytes" not in report["memory"]
    oom = report["memory"]["out_of_memory"]
    split = oom["split"]
    assert split["device"] == "cuda" and split["allocated"] >= split["parameters"]
    # the cap is the per-process fraction of the device, not the whole device
    assert split["capacity_kind"] == "per-process memory fraction 0.05"
    assert "per-process memory fraction 0.05" in first["detail"]
    assert split["reserved"] >= split["allocated"] and oom["requested_bytes"]
    assert oom["ways_out"][0]["frees_bytes"] > 0


def test_cuda_split_at_the_peak(tmp_path):
    proc, report = doctor(tmp_path, "activation_heavy.py", "--device", "cuda", "--steps", "20")
    assert proc.returncode == 0, proc.stderr
    split = report["memory"]["split_at_peak"]
    assert split["peak_how"].startswith("torch.cuda.max_memory_allocated")
    parts = split["parts"]
    assert parts["activations"] > parts["parameters"] > 0
    assert parts["rest"] >= 0 and sum(parts.values()) == split["peak"]
    assert split["capacity"] > 1024 * MIB
