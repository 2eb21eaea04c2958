"""Per-step measurements on a synthetic GPU step whose every number is known by design, and
the named metrics the profile and the report are built from."""

import sys

import pytest
from conftest import ROOT
from doctor_fakes import facts

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.profile import build_profile
from torchpace.doctor.result import BREAKDOWN, GPU_METRICS, GPU_SPLIT
from torchpace.doctor.steps import NUMBERS, metric_names, step_metrics
from torchpace.report.doctor_terminal import ROW_COLOURS
from torchpace.report.model import ROW_LABELS
from torchpace.trace import load_trace

sys.path.insert(0, str(ROOT / "tests" / "trace"))
from trace_events import a100, kernel, memcpy, runtime, span, step, write

IMAGE_BYTES = 32 * 3 * 64 * 64 * 4


@pytest.fixture
def gpu_step(tmp_path):
    image = {
        "Input Dims": [[32, 3, 64, 64], [], [], [], [], [], [], []],
        "Input type": ["float", "", "", "", "", "", "", ""],
    }
    events = [
        step(1, 0.0, 10_000.0),
        span(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            0.0,
            2_000.0,
            cat="user_annotation",
        ),
        # x.to("cuda") of a float32 image batch from pageable memory, then its stream sync
        span("aten::to", 2_100.0, 1_000.0, **image),
        runtime("cudaMemcpyAsync", 2_110.0, 900.0, correlation=1),
        memcpy("HtoD", "Pageable", 2_120.0, 850.0, IMAGE_BYTES, correlation=1),
        runtime("cudaStreamSynchronize", 3_011.0, 10.0, correlation=2),
        # forward: three kernels, 10 us launch gaps between them
        runtime("cudaLaunchKernel", 3_100.0, 5.0, correlation=3),
        kernel("ampere_sgemm_128x64_nn", 3_200.0, 1_000.0, correlation=3),
        runtime("cudaLaunchKernel", 3_110.0, 5.0, correlation=4),
        kernel("elementwise_kernel", 4_210.0, 5.0, correlation=4),
        runtime("cudaLaunchKernel", 3_120.0, 5.0, correlation=5),
        kernel("sm80_xmma_gemm_bf16bf16_tn", 4_225.0, 500.0, correlation=5),
        # loss.item(): a device-to-host copy and a sync; the next kernel starts 2 ms later
        runtime("cudaMemcpyAsync", 4_800.0, 5.0, correlation=6),
        memcpy("DtoH", "Pageable", 4_810.0, 2.0, 4, correlation=6),
        runtime("cudaStreamSynchronize", 4_806.0, 10.0, correlation=7),
        runtime("cudaLaunchKernel", 6_700.0, 5.0, correlation=8),
        kernel("elementwise_kernel", 6_816.0, 4.0, correlation=8),
        span("autograd::engine::evaluate_function: MmBackward0", 7_000.0, 1_500.0),
        span("Optimizer.step#SGD.step", 8_600.0, 1_000.0, cat="user_annotation"),
    ]
    return load_trace(write(tmp_path / "gpu.json", events, devices=a100()))


def test_gpu_step_measurements(gpu_step):
    (m,) = step_metrics(gpu_step)
    assert m.wall_ms == 10.0 and m.data_wait_ms == 2.0
    assert m.optimizer_ms == 1.0 and m.backward_ms == 1.5
    assert (m.h2d_pageable_bytes, m.h2d_pageable_host_ms) == (IMAGE_BYTES, 0.9)
    assert m.float_image_h2d_bytes == IMAGE_BYTES
    # the copy's own sync is not a "sync in the loop"; .item()'s is, with 1.89 ms idle after
    assert (m.copy_syncs, m.syncs) == (1, 1)
    assert m.sync_idle_ms == pytest.approx((6_816.0 - 4_816.0) / 1000)
    assert m.kernels == 4 and m.tiny_kernels == 2
    assert m.matmul_ms == 1.5 and m.matmul_tensor_core_ms == 0.5
    busy_us = 850 + 2 + 1_000 + 5 + 500 + 4
    assert m.gpu_busy_ms == pytest.approx(busy_us / 1000)
    assert m.launch_gap_ms == pytest.approx(0.020)  # 10 + 10 us between the forward kernels
    # the split: every us of the step in one row. H2D: the pageable copy's call and the sync
    # that finishes it; sync: .item()'s device-to-host copy call and its sync; forward: up
    # to the backward, less those; other: between the backward and the optimizer, and after
    split = {
        "data_wait": 2.0,
        "h2d": 0.9 + 0.01,
        "sync": 0.005 + 0.01,
        "forward": 7.0 - 2.0 - 0.91 - 0.015,
        "backward": 1.5,
        "optimizer": 1.0,
        "collective": 0.0,
        "other": 0.1 + 0.4,
    }
    for row, ms in split.items():
        assert getattr(m, f"part_{row}_ms") == pytest.approx(ms), row
    assert sum(split.values()) == pytest.approx(m.wall_ms)
    # the device: compute kernels 1.509 ms, the two copies alone 0.852, idle the rest
    assert m.gpu_compute_ms == pytest.approx(1.509) and m.gpu_copy_alone_ms == pytest.approx(0.852)
    assert m.gpu_comm_ms == 0 and m.gpu_idle_ms == pytest.approx(10 - 1.509 - 0.852)


def test_diagnose_leaves_the_model_it_reads_unchanged(tmp_path):
    events = [span("x", 0.0, 1.0)]
    events += [
        span("Optimizer.step#SGD.step", 10.0 + 100 * i, 5.0, cat="user_annotation")
        for i in range(4)
    ]
    model = load_trace(write(tmp_path / "t.json", events))
    (whole,) = model.steps
    diagnosis = diagnose(model)
    assert diagnosis.profile.steps == 3  # cut at the optimizer steps...
    assert model.steps == (whole,)  # ...in a new model, not in this one


def test_metric_lists_are_checked_against_the_step_metrics():
    assert set(BREAKDOWN.values()) | set(GPU_METRICS) | set(GPU_SPLIT) <= set(NUMBERS)
    # every breakdown row has its label and its colour, in order
    assert list(ROW_LABELS) == list(ROW_COLOURS) == list(BREAKDOWN)
    with pytest.raises(ValueError, match="h2d_time_ms"):
        metric_names("wall_ms", "h2d_time_ms")


def test_profile_from_run_facts_alone_measures_wall_and_data_wait_only():
    p = build_profile(None, facts())
    assert p.steps == 5
    assert list(p.metrics) == ["data_wait_ms", "part_data_wait_ms", "part_other_ms", "wall_ms"]
    assert p.step_ms == 10.0 and p.median.data_wait_ms == 1.0
    assert p.median.kernels == 0.0 and not p.median.traced
