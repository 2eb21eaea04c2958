"""The trace model on synthetic events (edge cases) and on the real shared CUDA traces
(numbers pinned after an independent count with plain json: see the comments)."""

import dataclasses

import pytest
from trace_events import kernel, memcpy, memory, runtime, span, step, write

from torchpace.trace import Step, load_trace


def test_steps_ops_and_gpu_work_attributed_to_the_launching_step(tmp_path):
    events = [
        step(7, 0.0, 100.0),
        step(8, 100.0, 100.0),
        span("aten::mm", 10.0, 20.0),
        runtime("cudaLaunchKernel", 90.0, 5.0, correlation=1),
        # launched in step 7, runs during step 8: still step 7's work
        kernel("volta_sgemm_128x64_nn", 120.0, 30.0, correlation=1),
        runtime("cudaMemcpyAsync", 110.0, 40.0, correlation=2),
        memcpy("HtoD", "Pageable", 112.0, 35.0, 4096, correlation=2),
    ]
    model = load_trace(write(tmp_path / "t.json", events))
    assert [(s.name, s.number, s.synthetic) for s in model.steps] == [
        ("ProfilerStep#7", 7, False),
        ("ProfilerStep#8", 8, False),
    ]
    by_step = model.gpu_ops_by_step()
    assert [op.name for op in by_step[0]] == ["volta_sgemm_128x64_nn"]
    (copy,) = by_step[1]
    assert (copy.direction, copy.host_memory, copy.bytes) == ("HtoD", "Pageable", 4096)
    assert model.main_device() == 0 and model.has_gpu


def test_no_step_markers_make_the_whole_trace_one_step(tmp_path):
    model = load_trace(write(tmp_path / "t.json", [span("a", 5.0, 10.0), span("b", 40.0, 20.0)]))
    (only,) = model.steps
    assert only.synthetic and only.ts == 5.0 and only.dur == pytest.approx(56.0)


def test_memcpy_kinds_are_parsed(tmp_path):
    events = [
        span("x", 0.0, 1.0),
        memcpy("DtoH", "Pinned", 1.0, 1.0, 8, correlation=5),
        memcpy("HtoD", "Pinned", 2.0, 1.0, 16, correlation=6),
    ]
    ops = load_trace(write(tmp_path / "t.json", events)).gpu_ops
    assert [(o.direction, o.host_memory, o.bytes) for o in ops] == [
        ("DtoH", "Pinned", 8),
        ("HtoD", "Pinned", 16),
    ]


def test_memory_samples_keep_device_and_totals(tmp_path):
    events = [span("x", 0.0, 1.0), memory(3.0, 2048, device_type=1, device_id=0), memory(1.0, 1024)]
    samples = load_trace(write(tmp_path / "t.json", events)).memory
    assert [(m.ts, m.device_key, m.total_allocated) for m in samples] == [
        (1.0, "cpu", 1024),
        (3.0, "cuda:0", 2048),
    ]


# Expected numbers below were counted independently with json + gzip on the raw events
# (ProfilerStep spans, kernels attributed by their cudaLaunchKernel correlation's ts).


def test_resnet_trace(shared_traces):
    model = load_trace(shared_traces / "resnet_nccl_rank0.json.gz")
    assert [s.name for s in model.steps] == [f"ProfilerStep#{n}" for n in range(101, 106)]
    assert [round(s.dur, 3) for s in model.steps] == [
        35115.869,
        72077.474,
        95697.341,
        95551.087,
        95699.037,
    ]
    kernels = {
        i: [o for o in ops if o.kind == "kernel"] for i, ops in model.gpu_ops_by_step().items()
    }
    assert [len(k) for k in kernels.values()] == [870] * 5
    assert round(sum(k.dur for k in kernels[0]), 2) == 93696.68
    assert model.device_capability(0) == (7, 0)
    assert model.device_memory_capacity(0) == 34079637504
    assert model.main_tid == 1102


def test_sampled_trace_copies(shared_traces):
    model = load_trace(shared_traces / "sampled_rank0.json.gz")
    assert [s.dur for s in model.steps] == [607312.0, 622928.0]
    per_step = model.gpu_ops_by_step()
    for i, pinned in [(0, 2359328), (1, 2490368)]:
        ops = per_step[i]
        assert (
            sum(o.bytes for o in ops if o.direction == "HtoD" and o.host_memory == "Pinned")
            == pinned
        )
        assert (
            sum(o.bytes for o in ops if (o.direction, o.host_memory) == ("HtoD", "Pageable"))
            == 8208
        )
        assert sum(1 for o in ops if (o.direction, o.host_memory) == ("DtoH", "Pageable")) == 4
    assert model.devices == ()


def test_alexnet_trace_without_step_markers(shared_traces):
    model = load_trace(shared_traces / "alexnet_pageable_sync.json.gz")
    (whole,) = model.steps
    assert whole.synthetic
    # first event at ...42514261 us, last end at ...85939626 us (+1 us inclusive end)
    assert whole.dur == 43425366.0
    pageable = [o for o in model.gpu_ops if o.host_memory == "Pageable" and o.direction == "HtoD"]
    assert (len(pageable), sum(o.bytes for o in pageable)) == (16, 244403360)
    names = [s.name for s in model.runtime]
    assert (names.count("cudaStreamSynchronize"), names.count("cudaDeviceSynchronize")) == (16, 5)
    assert sum(1 for o in model.gpu_ops if o.kind == "kernel") == 79


def test_cpu_only_trace(shared_traces):
    model = load_trace(shared_traces / "cpu_only_gloo.json.gz")
    assert [(s.name, round(s.dur, 3)) for s in model.steps] == [("ProfilerStep#551", 210109.162)]
    assert not model.has_gpu and model.main_device() is None


def test_model_is_immutable_and_with_steps_makes_a_new_one(tmp_path):
    model = load_trace(write(tmp_path / "t.json", [step(0, 0.0, 100.0), span("x", 5.0, 1.0)]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.steps = ()
    assert isinstance(model.cpu_ops, tuple) and isinstance(model.steps, tuple)
    half = Step("half", 0, 0.0, 50.0)
    cut = model.with_steps([half])
    assert cut.steps == (half,) and cut.cpu_ops is model.cpu_ops
    assert [s.name for s in model.steps] == ["ProfilerStep#0"]  # the original is unchanged
