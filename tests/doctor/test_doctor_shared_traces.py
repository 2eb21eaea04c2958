"""The doctor on the real CUDA traces: breakdown numbers and findings, pinned.

Independent counts (json + gzip over the raw events) agree with the pinned values: e.g. the
AlexNet trace's 16 pageable HtoD copies hold 244403360 bytes and their cudaMemcpyAsync calls
block the host 56991 us; its 5 cudaDeviceSynchronize calls are followed by 944600 us of
device idle before the next GPU op; its GPU ops cover 66141 us.
"""

import json

import pytest

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.result import NO_BOTTLENECK, diagnosis_to_dict
from torchpace.trace import load_trace


def doctor(shared_traces, name):
    return diagnose(load_trace(shared_traces / name))


def test_resnet_fp32_on_v100_is_the_finding(shared_traces):
    d = doctor(shared_traces, "resnet_nccl_rank0.json.gz")
    p = d.profile
    assert p.steps == 5 and p.device_name == "Tesla V100-SXM2-32GB"
    assert p.step_ms == pytest.approx(95.551087)
    assert p.median.kernels == 870
    assert p.median.matmul_ms == pytest.approx(59.6107, abs=1e-3)
    assert p.median.matmul_tensor_core_ms == 0.0
    assert p.median.syncs == 0 and p.median.h2d_bytes == 0
    (f,) = d.findings
    assert (f.code, f.severity) == ("TP307", "high")
    assert f.saving_ms == pytest.approx(59.6107 / 2, abs=1e-3)


def test_alexnet_pageable_copies_and_syncs(shared_traces):
    d = doctor(shared_traces, "alexnet_pageable_sync.json.gz")
    p = d.profile
    assert p.synthetic_steps and p.steps == 1
    assert p.median.h2d_pageable_bytes == 244403360
    assert p.median.h2d_pageable_host_ms == pytest.approx(56.991)
    assert (p.median.syncs, p.median.copy_syncs) == (5, 16)
    assert p.median.sync_wait_ms == pytest.approx(0.938)
    assert p.median.gpu_busy_ms == pytest.approx(66.141)
    # The device idles 944.6 ms after the syncs, but the host was busy elsewhere: it was
    # blocked in them 0.938 ms only, and that is all their removal can give back (the
    # lost-overlap model: min(host blocked, GPU idle)). Pinning comes first.
    assert [f.code for f in d.findings] == ["TP102", "TP307", "TP201"]
    pageable, _, sync = d.findings
    assert sync.saving_ms == pytest.approx(0.938)
    # host blocked 56.991 ms minus 244403360 B at the assumed 22 GB/s pinned on sm80
    assert pageable.saving_ms == pytest.approx(56.991 - 244403360 / 22e9 * 1000)


def test_sampled_trace_breakdown_and_nccl_bound_gpu(shared_traces):
    d = doctor(shared_traces, "sampled_rank0.json.gz")
    p = d.profile
    assert p.step_ms == pytest.approx(615.12)
    assert p.median.h2d_pinned_bytes == (2359328 + 2490368) / 2
    assert p.median.d2h_pageable_count == 4
    assert p.median.kernels == 577
    busy_share = p.median.gpu_busy_ms / p.step_ms
    assert 0.40 < busy_share < 0.50  # the GPU idles over half of each step
    # most of its busy time is NCCL, little of it overlapped: that is the finding, priced at
    # the communication the GPU runs alone (not "the GPU idles with no cause found")
    (f,) = d.findings
    assert (f.code, f.severity) == ("TP506", "high")
    assert f.evidence["comm_share_of_gpu_pct"] == 72 and f.evidence["overlap_pct"] == 15
    assert f.saving_ms == pytest.approx(168.491, abs=1e-3)
    assert f.saving_ms == pytest.approx(p.median.gpu_comm_alone_ms)
    report = diagnosis_to_dict(d)
    assert report["verdict"] != NO_BOTTLENECK and report["gpu"]["kernels"]["median"] == 577


def test_cpu_only_trace_claims_nothing_about_gpus(shared_traces):
    d = doctor(shared_traces, "cpu_only_gloo.json.gz")
    report = diagnosis_to_dict(d)
    assert d.findings == [] and report["gpu"] is None
    assert report["step_ms"]["median"] == pytest.approx(210.109162)
    text = json.dumps(report).lower()
    assert "kernel" not in text and "tensor core" not in text
