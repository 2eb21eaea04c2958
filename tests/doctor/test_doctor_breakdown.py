"""The step breakdown accounts for the whole step (doctor/breakdown.py): on a synthetic
two-rank NCCL job whose every number is known by design, on the planted gloo jobs, and on
every shared trace; the device's split against HolisticTraceAnalysis's figures."""

import json
import shutil
import sys

import pytest
from conftest import ROOT

from torchpace.doctor import breakdown
from torchpace.doctor.analyze import diagnose
from torchpace.doctor.options import DoctorOptions
from torchpace.doctor.ranks import cross_rank, cross_rank_findings, rank_figures, rank_wait_of
from torchpace.doctor.result import BREAKDOWN, GPU_SPLIT, diagnosis_to_dict
from torchpace.doctor.runs import analyse_rank_traces
from torchpace.trace import load_trace

sys.path.insert(0, str(ROOT / "tests" / "trace"))
from trace_events import a100, kernel, runtime, span, step, write

SHARED = [
    "alexnet_pageable_sync.json.gz",
    "cpu_only_gloo.json.gz",
    "h100_article_example_224.json.gz",
    "h100_dcgan.json.gz",
    "h100_imagenet_resnet50.json.gz",
    "resnet_nccl_rank0.json.gz",
    "sampled_rank0.json.gz",
    "sampled_rank1.json.gz",
]
ENGINE = 200  # the autograd engine's thread on a CUDA run
STEP_US = 80_000


def test_partition_gives_each_instant_to_the_first_row_that_covers_it():
    parts = breakdown.partition(
        0,
        100,
        [("a", [(10, 30)]), ("b", [(20, 50), (45, 60)]), ("a", [(55, 70)]), ("c", [(0, 5)])],
    )
    assert parts == {"a": 20 + 10, "b": 30, "c": 5, "other": 100 - 65}
    assert breakdown.subtract([(0, 10), (20, 30)], [(5, 25)]) == [(0, 5), (25, 30)]
    assert breakdown.intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]


def nccl_rank(rank: int) -> list[dict]:
    """Two 80 ms steps of a DDP rank on a GPU, times in us from the step's start:
    data 0-1, forward op 1-20 (its kernel 2-20), backward on the engine thread 20-40 (rank
    1: 20-60, the straggler), its kernel from 20.5 for 19 ms (rank 1: 39 ms), the all-reduce
    launched at 30 (rank 1: 50) and ending at 70 on every rank (it waits for the slowest),
    the loop blocked in a sync from the backward's end to 70.1, the optimizer 71-76 and its
    kernel 72-75."""
    backward_ms = 20 if rank == 0 else 40
    nccl_start = 30_000 if rank == 0 else 50_000
    events = []
    for k in range(2):
        b = k * STEP_US
        c = 10 * k
        events += [
            step(k, b, STEP_US),
            span("enumerate(DataLoader)#_DataLoaderIter.__next__", b, 1_000, cat="user_annotation"),
            span("aten::linear", b + 1_000, 19_000),
            runtime("cudaLaunchKernel", b + 1_500, 10, correlation=c + 1),
            kernel("sm80_xmma_gemm_bf16bf16_tn", b + 2_000, 18_000, correlation=c + 1),
            span(
                "autograd::engine::evaluate_function: MmBackward0",
                b + 20_000,
                backward_ms * 1000,
                tid=ENGINE,
            ),
            runtime("cudaLaunchKernel", b + 20_100, 10, correlation=c + 2),
            kernel("sm80_xmma_gemm_bf16bf16_nt", b + 20_500, (backward_ms - 1) * 1000, c + 2),
            span("nccl:all_reduce", b + nccl_start - 100, 50, cat="user_annotation", tid=ENGINE),
            runtime("cudaLaunchKernel", b + nccl_start - 90, 10, correlation=c + 3),
            kernel(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                b + nccl_start,
                70_000 - nccl_start,
                correlation=c + 3,
                stream=20,
            ),
            runtime("cudaStreamSynchronize", b + 20_000 + backward_ms * 1000, 0, correlation=0),
            span("Optimizer.step#SGD.step", b + 71_000, 5_000, cat="user_annotation"),
            runtime("cudaLaunchKernel", b + 71_500, 10, correlation=c + 4),
            kernel("multi_tensor_apply_kernel", b + 72_000, 3_000, correlation=c + 4),
        ]
    # the sync calls end at 70.1 ms: their duration set from their start
    for e in events:
        if e["name"] == "cudaStreamSynchronize":
            e["dur"] = (e["ts"] // STEP_US) * STEP_US + 70_100 - e["ts"]
    return events


@pytest.fixture
def nccl_job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        write(folder / f"rank{rank}.json", nccl_rank(rank), devices=a100())
    return folder


def test_a_synthetic_nccl_rank_splits_into_known_rows(nccl_job):
    d = diagnose(load_trace(nccl_job / "rank0.json"))
    for m in d.profile.per_step:
        host = {row: getattr(m, f"part_{row}_ms") for row in breakdown.HOST_ROWS}
        assert host == pytest.approx(
            {
                "data_wait": 1.0,
                "h2d": 0.0,
                "forward": 19.0,
                "backward": 20.0,
                # the loop's sync while the device runs only the all-reduce: 39.5-70 ms
                "collective": 30.0,
                "sync": 0.1,  # 70-70.1: the device had finished
                "optimizer": 5.0,
                "other": 0.9 + 4.0,  # 70.1-71 and 76-80
            }
        )
        assert m.part_rank_wait_ms == 0.0  # unknown from one rank's trace
        # the device: compute 18 + 19 + 3 ms, the all-reduce alone 39.5-70, idle the rest
        assert (m.gpu_compute_ms, m.gpu_comm_alone_ms, m.gpu_copy_alone_ms) == pytest.approx(
            (40.0, 30.5, 0.0)
        )
        assert m.gpu_idle_ms == pytest.approx(9.5) and m.gpu_comm_ms == pytest.approx(40.0)
    report = diagnosis_to_dict(d)
    assert sum(report["breakdown_pct"].values()) == pytest.approx(100, abs=0.2)
    assert report["gpu_split_pct"] == {
        "gpu_compute_ms": 50.0,
        "gpu_comm_alone_ms": 38.1,
        "gpu_rank_wait_ms": 0.0,
        "gpu_copy_alone_ms": 0.0,
        "gpu_idle_ms": 11.9,
    }
    # NCCL 40 of the 70.5 ms the device is busy, 9.5 ms of it under the backward's kernel:
    # communication-bound, priced at the 30.5 ms the device only communicates, first (the
    # sync after it, TP201, costs at most the device's 9.5 ms idle)
    f = d.findings[0]
    assert [x.code for x in d.findings] == ["TP506", "TP201"]
    assert f.code == "TP506" and f.saving_ms == pytest.approx(30.5)
    assert f.evidence["comm_share_of_gpu_pct"] == 57 and f.evidence["overlap_pct"] == 24


def test_the_straggler_rank_has_no_comm_bound_finding(nccl_job):
    d = diagnose(load_trace(nccl_job / "rank1.json"))
    m = d.profile.median
    assert (m.part_backward_ms, m.part_collective_ms) == pytest.approx((40.0, 10.0))
    assert (m.gpu_compute_ms, m.gpu_comm_alone_ms) == pytest.approx((60.0, 10.5))
    # NCCL 20 of the 70.5 ms busy: not communication-bound
    assert "TP506" not in [f.code for f in d.findings]


def test_with_every_rank_the_wait_for_the_slowest_is_a_row_of_its_own(nccl_job):
    models = [load_trace(nccl_job / f"rank{r}.json") for r in (0, 1)]
    cross = cross_rank([rank_figures(m, r) for r, m in enumerate(models)])
    # own work: 80 - 40 ms of NCCL on rank 0, 80 - 20 on rank 1: rank 0 waits 20 ms a step
    assert cross.straggler == 1 and cross.rank_wait_per_step == ((20.0, 20.0), (0.0, 0.0))
    d = diagnose(models[0], None, rank_wait_of(cross, 0))
    m = d.profile.median
    assert (m.part_collective_ms, m.part_rank_wait_ms) == pytest.approx((10.0, 20.0))
    assert (m.gpu_comm_alone_ms, m.gpu_rank_wait_ms) == pytest.approx((10.5, 20.0))
    rows = [getattr(m, name) for name in BREAKDOWN.values()]
    assert sum(rows) == pytest.approx(m.wall_ms)
    assert sum(getattr(m, name) for name in GPU_SPLIT) == pytest.approx(m.wall_ms)
    codes = {f.code: f for f in cross_rank_findings(cross)}
    assert codes["TP505"].saving_ms == pytest.approx(20.0)
    assert codes["TP506"].evidence["rank"] == 0
    assert codes["TP506"].saving_ms == pytest.approx(30.5)


def test_doctor_trace_dir_reports_the_wait_row_and_one_tp506(nccl_job, tmp_path, capsys):
    out = tmp_path / "report.json"
    args = DoctorOptions(trace=nccl_job, json=out)
    assert analyse_rank_traces(args) == 0
    report = json.loads(out.read_text())
    assert report["breakdown_ms"]["rank_wait_ms"]["median"] == pytest.approx(20.0)
    assert report["breakdown_pct"]["rank_wait_ms"] == 25.0
    assert report["gpu_split_pct"]["gpu_rank_wait_ms"] == 25.0
    assert [f["code"] for f in report["findings"]].count("TP506") == 1
    text = " ".join(capsys.readouterr().out.split())
    assert "waiting for other ranks" in text and "straggler: rank 1" in text


@pytest.mark.parametrize("name", SHARED)
def test_the_rows_add_up_to_the_step_on_every_shared_trace(shared_traces, name):
    d = diagnose(load_trace(shared_traces / name))
    for m in d.profile.per_step:
        # (within 1 us: a trace's timestamps near 1.7e15 us keep a quarter of a us)
        assert sum(getattr(m, n) for n in BREAKDOWN.values()) == pytest.approx(m.wall_ms, abs=1e-3)
        if d.profile.has_gpu:
            assert sum(getattr(m, n) for n in GPU_SPLIT) == pytest.approx(m.wall_ms, abs=1e-3)
    report = diagnosis_to_dict(d)
    assert sum(report["breakdown_pct"].values()) == pytest.approx(100, abs=0.3)
    if d.profile.has_gpu:
        assert sum(report["gpu_split_pct"].values()) == pytest.approx(100, abs=0.3)
    for one in report["per_step"]:  # the page's stacked bars reach each step's wall time
        assert sum(one[k] for k in BREAKDOWN) == pytest.approx(one["wall_ms"], abs=0.01)


def test_shared_trace_shares(shared_traces):
    """The figures of docs/doctor.md, pinned."""

    def pct(name):
        report = diagnosis_to_dict(diagnose(load_trace(shared_traces / name)))
        return report["breakdown_pct"], report["gpu_split_pct"]

    host, device = pct("sampled_rank0.json.gz")
    assert (host["forward_ms"], host["backward_ms"], host["optimizer_ms"]) == (26.5, 35.7, 33.8)
    assert (host["other_ms"], host["collective_ms"]) == (3.7, 0.1)
    assert device == {
        "gpu_compute_ms": 17.1,
        "gpu_comm_alone_ms": 27.4,
        "gpu_rank_wait_ms": 0.0,
        "gpu_copy_alone_ms": 0.0,
        "gpu_idle_ms": 55.5,
    }
    host, device = pct("resnet_nccl_rank0.json.gz")
    assert (host["forward_ms"], host["backward_ms"], host["other_ms"]) == (37.8, 58.0, 2.6)
    assert (device["gpu_compute_ms"], device["gpu_copy_alone_ms"], device["gpu_idle_ms"]) == (
        96.5,
        0.9,
        2.6,
    )
    host, _ = pct("cpu_only_gloo.json.gz")  # a CPU rank inside gloo all-reduces
    assert (host["collective_ms"], host["forward_ms"]) == (85.1, 14.9)


def hta_window(model):
    """HolisticTraceAnalysis's window: the device work launched in every step but the last
    (it leaves the trace's last iteration out), from its first start to its last end."""
    by_step = model.gpu_ops_by_step()
    ops = [op for i in range(len(model.steps) - 1) for op in by_step[i]]
    return ops, min(op.ts for op in ops), max(op.end for op in ops)


@pytest.mark.parametrize(
    "name, idle, compute, non_compute, overlap",
    [
        # HTA 0.5.0 get_temporal_breakdown / get_comm_comp_overlap (and 0.2.0: the same)
        ("sampled_rank0.json.gz", 53.56, 17.71, 28.74, 11.81),
        ("sampled_rank1.json.gz", 54.72, 22.57, 22.72, 20.05),
        # HTA 0.2.0; 0.5.0 says 2.63% idle: it truncates ns timestamps to whole us
        ("resnet_nccl_rank0.json.gz", 1.68, 97.43, 0.89, None),
    ],
)
def test_the_device_split_on_htas_window_is_htas_temporal_breakdown(
    shared_traces, name, idle, compute, non_compute, overlap
):
    ops, lo, hi = hta_window(load_trace(shared_traces / name))
    split = breakdown.device_split(ops, lo, hi)
    span = (hi - lo) / 1000
    assert 100 * split.idle_ms / span == pytest.approx(idle, abs=0.01)
    assert 100 * split.compute_ms / span == pytest.approx(compute, abs=0.01)
    alone = split.comm_alone_ms + split.copy_alone_ms
    assert 100 * alone / span == pytest.approx(non_compute, abs=0.01)
    if overlap is not None:
        assert 100 * (1 - split.comm_alone_ms / split.comm_ms) == pytest.approx(overlap, abs=0.01)


@pytest.mark.parametrize(
    "rank, idle, compute, non_compute, overlap",
    # HTA 0.5.0 on these two traces (written to a folder with distributedInfo added)
    [(0, 3.42, 54.79, 41.78, 23.75), (1, 3.42, 82.19, 14.38, 47.50)],
)
def test_the_synthetic_job_on_htas_window_gives_htas_figures(
    nccl_job, rank, idle, compute, non_compute, overlap
):
    ops, lo, hi = hta_window(load_trace(nccl_job / f"rank{rank}.json"))
    split = breakdown.device_split(ops, lo, hi)
    span = (hi - lo) / 1000
    assert span == 73.0  # the first step's kernels: 2 to 75 ms
    assert 100 * split.idle_ms / span == pytest.approx(idle, abs=0.01)
    assert 100 * split.compute_ms / span == pytest.approx(compute, abs=0.01)
    alone = split.comm_alone_ms + split.copy_alone_ms
    assert 100 * alone / span == pytest.approx(non_compute, abs=0.01)
    assert 100 * (1 - split.comm_alone_ms / split.comm_ms) == pytest.approx(overlap, abs=0.01)


def test_resnet_v100_idle_is_what_its_kernel_intervals_say(shared_traces):
    """The V100 trace's GPU idles 1.1 ms per step: the gaps between its kernels, copies and
    memsets inside each ProfilerStep (its first, the profiler's, idles 5.8 ms: the device
    starts 3.5 ms into it). Over the five steps 10.08 ms of 394.14 (2.6%)."""
    d = diagnose(load_trace(shared_traces / "resnet_nccl_rank0.json.gz"))
    idle = [m.gpu_idle_ms for m in d.profile.per_step]
    assert idle == pytest.approx([5.837, 0.897, 1.139, 1.109, 1.101], abs=1e-3)
    assert d.profile.median.gpu_idle_ms == pytest.approx(1.109, abs=1e-3)
    total = sum(m.wall_ms for m in d.profile.per_step)
    assert 100 * sum(idle) / total == pytest.approx(2.56, abs=0.01)


def test_a_gloo_rank_waiting_after_its_backward_is_in_collectives(tmp_path):
    folder = tmp_path / "gloo"
    folder.mkdir()
    # a CPU rank: forward on the loop thread, a gloo all-reduce on gloo's thread after the
    # backward, the loop waiting for it (DDP finishing its reduction), then the optimizer
    events = [
        step(0, 0, 100_000),
        span("aten::linear", 0, 30_000),
        span("autograd::engine::evaluate_function: AddmmBackward0", 30_000, 20_000),
        span("c10d::allreduce_", 49_000, 100),  # inside the backward, by its hook
        span("gloo:all_reduce", 49_200, 45_000, cat="user_annotation", tid=300),
        span("Optimizer.step#SGD.step", 95_000, 1_000, cat="user_annotation"),
    ]
    m = diagnose(load_trace(write(folder / "rank0.json", events))).profile.median
    # the hook's c10d call (0.1 ms) is the host in a collective; 49.2-50 runs under the
    # backward (overlapped, not exposed); 50-94.2 is the loop waiting for the all-reduce
    assert (m.part_forward_ms, m.part_backward_ms) == pytest.approx((30.0, 19.9))
    assert m.part_collective_ms == pytest.approx(0.1 + 44.2)
    assert (m.part_optimizer_ms, m.part_other_ms) == pytest.approx((1.0, 0.8 + 4.0))


def test_accumulation_backward_passes_are_told_apart(tmp_path):
    """Two micro-steps: the second forward between the two backward passes is forward, not
    backward (the old span from the first to the last autograd function counted it)."""
    events = [
        step(0, 0, 100_000),
        span("aten::linear", 0, 20_000),
        span("autograd::engine::evaluate_function: MmBackward0", 20_000, 10_000),
        span("aten::linear", 30_000, 20_000),
        span("autograd::engine::evaluate_function: MmBackward0", 50_000, 10_000),
        span("Optimizer.step#SGD.step", 60_000, 5_000, cat="user_annotation"),
    ]
    m = diagnose(load_trace(write(tmp_path / "t.json", events))).profile.median
    assert (m.part_forward_ms, m.part_backward_ms) == pytest.approx((40.0, 20.0))
    assert m.backward_ms == pytest.approx(40.0)  # the phase, first to last: what it was
    assert (m.part_optimizer_ms, m.part_other_ms) == pytest.approx((5.0, 35.0))


def test_a_run_facts_step_without_its_trace_is_data_wait_and_other():
    from doctor_fakes import facts

    from torchpace.doctor.profile import build_profile

    p = build_profile(None, facts())
    report = diagnosis_to_dict(diagnose(None, facts()))
    assert p.median.part_data_wait_ms == 1.0 and p.median.part_other_ms == 9.0
    assert report["breakdown_pct"] == {"data_wait_ms": 10.0, "other_ms": 90.0}


def test_shared_nccl_pair_as_a_job(shared_traces, tmp_path, capsys):
    for name in ("sampled_rank0.json.gz", "sampled_rank1.json.gz"):
        shutil.copy(shared_traces / name, tmp_path / name)
    out = tmp_path / "report.json"
    args = DoctorOptions(trace=tmp_path, json=out)
    assert analyse_rank_traces(args) == 0
    report = json.loads(out.read_text())
    (f,) = report["findings"]
    assert f["code"] == "TP506" and f["evidence"]["rank"] == 0
    # rank 0's own work is 27.9 ms shorter than rank 1's in the first step, 20.4 ms longer
    # in the second: it waits 27.9 ms, then rank 1 waits 2.4 ms (rank 1's step is longer)
    assert report["cross_rank"]["rank_wait_per_step"] == [
        pytest.approx([27.892, 0.0], abs=1e-3),
        pytest.approx([0.0, 2.443], abs=1e-3),
    ]
    # on the device that wait is taken from the NCCL time alone; on the host from the
    # collectives row, which holds 0.69 ms in that step
    steps = report["per_step"]
    assert [s["gpu_rank_wait_ms"] for s in steps] == pytest.approx([27.892, 0.0], abs=1e-3)
    assert [s["rank_wait_ms"] for s in steps] == pytest.approx([0.687, 0.0], abs=1e-3)
