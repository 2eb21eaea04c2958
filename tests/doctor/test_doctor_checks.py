"""Each check at its thresholds: it fires on evidence, stays silent without, and never claims
GPU costs on a CPU-only run."""

import ast
from pathlib import Path

import pytest
from doctor_fakes import (
    ProbeResult,
    StepPhase,
    StepRecord,
    SyncSite,
    WrapperFacts,
    facts,
    loader,
    process,
    profile,
)

from torchpace.doctor.checks import compute, data, environment, memory, run_all, syncs
from torchpace.doctor.finding import Finding, rank
from torchpace.doctor.profile import Growth
from torchpace.knobs import is_knob

GPU = dict(has_gpu=True, device=0, capability=(8, 0), memory_capacity=40 * 2**30)


def codes(findings):
    return [f.code for f in findings]


def test_data_wait_without_workers_is_tp101_with_saving_the_wait():
    p = profile({"wall_ms": 100.0, "data_wait_ms": 40.0}, facts(loaders=[loader()]))
    (f,) = data.run(p)
    assert (f.code, f.saving_ms, f.severity, f.location) == ("TP101", 40.0, "high", "train.py:40")
    assert f.practices == ["P01"] and f.knob == "num-workers"


@pytest.mark.parametrize(
    ("wait", "workers"), [(5.0, 0), (40.0, 4)], ids=["short-wait", "workers-already"]
)
def test_tp101_silent_below_threshold_or_with_workers(wait, workers):
    p = profile({"wall_ms": 100.0, "data_wait_ms": wait}, facts(loaders=[loader(workers)]))
    assert data.run(p) == []


def test_tp101_from_the_trace_alone_uses_the_single_process_iterator():
    p = profile(
        {"wall_ms": 100.0, "data_wait_ms": 30.0}, loader_iter="_SingleProcessDataLoaderIter"
    )
    assert codes(data.run(p)) == ["TP101"]
    p.loader_iter = "_MultiProcessingDataLoaderIter"
    assert data.run(p) == []


def test_pageable_copies_only_on_gpu_runs():
    metrics = {"wall_ms": 50.0, "h2d_pageable_bytes": 120e6, "h2d_pageable_host_ms": 20.0}
    (f,) = data.run(profile(metrics, **GPU))
    # 120 MB at the assumed 12 GB/s pinned takes 10 ms: 20 - 10 saved
    # sm80: 22 GB/s once pinned (PCIe 4.0, about half its peak)
    assert f.code == "TP102" and f.saving_ms == pytest.approx(20.0 - 120 / 22)
    assert data.run(profile(metrics)) == []  # no GPU work in the trace: no GPU claims


def test_blocking_pinned_copies_are_tp103():
    metrics = {
        "wall_ms": 50.0,
        "h2d_pinned_bytes": 1e6,
        "copy_syncs": 2.0,
        "copy_sync_wait_ms": 1.0,
        "copy_sync_idle_ms": 2.0,
    }
    (f,) = data.run(profile(metrics, **GPU))
    assert f.code == "TP103" and f.saving_ms == pytest.approx(3.0)


def test_underfilled_gpu_needs_both_idle_and_low_memory():
    metrics = {"wall_ms": 100.0, "gpu_idle_ms": 60.0}
    (f,) = data.run(profile(metrics, peaks={"cuda:0": 2.0 * 2**30}, **GPU))
    assert f.code == "TP104" and f.saving_ms is None and "opt-in" in f.notes[0]
    assert data.run(profile(metrics, peaks={"cuda:0": 20.0 * 2**30}, **GPU)) == []


def test_syncs_cost_the_overlap_they_take_and_name_the_line():
    site = SyncSite("item", "train.py:55", count=5, per_step=1.0)
    # GPU-bound: the host blocked 8 ms of a 20 ms step, the GPU idle 3 ms: without the
    # sync the step is max(20 - 8, 17) = 17 ms, a 3 ms saving
    metrics = {"wall_ms": 20.0, "syncs": 1.0, "sync_wait_ms": 8.0, "gpu_idle_ms": 3.0,
               "gpu_busy_ms": 17.0, "idle_sync_ms": 2.5}  # fmt: skip
    (f,) = syncs.run(profile(metrics, facts(syncs=[site]), **GPU))
    assert (f.code, f.saving_ms, f.location) == ("TP201", 3.0, "train.py:55")
    assert f.evidence["gpu_idle_charged_to_syncs_ms"] == 2.5
    assert syncs.run(profile(metrics, facts(syncs=[site]))) == []  # CPU-only: never
    # launch-bound: five syncs drain a queue the host keeps barely ahead; the idle after
    # them is short, but the host blocked 4 ms it could have spent launching ahead
    metrics = {"wall_ms": 20.0, "syncs": 5.0, "sync_wait_ms": 4.0, "gpu_idle_ms": 9.0,
               "gpu_busy_ms": 11.0, "idle_sync_ms": 0.3, "idle_launch_ms": 8.7}  # fmt: skip
    (f,) = syncs.run(profile(metrics, facts(syncs=[site]), **GPU))
    assert f.saving_ms == 4.0


def test_anomaly_detection_saving_comes_from_the_probe():
    probe = ProbeResult("anomaly-detection-off", baseline_ms=30.0, probe_ms=12.0, steps=2)
    p = profile({"wall_ms": 30.0}, facts(proc=process(anomaly_detection=True), probes=[probe]))
    (f,) = compute.run(p)
    assert (f.code, f.saving_ms, f.severity) == ("TP304", 18.0, "high")
    p = profile({"wall_ms": 30.0}, facts(proc=process(anomaly_detection=True)))
    (f,) = compute.run(p)
    assert f.saving_ms is None and f.severity == "medium"


def test_fp32_matmul_on_tensor_core_gpu():
    metrics = {"wall_ms": 100.0, "kernel_ms": 90.0, "matmul_ms": 60.0, "matmul_tensor_core_ms": 0.0}
    (f,) = compute.run(profile(metrics, **GPU))
    assert f.code == "TP307" and f.saving_ms == pytest.approx(30.0)
    assert compute.run(profile(metrics, **(GPU | {"capability": (6, 1)}))) == []
    metrics["matmul_tensor_core_ms"] = 50.0
    assert compute.run(profile(metrics, **GPU)) == []


def test_fp32_matmul_fix_offers_only_what_the_gpu_runs():
    metrics = {"wall_ms": 100.0, "kernel_ms": 90.0, "matmul_ms": 60.0, "matmul_tensor_core_ms": 0.0}
    (ampere,) = compute.run(profile(metrics, **GPU))  # sm 8.0: bf16 autocast or TF32
    assert "bfloat16" in ampere.fix and "set_float32_matmul_precision" in ampere.fix
    assert "matmul-precision" in ampere.fix and ampere.knob == "amp"
    (volta,) = compute.run(profile(metrics, **(GPU | {"capability": (7, 0)})))  # a V100
    assert "float16" in volta.fix and "GradScaler" in volta.fix
    assert "bfloat16" not in volta.fix and "set_float32_matmul_precision" not in volta.fix
    tf32_on = facts(proc=process(device="cuda", cuda_available=True, tf32_matmul=True))
    (already,) = compute.run(profile(metrics, tf32_on, **GPU))
    assert "set_float32_matmul_precision" not in already.fix


def _knob_arguments(path):
    """(line, value) of every ``knob=`` argument in a check module's source."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "knob":
            value = node.value.value if isinstance(node.value, ast.Constant) else node.value
            yield node.lineno, value


def test_every_knob_a_check_names_is_a_tune_knob():
    checks = sorted(Path(compute.__file__).parent.glob("*.py"))
    found = {(p.name, line): v for p in checks for line, v in _knob_arguments(p)}
    assert len(found) >= 9  # the source was read
    for where, value in found.items():
        assert isinstance(value, str), f"{where}: knob= must be a literal, to be checked here"
        assert is_knob(value), f"{where}: {value!r} is not in torchpace.knobs"


def test_a_finding_naming_an_unknown_knob_fails():
    with pytest.raises(ValueError, match="no-such-knob"):
        Finding("TP101", evidence={}, fix="x", knob="no-such-knob")
    assert Finding("TP101", evidence={}, fix="x", knob="num-workers").knob == "num-workers"


def test_cudnn_benchmark_off_needs_convs_on_cuda():
    proc = process(device="cuda", cuda_available=True, cudnn_benchmark=False)
    p = profile({"wall_ms": 10.0, "conv_kernels": 20.0}, facts(proc=proc), has_convs=True, **GPU)
    assert codes(compute.run(p)) == ["TP308"]
    p.has_convs = False
    assert compute.run(p) == []


def test_launch_bound_on_gpu_and_on_cpu():
    gpu = {"wall_ms": 10.0, "kernels": 1000.0, "tiny_kernels": 900.0, "launch_gap_ms": 4.0}
    (f,) = compute.run(profile(gpu, **GPU))
    assert (f.code, f.saving_ms) == ("TP310", 4.0)
    cpu = {"wall_ms": 10.0, "tiny_cpu_ops": 400.0, "tiny_cpu_ops_ms": 5.0}
    (f,) = compute.run(profile(cpu))
    assert (f.code, f.saving_ms) == ("TP310", 2.5)
    cpu["tiny_cpu_ops_ms"] = 1.0
    assert compute.run(profile(cpu)) == []


def test_memory_growth_is_a_leak_flat_memory_is_not():
    leak = Growth("trace cpu", 65536.0, 0.99, 1.0, 1e6, 1.3e6, 5)
    (f,) = memory.run(profile({"wall_ms": 10.0}, growth=[leak]))
    assert (f.code, f.severity) == ("TP401", "high")
    flat = Growth("trace cpu", 0.0, 0.0, 0.0, 1e6, 1e6, 5)
    noisy = Growth("trace cpu", 65536.0, 0.3, 0.5, 1e6, 1.3e6, 5)
    assert memory.run(profile({"wall_ms": 10.0}, growth=[flat, noisy])) == []


def test_low_headroom():
    metrics = {"wall_ms": 10.0}
    assert codes(memory.run(profile(metrics, peaks={"cuda:0": 38.0 * 2**30}, **GPU))) == ["TP403"]
    assert memory.run(profile(metrics, peaks={"cuda:0": 30.0 * 2**30}, **GPU)) == []


def test_data_parallel_and_find_unused_parameters():
    wrappers = [
        WrapperFacts("DataParallel", "train.py:12"),
        WrapperFacts("DistributedDataParallel", "t.py:3", True),
    ]
    found = environment.run(profile({"wall_ms": 10.0}, facts(wrappers=wrappers)))
    assert codes(found) == ["TP501", "TP503"] and found[0].location == "train.py:12"


def test_threads_oversubscribed_with_and_without_probe_gain():
    proc = process(intra_op_threads=16, usable_cpus=2)
    gain = ProbeResult("threads-to-cores", baseline_ms=50.0, probe_ms=20.0, steps=2)
    (f,) = environment.run(profile({"wall_ms": 50.0}, facts(proc=proc, probes=[gain])))
    assert (f.code, f.saving_ms) == ("TP601", 30.0)
    none = ProbeResult("threads-to-cores", baseline_ms=50.0, probe_ms=49.5, steps=2)
    (f,) = environment.run(profile({"wall_ms": 50.0}, facts(proc=proc, probes=[none])))
    assert (f.saving_ms, f.severity) == (0.0, "low")  # 8x the cores: said, at no cost here
    slight = process(intra_op_threads=3, usable_cpus=2)
    p = profile({"wall_ms": 50.0}, facts(proc=slight, probes=[none]))
    assert environment.run(p) == []  # measured: costs nothing, and not far above the cores
    fine = process(intra_op_threads=2, usable_cpus=2)
    assert environment.run(profile({"wall_ms": 50.0}, facts(proc=fine))) == []


def test_clean_cpu_profile_has_no_findings():
    metrics = {"wall_ms": 100.0, "data_wait_ms": 2.0, "tiny_cpu_ops": 30.0, "tiny_cpu_ops_ms": 0.3}
    flat = Growth("trace cpu", 0.0, 0.0, 0.0, 1e6, 1e6, 5)
    steps = [StepRecord(i, 100.0, 2.0, in_window=True) for i in range(5)]
    p = profile(metrics, facts(loaders=[loader()], steps=steps), growth=[flat])
    assert run_all(p) == []


def test_ranking_puts_severity_first_then_saving():
    a = Finding("TP101", {}, "fix", saving_ms=30.0, step_ms=100.0)  # high
    b = Finding("TP401", {}, "fix", severity="high")
    c = Finding("TP201", {}, "fix", saving_ms=12.0, step_ms=100.0)  # medium
    d = Finding("TP310", {}, "fix", saving_ms=60.0, step_ms=100.0)  # high
    assert codes(rank([c, b, a, d])) == ["TP310", "TP101", "TP401", "TP201"]


def test_finding_rejects_unknown_codes():
    with pytest.raises(KeyError):
        Finding("TP999", {}, "fix")


def test_float_batches_copied_as_float32_are_tp106():
    metrics = {"wall_ms": 40.0, "float_image_h2d_bytes": 20e6, "float_image_h2d_ms": 4.0}
    # no evidence of an 8-bit origin (a trace alone): the bytes, halved, never "images"
    (f,) = data.run(profile(metrics, **GPU))
    assert (f.code, f.saving_ms, f.knob) == ("TP106", 2.0, None)
    assert "images" not in f.detail and "uint8" not in f.fix
    # with it: uint8 on the bus, a quarter of the bytes
    images = facts(loaders=[loader(transform=["ToTensor"], uint8_evidence="transform ToTensor")])
    (f,) = data.run(profile(metrics, images, **GPU))
    assert (f.code, f.saving_ms, f.knob) == ("TP106", 3.0, "device-transforms")
    assert "images" in f.detail and f.evidence["uint8_origin"] == "transform ToTensor"
    assert data.run(profile(metrics)) == []


def test_tp101_prices_on_the_means_of_the_unprofiled_steps():
    steps = [StepRecord(i, 900.0, 800.0, in_window=True) for i in range(3)]
    reference = StepPhase.REFERENCE
    # every fourth batch is slow: the median step (40 ms, 10 ms wait) hides it, the mean
    # (70 ms, 40 ms wait) is what the loop really spends
    for i in range(12):
        slow = i % 4 == 3
        wall, wait = (160.0, 130.0) if slow else (40.0, 10.0)
        steps.append(StepRecord(3 + i, wall, wait, in_window=False, phase=reference))
    p = profile({"wall_ms": 900.0, "data_wait_ms": 800.0}, facts(loaders=[loader()], steps=steps))
    (f,) = data.run(p)
    assert (f.saving_ms, f.step_ms) == (40.0, 70.0)
    assert f.evidence["measured_on"] == "mean of 12 unprofiled steps"


def test_a_pageable_float_copy_without_image_evidence_ranks_pinning_first():
    """192 MiB of float32 data per step from pageable memory on an H100 (measured there:
    pinned + non_blocking 20% faster, fp16 on the host 7%): TP102 comes first."""
    mib = 192 * 2**20
    metrics = {"wall_ms": 100.0, "h2d_pageable_bytes": mib, "h2d_pageable_host_ms": 25.0,
               "float_image_h2d_bytes": mib, "float_image_h2d_ms": 25.0}  # fmt: skip
    h100 = GPU | {"capability": (9, 0)}
    findings = rank(data.run(profile(metrics, facts(loaders=[loader()]), **h100)))
    assert [f.code for f in findings] == ["TP102", "TP106"]
    assert findings[0].saving_ms == pytest.approx(25.0 - mib / 40e9 * 1000)
    assert findings[1].saving_ms == pytest.approx(12.5)
    assert "images" not in findings[1].detail


def test_tp901_on_a_script_that_raised_before_any_step_says_to_fix_the_error():
    # pytorch/examples time_sequence_prediction without matplotlib: ModuleNotFoundError at
    # import; the step-marking options would send the user nowhere
    from doctor_fakes import Status

    from torchpace.doctor.analyze import STEP_FIX, no_step_finding

    raised = facts(steps=[], status=Status.SCRIPT_RAISED)
    raised.error = "Traceback ...\nModuleNotFoundError: No module named 'matplotlib'"
    finding = no_step_finding(raised)
    assert finding.detail == "ModuleNotFoundError: No module named 'matplotlib'"
    assert "fix the error the script raised" in finding.fix and "--step-on" not in finding.fix
    exited = facts(steps=[], status=Status.SCRIPT_EXITED)
    assert no_step_finding(exited).fix == STEP_FIX


def test_tp901_names_the_exception_even_when_its_message_runs_over_several_lines():
    from torchpace.capture.outcome import exception_line

    # torch.load's weights_only error (pytorch/examples time_sequence_prediction, torch 2.6+)
    error = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 47, in <module>\n'
        "    data = torch.load('traindata.pt')\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "torch/serialization.py", line 1615, in load\n'
        "    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None\n"
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded\n"
        "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument\n"
        "\n"
        "Check the documentation of torch.load to learn more about types accepted\n"
    )
    assert exception_line(error).startswith("_pickle.UnpicklingError: Weights only load failed")
    assert exception_line("no step came before the timeout") == "no step came before the timeout"
