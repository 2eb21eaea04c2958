"""Each ms of GPU idle charged to one cause (doctor/idle.py), on synthetic steps whose answer
is known by design and on the real traces, where the causes never add up to more than the
idle."""

import sys

import pytest
from conftest import ROOT

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.idle import attribute_idle, idle_gaps
from torchpace.doctor.steps import step_metrics
from torchpace.trace import load_trace
from torchpace.trace.model import GpuOp, Span

sys.path.insert(0, str(ROOT / "tests" / "trace"))
from trace_events import a100, kernel, runtime, span, step, write


def op(ts, end):
    return GpuOp("kernel", "k", ts, end - ts, 0, 7, None)


def call(name, ts, end):
    return Span(name, "cuda_runtime", ts, end - ts, 1)


def test_every_idle_microsecond_has_one_cause():
    ops = [op(0, 100), op(120, 130), op(400, 500), op(700, 800)]
    data = [call("enumerate(DataLoader)#x.__next__", 200, 300),
            call("enumerate(DataLoader)#x.__next__", 850, 1000)]  # fmt: skip
    sync = call("cudaStreamSynchronize", 125, 133)  # waits for k2, returns as it ends
    assert idle_gaps(ops, 0, 1000) == [(100, 120), (130, 400), (500, 700), (800, 1000)]
    c = attribute_idle(ops, 0, 1000, data, [sync])
    # 20 us between two kernels: launching; after the sync: the 100 us of data wait is the
    # batch's, the other 170 the sync's; 200 us of nothing queued: host; the tail gap: 150
    # data wait, 50 host
    assert (c.idle_launch_ms, c.idle_sync_ms) == pytest.approx((0.020, 0.170))
    assert (c.idle_data_ms, c.idle_host_ms) == pytest.approx((0.250, 0.250))
    assert c.idle_ms == pytest.approx(0.690)  # 1000 us minus 310 us busy


def test_a_sync_followed_by_a_data_wait_is_charged_little():
    """The Lightning case: a sync, then the host waits for the next batch. The idle is the
    data wait's, not the sync's."""
    ops = [op(0, 1000), op(30_000, 31_000)]
    data = [call("enumerate(DataLoader)#x.__next__", 1_100, 29_800)]
    c = attribute_idle(ops, 0, 31_000, data, [call("cudaStreamSynchronize", 900, 1_010)])
    assert c.idle_data_ms == pytest.approx(28.7)
    assert c.idle_sync_ms == pytest.approx(0.3)  # 1000 -> 1100 and 29800 -> 30000 us
    assert c.idle_ms == pytest.approx(29.0)


def test_busy_ops_of_a_previous_step_keep_the_device_busy():
    c = attribute_idle([op(-500, 200), op(300, 1000)], 0, 1000, [], [])
    assert c.idle_ms == pytest.approx(0.1) and c.idle_host_ms == pytest.approx(0.1)


def test_attribution_through_the_step_metrics(tmp_path):
    events = [
        step(1, 0.0, 10_000.0),
        span(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            0.0,
            2_000.0,
            cat="user_annotation",
        ),
        runtime("cudaLaunchKernel", 2_000.0, 5.0, correlation=1),
        kernel("sm80_xmma_gemm_bf16bf16_tn", 2_100.0, 3_000.0, correlation=1),
        runtime("cudaLaunchKernel", 2_010.0, 5.0, correlation=2),
        kernel("elementwise_kernel", 5_120.0, 10.0, correlation=2),
        runtime("cudaStreamSynchronize", 2_020.0, 3_115.0, correlation=3),  # .item()
        runtime("cudaLaunchKernel", 8_000.0, 5.0, correlation=4),
        kernel("elementwise_kernel", 8_100.0, 900.0, correlation=4),
    ]
    (m,) = step_metrics(load_trace(write(tmp_path / "t.json", events, devices=a100())))
    assert m.idle_data_ms == pytest.approx(2.0)
    assert m.idle_host_ms == pytest.approx(0.1 + 1.0)  # before the first kernel, the tail
    assert m.idle_launch_ms == pytest.approx(0.020)
    assert m.idle_sync_ms == pytest.approx(8.1 - 5.13)
    total = m.idle_data_ms + m.idle_sync_ms + m.idle_launch_ms + m.idle_host_ms
    assert total == pytest.approx(m.gpu_idle_ms)


@pytest.mark.parametrize(
    "name",
    ["h100_imagenet_resnet50.json.gz", "h100_article_example_224.json.gz",
     "h100_dcgan.json.gz", "resnet_nccl_rank0.json.gz", "alexnet_pageable_sync.json.gz"],
)  # fmt: skip
def test_the_causes_add_up_to_the_idle(shared_traces, name):
    d = diagnose(load_trace(shared_traces / name))
    for m in d.profile.per_step:
        causes = m.idle_data_ms + m.idle_sync_ms + m.idle_launch_ms + m.idle_host_ms
        assert causes == pytest.approx(m.gpu_idle_ms) and m.gpu_idle_ms <= m.wall_ms + 1e-6
        assert m.idle_copy_sync_ms <= m.idle_sync_ms + 1e-9
        assert min(m.idle_data_ms, m.idle_sync_ms, m.idle_launch_ms, m.idle_host_ms) >= 0


def test_the_report_shows_the_idle_by_cause(shared_traces):
    from rich.console import Console

    from torchpace.doctor.result import build_report
    from torchpace.report.doctor_terminal import render

    d = diagnose(load_trace(shared_traces / "h100_article_example_224.json.gz"))
    report = build_report(d)
    assert report.gpu.median("idle_data_ms") > 40  # main-process loading
    console = Console(record=True, width=200)
    render(report, console)
    text = console.export_text()
    assert "ms idle: data 42.4, host" in text and "in TF32" in text
