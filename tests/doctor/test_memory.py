"""Memory: the tracker inside the process (activations, parameters, gradients, optimizer
state, the leak's line, the state at an out-of-memory failure), the estimates built on it
(checkpointing, the ways out) and the findings (TP401 with its line, TP404, TP405, no TP104
or headroom after an OOM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from doctor_fakes import facts, profile
from torch import nn

from torchpace.capture.memory import (
    MemoryTracker,
    _sizes_in_message,
    checkpoint_units,
    is_out_of_memory,
    step_phase_of,
)
from torchpace.doctor import memory
from torchpace.doctor.analyze import diagnose
from torchpace.doctor.checks import memory as memory_checks
from torchpace.doctor.checks._memory import peak_split
from torchpace.doctor.checks.out_of_memory import after_out_of_memory
from torchpace.doctor.checks.tensor_accumulated_across_steps import leak_site
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Growth
from torchpace.doctor.result import diagnosis_to_dict
from torchpace.doctor.steps import DeviceMemory, StepMetrics
from torchpace.facts.memory import (
    MemoryFacts,
    MemorySplit,
    OutOfMemory,
    SiteBytes,
    StepMemory,
    UnitBytes,
)

MIB = 2**20


class FakeRuntime:
    """The three patch points the tracker listens on (capture/runtime.py)."""

    def __init__(self):
        self.models, self.optimizers = [], []

    def on_model(self, f):
        self.models.append(f)

    def on_optimizer(self, f):
        self.optimizers.append(f)

    def filter_batches(self, f):
        pass


class Blocks(nn.Module):
    def __init__(self, width=64, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


@pytest.fixture
def tracked():
    runtime = FakeRuntime()
    tracker = MemoryTracker(MemoryFacts(), in_window=lambda: True)
    tracker.install(runtime)
    model = Blocks()
    opt = torch.optim.Adam(model.parameters())
    for f in runtime.models:
        f(model)
    for f in runtime.optimizers:
        f(opt)
    yield tracker, model, opt
    tracker.uninstall()


def test_split_counts_parameters_gradients_state_and_saved_activations(tracked):
    tracker, model, opt = tracked
    x = torch.randn(32, 64)
    loss = model(x).sum()
    split = tracker.split()
    params = sum(p.numel() * 4 for p in model.parameters())
    assert split.parameters == params and split.gradients == 0 and split.optimizer_state == 0
    # each Linear saves its input (32x64 floats), each relu its output: x, then 3 relu
    # outputs (the last one also the model's output); the three linear outputs are freed
    assert split.activations == 4 * 32 * 64 * 4
    loss.backward()
    opt.step()
    split = tracker.split()
    assert split.activations == 0  # backward let them go
    assert split.gradients == params
    assert split.optimizer_state >= 2 * params  # exp_avg, exp_avg_sq (+ step counters)


def test_tracking_stops_after_the_window_and_the_parameters_are_still_counted(tracked):
    # the hooks walk the stack per saved tensor: off for the steps timed for samples/s
    tracker, model, opt = tracked
    tracker.stop_tracking()
    loss = model(torch.randn(32, 64)).sum()
    assert tracker.saved == {} and tracker.split().activations == 0
    loss.backward()
    opt.step()
    split = tracker.split()
    assert split.parameters == sum(p.numel() * 4 for p in model.parameters())
    assert split.gradients == split.parameters
    oom = tracker.out_of_memory(torch.OutOfMemoryError("out of memory"), "throughput")
    assert oom.split.parameters == split.parameters
    assert "after the profiled steps" in tracker.facts.activations_unmeasured


def test_step_keeps_the_moment_of_most_activations_and_its_sites(tracked):
    tracker, model, _ = tracked
    loss = model(torch.randn(32, 64)).sum()
    loss.backward()
    tracker.step_ended(0, in_window=True)
    (step,) = tracker.facts.steps
    assert step.split.activations == 4 * 32 * 64 * 4
    assert "test_memory.py:" in step.sites[0].location
    assert [u.name for u in step.units] == ["layers.0", "layers.1", "layers.2"]
    assert all(u.input_bytes == 32 * 64 * 4 for u in step.units)
    assert step.kept_at_end == [] or all(s.bytes == 32 * 64 * 4 for s in step.kept_at_end)


def test_outputs_kept_across_steps_point_to_the_line(tracked):
    tracker, model, _ = tracked
    kept = []
    for i in range(3):
        out = model(torch.randn(16, 64))
        out.sum().backward()
        kept.append(out)
        tracker.step_ended(i, in_window=True)
    grows = [sum(s.bytes for s in step.kept_at_end) for step in tracker.facts.steps]
    assert grows == [16 * 64 * 4, 2 * 16 * 64 * 4, 3 * 16 * 64 * 4]
    p = profile({"wall_ms": 10.0}, facts())
    p.facts.memory.steps = tracker.facts.steps
    line, per_step, kind = leak_site(p)
    assert "test_memory.py:" in line and per_step == 16 * 64 * 4 and kind == "outputs"


def test_out_of_memory_state_is_taken_at_the_failure(tracked):
    tracker, model, _ = tracked

    def fail(grad):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.11 GiB of which 1.50 GiB is free"
        )

    out = model(torch.randn(8, 64))
    out.register_hook(fail)
    with pytest.raises(torch.OutOfMemoryError) as info:
        out.sum().backward()
    oom = tracker.out_of_memory(info.value, "warmup")
    assert oom.step_phase == "backward"
    assert oom.requested_bytes == 2 * 2**30 and oom.free_bytes == int(1.5 * 2**30)
    assert "test_memory.py:" in oom.location
    assert oom.split.activations == 4 * 8 * 64 * 4  # the graph is alive while out is
    assert oom.activation_dtype_bytes == {"float32": 4 * 8 * 64 * 4}


@pytest.mark.parametrize(
    ("exc", "oom"),
    [
        (torch.OutOfMemoryError("CUDA out of memory"), True),
        (MemoryError(), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_is_out_of_memory(exc, oom):
    assert is_out_of_memory(exc) is oom


def test_sizes_read_from_cpu_and_cuda_messages():
    cpu = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes."
    assert _sizes_in_message(cpu) == (4294967296, None)
    cuda = "Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79 GiB of which 3.00 MiB"
    cuda += " is free."
    assert _sizes_in_message(cuda) == (20 * MIB, 3 * MIB)
    assert _sizes_in_message("boom") == (None, None)


def test_step_phase_of_a_forward_failure():
    class Boom(nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("out of memory")

    with pytest.raises(torch.OutOfMemoryError) as info:
        nn.Sequential(Boom())(torch.ones(1))
    assert step_phase_of(info.value) == "forward"
    with pytest.raises(MemoryError) as info:
        raise MemoryError
    assert step_phase_of(info.value) == "loop code"


def test_checkpoint_units_open_containers_and_single_bodies():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = Blocks(depth=4)

    assert [n for n, _ in checkpoint_units(Blocks(depth=2))] == ["layers.0", "layers.1"]
    assert [n for n, _ in checkpoint_units(Wrapper())][-1] == "body.layers.3"


def test_checkpoint_saving_keeps_inputs_and_one_block():
    units = [UnitBytes(f"b{i}", 100 * MIB, 10 * MIB) for i in range(4)]
    # 400 activations - (4 x 10 inputs + 100 recomputed) = 260
    assert memory.checkpoint_saving(units) == 260 * MIB
    assert memory.checkpoint_saving(units[:1]) is None


def _oom(**kw) -> OutOfMemory:
    split = MemorySplit("cuda", 100 * MIB, 100 * MIB, 200 * MIB, 1000 * MIB,
                        allocated=1600 * MIB, reserved=1800 * MIB, capacity=2000 * MIB)  # fmt: skip
    base = dict(
        step=4, capture_phase="warmup", step_phase="backward", location="train.py:9",
        message="CUDA out of memory. Tried to allocate 300.00 MiB",
        error_type="torch.OutOfMemoryError",
        requested_bytes=300 * MIB, free_bytes=50 * MIB, split=split,
        sites=[SiteBytes("model.py:3", 600 * MIB, 4)],
        units=[UnitBytes(f"b{i}", 250 * MIB, 20 * MIB) for i in range(4)],
        input_bytes=40 * MIB, activation_dtype_bytes={"float32": 1000 * MIB},
    )  # fmt: skip
    base.update(kw)
    return OutOfMemory(**base)


def test_ways_out_ranked_by_memory_freed():
    ways = memory.ways_out(_oom())
    # checkpointing: 1000 - (4 x 20 + 250) = 670; micro-batch: (1000 + 40) / 2 = 520;
    # bf16: 1000 / 2 = 500; expandable segments: 1800 - 1600 = 200
    assert [w.frees_bytes // MIB for w in ways] == [670, 520, 500, 200]
    assert [w.name.split()[0] for w in ways] == [
        "activation",
        "half",
        "bf16",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    ]
    assert memory.shortfall(_oom()) == 250 * MIB
    assert not any("autocast" in w.name for w in memory.ways_out(_oom(autocast=True)))


def _oom_facts(**kw):
    f = facts(status="script-raised")
    f.memory.oom = _oom(**kw)
    return f


def test_oom_run_gets_tp404_first_and_no_tp104_nor_headroom():
    f = _oom_facts()
    p = profile({"wall_ms": 100.0, "gpu_idle_ms": 80.0}, f, peaks={"cuda:0": 1 * 2**30},
                has_gpu=True, device=0, memory_capacity=80 * 2**30)  # fmt: skip
    tp104 = Finding("TP104", evidence={}, fix="bigger batch", severity="low")
    findings = after_out_of_memory(p, [tp104])
    assert [x.code for x in findings] == ["TP404"]
    (oom,) = findings
    assert (
        oom.location == "train.py:9" and "step 4, warm-up step, during the backward" in oom.detail
    )
    assert "way out 1: activation checkpointing" in oom.notes[0]
    assert "(enough for the failed request)" in oom.notes[0]


def test_oom_report_has_no_headroom_taken_before_the_failure():
    f = _oom_facts()
    for s in f.steps:
        s.cuda_peak_bytes = 2**30
    f.process.cuda_total_memory_bytes = 80 * 2**30
    d = diagnose(None, f)
    assert d.findings[0].code == "TP404"
    report = diagnosis_to_dict(d)
    assert "headroom_bytes" not in report["memory"]
    oom = report["memory"]["out_of_memory"]
    assert oom["split"]["activations"] == 1000 * MIB
    assert oom["ways_out"][0]["frees_bytes"] == 670 * MIB
    f.memory.oom = None  # the same run without the failure has its headroom
    assert diagnosis_to_dict(diagnose(None, f))["memory"]["headroom_bytes"] == 79 * 2**30


def test_oom_before_any_profiled_step_is_tp404_not_tp901():
    f = _oom_facts()
    f.steps = [s for s in f.steps if not s.in_window]
    assert [x.code for x in diagnose(None, f).findings] == ["TP404"]


def _step_memory(index, activations, units=()):
    split = MemorySplit("cpu", 10 * MIB, 0, 0, activations, capacity=1000 * MIB)
    return StepMemory(index, split, [SiteBytes("net.py:7", activations, 3)], list(units))


def test_tp405_activations_dominate_near_the_cap():
    units = [UnitBytes(f"b{i}", 150 * MIB, 10 * MIB) for i in range(4)]
    f = facts()
    window = f.window
    f.memory.steps = [_step_memory(s.index, 600 * MIB, units) for s in window]
    steps = [StepMetrics(wall_ms=10.0, memory={"cpu": DeviceMemory(peak=800 * MIB)})] * len(window)
    p = profile({"wall_ms": 10.0}, f)
    p.per_step = steps
    (finding,) = memory_checks.ActivationsDominate().run(p)
    assert finding.code == "TP405" and finding.evidence["checkpointing_frees_mib"] == 410.0
    split = peak_split(p)
    # the profiler's CPU total counts from the window's start: the parameters are added
    assert split.peak == 810 * MIB and split.parts["rest"] == 200 * MIB
    f.memory.steps = [_step_memory(s.index, 300 * MIB, units) for s in window]
    assert memory_checks.ActivationsDominate().run(p) == []  # activations 38% of the peak


def test_memory_facts_round_trip_through_json():
    import json

    from torchpace.facts.run import RunFacts

    f = _oom_facts()
    f.memory.steps = [_step_memory(3, 5 * MIB, [UnitBytes("b", 1, 2)])]
    back = RunFacts.from_dict(json.loads(f.to_json()))
    assert back.memory == f.memory


def _shaped_steps(f, shapes):
    return [
        StepMemory(s.index, MemorySplit("cpu", 0, 0, 0, 0), [], [], model_input_shapes=shape)
        for s, shape in zip(f.window, shapes, strict=False)
    ]


def test_tp406_shapes_changing_step_to_step_and_no_leak_claimed():
    f = facts()
    f.memory.steps = _shaped_steps(f, [[[8, n]] for n in (12, 40, 17, 33, 25)])
    p = profile({"wall_ms": 10.0}, f)
    (finding,) = memory_checks.VariableInputShapes().run(p)
    assert finding.code == "TP406" and finding.evidence["distinct_shapes"] == 5
    assert finding.severity == "low"  # CPU, no compile, no cudnn: re-allocation only
    f.calls.compiled = True
    assert memory_checks.VariableInputShapes().run(p)[0].severity == "medium"
    # growth across steps whose inputs grow is not a leak
    p.growth = [Growth("trace cpu", 2**20, 0.99, 1.0, 0, 4 * 2**20, 5)]
    assert memory_checks.MemoryGrowth().run(p) == []


def test_tp406_silent_for_one_short_last_batch():
    f = facts()
    f.memory.steps = _shaped_steps(f, [[[32, 3]]] * 4 + [[[7, 3]]])
    assert memory_checks.VariableInputShapes().run(profile({"wall_ms": 10.0}, f)) == []


def test_eval_with_autograd_on_is_seen_and_no_grad_is_not(tracked):
    tracker, model, _ = tracked
    model(torch.randn(4, 64))  # an evaluation step with autograd on
    tracker.step_ended(0, in_window=True)
    with torch.no_grad():
        model(torch.randn(4, 64))
    tracker.step_ended(1, in_window=True)
    model(torch.randn(4, 64)).sum().backward()  # a training step
    tracker.step_ended(2, in_window=True)
    steps = tracker.facts.steps
    assert [(s.grad_forwards, s.backward_ran) for s in steps] == [(1, False), (0, False), (1, True)]
    f = facts()
    f.memory.steps = [steps[0]] * 3 + [steps[2]]
    (finding,) = memory_checks.EvalWithAutograd().run(profile({"wall_ms": 10.0}, f))
    assert finding.code == "TP301" and finding.evidence["steps_without_backward"] == 3
    f.memory.steps = [steps[1]] * 3 + [steps[2]]
    assert memory_checks.EvalWithAutograd().run(profile({"wall_ms": 10.0}, f)) == []


def test_empty_cache_calls_are_counted(tracked):
    tracker, _, _ = tracked
    torch.cuda.empty_cache()
    tracker.step_ended(0, in_window=True)
    assert tracker.facts.steps[0].empty_cache_calls == 1
    f = facts()
    f.memory.steps = tracker.facts.steps * 3
    gpu = dict(has_gpu=True, device=0)
    assert memory_checks.EmptyCacheInLoop().run(profile({"wall_ms": 10.0}, f)) == []  # CPU run
    (finding,) = memory_checks.EmptyCacheInLoop().run(profile({"wall_ms": 10.0}, f, **gpu))
    assert finding.code == "TP402" and finding.evidence["calls_per_step"] == 1.0


def test_fragmentation_from_reserved_and_retries():
    split = MemorySplit("cuda", 0, 0, 0, 0, allocated=2 * 2**30, reserved=5 * 2**30)
    step = StepMemory(3, split, [], [])
    f = facts()
    f.memory.steps = [step]
    (finding,) = memory_checks.Fragmentation().run(profile({"wall_ms": 10.0}, f))
    assert (finding.code, finding.severity) == ("TP407", "low")
    step.alloc_retries = 2
    assert memory_checks.Fragmentation().run(profile({"wall_ms": 10.0}, f))[0].severity == "medium"
    step.alloc_retries, split.reserved = 0, int(2.5 * 2**30)
    assert memory_checks.Fragmentation().run(profile({"wall_ms": 10.0}, f)) == []


# --- tensors kept without their graph, and the moments of a step ---------------------------


def test_detached_outputs_kept_across_steps_point_to_the_line_that_keeps_them(tracked):
    tracker, model, _ = tracked
    kept = []
    for i in range(4):
        out = model(torch.randn(16, 64))
        out.sum().backward()
        kept.append(out.detach() if i % 2 else out.detach().clone())
        tracker.step_ended(i, in_window=True)
    line = f"test_memory.py:{_line_of('kept.append(out.detach() if i % 2')}"
    for i, step in enumerate(tracker.facts.steps):
        site = next(s for s in step.kept_at_end if s.location.endswith(line))
        assert (site.bytes, site.kind) == ((i + 1) * 16 * 64 * 4, "copies")
    p = profile({"wall_ms": 10.0}, facts())
    p.facts.memory.steps = tracker.facts.steps
    where, per_step, kind = leak_site(p)
    assert where.endswith(line) and per_step == 16 * 64 * 4 and kind == "copies"
    p.growth = [Growth("trace cpu", 4096, 1.0, 1.0, 0, 4 * 4096, 4)]
    (leak,) = memory_checks.MemoryGrowth().run(p)
    assert leak.location.endswith(line) and leak.evidence["kept_copies_kib_per_step"] == 4.0
    assert ".detach()" in leak.detail and ".item()" in leak.fix


def test_copies_made_by_library_code_are_not_noted(tracked):
    tracker, model, _ = tracked
    state = model.state_dict()  # torch's own code detaches every parameter
    assert state and tracker.copies == {}
    mine = model.layers[0].weight.detach()
    (entry,) = tracker.copies.values()
    assert entry.site.endswith(f"test_memory.py:{_line_of('mine = model.layers[0]')}")
    del mine
    assert tracker.copies == {}  # forgotten when the tensor dies


def test_the_moment_of_most_activations_is_taken_before_zero_grad(tracked):
    # forward, zero_grad, backward (the bundled example's order): the peak holds the
    # previous step's gradients with the activations; the optimizer step holds new ones
    tracker, model, opt = tracked
    params = sum(p.numel() * 4 for p in model.parameters())
    for i in range(3):
        loss = model(torch.randn(32, 64)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        tracker.step_ended(i, in_window=True)
    first, *later = tracker.facts.steps
    assert first.split.gradients == 0  # no gradient before the first backward
    assert all(s.split.gradients == params for s in later)
    assert all(s.split.activations == 4 * 32 * 64 * 4 for s in tracker.facts.steps)
    moment = later[-1].optimizer_split
    assert moment.gradients == params and moment.activations == 0
    assert moment.optimizer_state >= 2 * params


def _line_of(text: str) -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line and "_line_of" not in line)


def _cpu_split(**kw) -> MemorySplit:
    base = dict(
        device="cpu", parameters=10 * MIB, gradients=0, optimizer_state=20 * MIB,
        activations=600 * MIB, capacity=4096 * MIB, capacity_kind="RLIMIT_AS",
        capacity_used=3900 * MIB,
    )  # fmt: skip
    base.update(kw)
    return MemorySplit(**base)


def _capped_profile(split: MemorySplit, peak: int, optimizer_split=None, units=()):
    f = facts()
    f.memory.steps = [
        StepMemory(s.index, split, [SiteBytes("net.py:7", split.activations, 3)], list(units),
                   optimizer_split=optimizer_split)
        for s in f.window
    ]  # fmt: skip
    p = profile({"wall_ms": 10.0}, f)
    p.per_step = [StepMetrics(wall_ms=10.0, memory={"cpu": DeviceMemory(peak=peak)})] * 5
    return p


def test_capacity_under_an_rlimit_is_what_the_step_can_use():
    # RLIMIT_AS 4 GiB; 3900 MiB of address space in use at the peak, 700 MiB of it tensors
    p = _capped_profile(_cpu_split(), peak=670 * MIB)
    split = peak_split(p)
    assert split.peak == 700 * MIB and split.parts["rest"] == 70 * MIB
    assert split.outside == 3200 * MIB and split.usable == 896 * MIB
    d = split.report()
    assert d.capacity_text == "the 4.00 GiB RLIMIT_AS" and d.usable_bytes == 896 * MIB
    assert d.pct_of_usable["activations"] == round(100 * 600 / 896, 1)
    assert d.pct_of_capacity["activations"] == round(100 * 600 / 4096, 1)
    # TP405: 700 MiB is 78% of what the step can use (17% of the limit itself)
    (finding,) = memory_checks.ActivationsDominate().run(p)
    assert finding.evidence["peak_pct_of_usable"] == 78.1
    assert "under the 4.00 GiB RLIMIT_AS" in finding.detail
    assert memory_checks.LowHeadroom().run(p) == []  # under 90%
    tight = _capped_profile(_cpu_split(capacity_used=4050 * MIB), peak=670 * MIB)
    (low,) = memory_checks.LowHeadroom().run(tight)  # 700 of 746 MiB
    assert low.code == "TP403" and "RLIMIT_AS" in low.detail
    roomy = _capped_profile(_cpu_split(capacity=24 * 2**30, capacity_kind="host RAM",
                                       capacity_used=2 * 2**30), peak=670 * MIB)  # fmt: skip
    assert memory_checks.ActivationsDominate().run(roomy) == []


def test_the_split_is_taken_at_the_moment_that_explains_more_of_the_peak():
    # a model whose gradients outweigh its activations peaks at its optimizer step
    at_act = _cpu_split(parameters=100 * MIB, optimizer_state=100 * MIB, activations=30 * MIB)
    at_opt = _cpu_split(parameters=100 * MIB, gradients=100 * MIB, optimizer_state=100 * MIB,
                        activations=0)  # fmt: skip
    p = _capped_profile(at_act, peak=120 * MIB, optimizer_split=at_opt)
    split = peak_split(p)
    assert split.moment == memory.MOMENT_OPTIMIZER and split.parts["gradients"] == 100 * MIB
    assert split.peak == 320 * MIB and split.parts["rest"] == 20 * MIB
    assert split.other_parts["activations"] == 30 * MIB
    # the headroom fits both moments: the activations (and the rest) scale, at the moment
    # of most activations; usable: 4096 - (3900 - 320) = 516 MiB
    room = memory.batch_headroom(split, 32)
    assert room.per_sample_bytes == 50 * MIB // 32  # (30 + 20) MiB for 32 samples
    assert room.fixed_bytes == 200 * MIB
    assert room.largest_batch_at_limit == int(32 * (516 - 200) / 50)
    assert room.largest_batch_estimate == int(32 * (0.9 * 516 - 200) / 50)
    assert room.capacity_kind == "RLIMIT_AS"


def test_terminal_says_what_each_memory_figure_counts():
    from torchpace.report.doctor_terminal import memory_lines
    from torchpace.report.memory_model import MemoryReport

    split = peak_split(_capped_profile(_cpu_split(), peak=670 * MIB))
    mem = MemoryReport(peaks={"cpu": 670 * MIB}, host_rss_bytes=1000 * MIB,
                       split_at_peak=split.report(),
                       batch_headroom=memory.batch_headroom(split, 64))  # fmt: skip
    text = " ".join(" ".join(memory_lines(mem)).split())
    assert "cpu peak 670 MiB of what the profiled window allocated" in text
    assert "host RSS 1000 MiB (the whole process)" in text
    assert "of live tensors (the window's allocations + parameters and optimizer state" in text
    assert "the 4.00 GiB RLIMIT_AS less" in text and "held besides them" in text
    assert "% of the " in text and "activations 600 MiB (" in text
    assert "would fit under the 4.00 GiB RLIMIT_AS" in text


def test_a_report_with_its_memory_parts_reads_back_as_written():
    """compare and tune read saved reports: the split, the headroom, the failure and its
    ways out come back as they were built (report/model.DoctorReport.from_dict)."""
    import json

    from torchpace.doctor.analyze import Diagnosis
    from torchpace.doctor.result import build_report
    from torchpace.report.model import DoctorReport

    capped = Diagnosis(_capped_profile(_cpu_split(), peak=670 * MIB), [])
    for s in capped.profile.facts.window:
        s.samples = 64  # the batch the headroom scales
    capped, failed = build_report(capped), build_report(diagnose(None, _oom_facts()))
    assert capped.memory.batch_headroom.batch_size == 64 and capped.memory.split_at_peak
    assert failed.memory.out_of_memory.ways_out
    for report in (capped, failed):
        written = json.loads(json.dumps(report.to_dict()))
        assert DoctorReport.from_dict(written) == report


def test_a_graph_that_no_backward_walks_is_freed(tracked):
    """The hook's holder keeps the tensor without its grad_fn: a node's saved output would
    otherwise keep the node alive through the holder (issue 37: a GAN's G(z).detach())."""
    import gc
    import weakref

    tracker, model, _ = tracked
    x = torch.randn(8, 64)
    out = model(x)  # relu saves its own output: the cycle's case
    saved = [weakref.ref(h) for h in list(_held_objects())]
    assert saved
    del out
    gc.collect()
    assert all(ref() is None for ref in saved)
    assert tracker.total == 0 and not tracker.saved


def _held_objects():
    import gc

    from torchpace.capture.memory import _Held

    return [o for o in gc.get_objects() if isinstance(o, _Held)]
