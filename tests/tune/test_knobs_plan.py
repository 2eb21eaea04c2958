"""Every knob's declarations and its plan on hand-made contexts: which values it tries,
where it does not apply, and that it says why in words a user understands."""

import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import ROOT
from knob_fakes import CPU_2, CPU_16, CPU_BF16, ctx, facts, loader, model, optimizer, process

from torchpace import catalog, knobs
from torchpace.env.process import glibc
from torchpace.facts.run import CallFacts
from torchpace.knobs import num_workers
from torchpace.knobs.base import Knob, Plan, SourceEdit

PRACTICES_MD = ROOT.parent / "shared" / "PRACTICES.md"
PRACTICES = PRACTICES_MD.read_text() if PRACTICES_MD.exists() else None
EDIT_KINDS = {"loader-kwargs", "statement-after-imports", "optimizer-kwargs", "wrap-assignment",
              "environment", "call-argument"}  # fmt: skip


@pytest.fixture(autouse=True)
def roomy_machine(monkeypatch):
    """Plans read the machine (free memory, /dev/shm, a compiler): a roomy one here, so the
    results do not depend on where the tests run; tests that need a tight one say so."""
    monkeypatch.setattr(num_workers, "read_mem_available", lambda: 64 << 30)
    monkeypatch.setattr(num_workers, "read_shm_free", lambda: 8 << 30)
    monkeypatch.setenv("CXX", "g++")
    monkeypatch.setenv("CC", "gcc")


@pytest.mark.parametrize("name", knobs.NAMES)
def test_every_registered_knob_imports_and_declares_its_name(name):
    knob = knobs.get(name)
    assert isinstance(knob, Knob) and knob.name == name
    assert knob.title
    for code in knob.answers:
        assert catalog.get(code).code == code
    assert knob.practices and all(p.startswith("P") for p in knob.practices)
    if PRACTICES is not None:
        assert all(f"| {p} |" in PRACTICES for p in knob.practices)
    assert all(knobs.is_knob(d) for d in knob.depends_on)
    assert knob.opt_in in (None, "--allow-batch-size")


def test_plans_run_without_torch():
    # the parent reads plans without paying for torch
    code = (
        "import sys; import torchpace.knobs as k; [k.get(n) for n in k.NAMES]; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    assert out.stdout.strip() == "False"


def all_plans(context) -> dict[str, Plan]:
    return {k.name: k.plan(context) for k in (knobs.get(name) for name in knobs.NAMES)}


def test_plan_values_are_scalars_and_reasons_are_said():
    for context in (ctx(), ctx(cuda=True), ctx(try_all=True, allow_batch_size=True)):
        for name, plan in all_plans(context).items():
            assert plan.reason, name  # applicable or not, the plan says why
            assert len(plan.reason) < 300, name
            for value in plan.values:
                assert isinstance(value, (bool, int, str)), (name, value)
                json.dumps(value)
                assert knobs.get(name).describe(value)
                for edit in knobs.get(name).source_edits(value):
                    assert isinstance(edit, SourceEdit) and edit.kind in EDIT_KINDS


def test_cpu_plans_of_the_article_script():
    plans = all_plans(ctx())
    applicable = {n for n, p in plans.items() if p.applicable}
    assert applicable == {
        "num-workers", "persistent-workers", "prefetch-factor", "device-transforms",
        "fused-optimizer", "channels-last", "compile", *(["host-malloc"] if glibc() else []),
    }  # fmt: skip
    assert plans["pin-memory"].reason.startswith("needs a CUDA device")
    assert "needs a CUDA device" in plans["cudnn-benchmark"].reason
    assert "needs a CUDA device" in plans["matmul-precision"].reason
    assert "no native bf16" in plans["amp"].reason and "--try-all" in plans["amp"].reason
    assert "--allow-batch-size" in plans["batch-size"].reason
    assert "already runs 2 threads" in plans["threads"].reason
    assert plans["device-transforms"].values == ("normalize", "full")
    assert plans["compile"].values == ("default",)
    assert plans["fused-optimizer"].values == ("fused", "foreach")


def test_host_malloc_leaves_a_preloaded_allocator_and_the_users_own_settings(monkeypatch):
    if glibc() is None:
        pytest.skip("glibc only")
    knob = knobs.get("host-malloc")
    assert knob.plan(ctx()).values == (True,)
    jemalloc = ctx()
    jemalloc.facts.process.allocator = "jemalloc"
    assert "jemalloc is preloaded" in knob.plan(jemalloc).reason
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert "you set MALLOC_TRIM_THRESHOLD_" in knob.plan(ctx()).reason
    (edit,) = knob.source_edits(True)
    assert edit.kind == "environment" and "MALLOC_MMAP_THRESHOLD_=33554432" in edit.note


def test_cuda_plans():
    plans = all_plans(ctx(cuda=True))
    assert plans["pin-memory"].values == (True,)
    assert plans["cudnn-benchmark"].values == (True,)
    assert plans["matmul-precision"].values == ("high",)
    assert plans["amp"].values == ("bf16", "fp16")
    assert plans["compile"].values == ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
    assert plans["fused-optimizer"].values == ("fused",)  # foreach is CUDA's default already


def test_old_gpu_gets_no_tf32_or_bf16():
    plans = all_plans(ctx(cuda=True, capability=(7, 0)))
    assert "capability 8.0+" in plans["matmul-precision"].reason
    assert "this one is 7.0" in plans["matmul-precision"].reason
    assert plans["amp"].values == ("fp16",)


def test_no_loader():
    plans = all_plans(ctx(facts(loaders=[]), allow_batch_size=True))
    for name in ("num-workers", "persistent-workers", "prefetch-factor", "device-transforms",
                 "batch-size"):  # fmt: skip
        assert plans[name].reason == "no DataLoader was seen in the script", name
    assert ctx(facts(loaders=[]), cuda=True).facts.loaders == []
    assert knobs.get("pin-memory").plan(ctx(facts(loaders=[]), cuda=True)).reason == (
        "no DataLoader was seen in the script"
    )


def test_num_workers_candidates_follow_the_cores():
    assert knobs.get("num-workers").plan(ctx()).values == (1, 2)
    assert knobs.get("num-workers").plan(ctx(cpu=CPU_16)).values == (4, 8, 12, 16)
    # a loader that already has 8 workers: only more
    f = facts(loaders=[loader(num_workers=8, prefetch_factor=2)])
    assert knobs.get("num-workers").plan(ctx(f, cpu=CPU_16)).values == (12, 16)
    # 2 workers and 2 threads on 2 cores: fewer are tried
    plan = knobs.get("num-workers").plan(ctx(facts(loaders=[loader(num_workers=2)])))
    assert plan.values == (0, 1) and "fewer tried too" in plan.reason
    # 2 workers and 1 thread on 4 cores: room enough, and the bound is reached
    cpu4 = dataclasses.replace(CPU_2, logical_cpus=4, usable_cpus=4, physical_cores=4)
    f = facts(loaders=[loader(num_workers=4)], proc=process(intra_op_threads=1, usable_cpus=4))
    plan = knobs.get("num-workers").plan(ctx(f, cpu=cpu4))
    assert plan.values == (0, 1, 2)  # 4 + 1 > 4 cores
    f = facts(loaders=[loader(num_workers=2)], proc=process(intra_op_threads=1, usable_cpus=4))
    plan = knobs.get("num-workers").plan(ctx(f, cpu=cpu4))
    assert plan.values == (3, 4)
    f = facts(loaders=[loader(num_workers=3)], proc=process(intra_op_threads=1, usable_cpus=4))
    plan = knobs.get("num-workers").plan(ctx(f, cpu=cpu4))
    assert plan.values == (4,)


def test_num_workers_not_applicable_at_the_bound_with_cores_to_spare(monkeypatch):
    monkeypatch.setattr(num_workers, "read_shm_free", lambda: 256 << 20)  # room for 2
    plan = knobs.get("num-workers").plan(ctx(facts(loaders=[loader(num_workers=2)]), cpu=CPU_16))
    assert not plan.applicable and "already has num_workers=2" in plan.reason
    assert "train.py:40" in plan.reason


def test_num_workers_asks_each_training_loader_apart():
    """A GPT trainer on 2 cores: the train loader has 4 workers, the evaluation loader 0
    (built again at each evaluation, run between the timed steps). The train loader's own
    candidates include 0; the evaluation loader gets none; each value names its loader."""
    train = loader(location="train.py:42", num_workers=4, prefetch_factor=2, batches_timed=10)
    evaluation = [loader(location="train.py:77", num_workers=0, batches_seen=10)] * 3
    plan = knobs.get("num-workers").plan(ctx(facts(loaders=[train, *evaluation])))
    assert plan.values == ({"train.py:42": 0}, {"train.py:42": 1}, {"train.py:42": 2})
    assert "4 workers + 2 compute threads on 2 cores" in plan.reason
    assert "train.py:77" not in plan.reason
    knob = knobs.get("num-workers")
    assert knob.describe({"train.py:42": 0}) == "num_workers=0 at train.py:42"
    assert knob.source_edits({"train.py:42": 0}) == [
        SourceEdit("loader-kwargs", location="train.py:42", kwargs={"num_workers": 0})
    ]


def test_num_workers_bounded_by_shm_and_memory(monkeypatch):
    monkeypatch.setattr(num_workers, "read_mem_available", lambda: 64 << 30)
    monkeypatch.setattr(num_workers, "read_shm_free", lambda: 64 << 20)  # docker's default
    plan = knobs.get("num-workers").plan(ctx(cpu=CPU_16))
    assert not plan.applicable and "/dev/shm" in plan.reason and "--shm-size" in plan.reason
    monkeypatch.setattr(num_workers, "read_shm_free", lambda: 1 << 30)
    assert knobs.get("num-workers").plan(ctx(cpu=CPU_16)).values == (2, 4, 6, 8)
    monkeypatch.setattr(num_workers, "read_shm_free", lambda: None)  # no /dev/shm: no bound
    monkeypatch.setattr(num_workers, "read_mem_available", lambda: 3 << 29)  # 1.5 GiB, 0.5/worker
    plan = knobs.get("num-workers").plan(ctx(cpu=CPU_16))
    assert plan.values == (1, 2) and "available memory" in plan.reason


def test_num_workers_leaves_iterable_datasets():
    f = facts(loaders=[loader(dataset_len=None, dataset_type="Stream")])
    plan = knobs.get("num-workers").plan(ctx(f))
    assert not plan.applicable and "iterable-style" in plan.reason


def test_worker_candidates():
    assert num_workers.candidates(1) == [1]
    assert num_workers.candidates(4) == [1, 2, 3, 4]
    assert num_workers.candidates(6) == [2, 3, 4, 6]
    assert num_workers.candidates(32) == [8, 16, 24, 32]


def test_loader_knobs_already_set():
    f = facts(loaders=[loader(num_workers=4, persistent_workers=True, prefetch_factor=4)])
    assert "already keeps its workers" in knobs.get("persistent-workers").plan(ctx(f)).reason
    assert "already prefetches 4" in knobs.get("prefetch-factor").plan(ctx(f)).reason
    plan = knobs.get("persistent-workers").plan(ctx())
    assert plan.values == (True,) and "313 batches" in plan.reason
    assert knobs.get("prefetch-factor").plan(ctx()).values == (4,)


@pytest.mark.parametrize(
    "transform, values, reason",
    [
        (["Resize", "ToTensor", "Normalize"], ("normalize", "full"), ""),
        (["ToTensor", "Normalize"], ("normalize",), ""),
        (["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"],
         ("normalize",), ""),
        (["Resize", "ToTensor"], (), "does not end in ToTensor, Normalize"),
        (["Lambda", "ToTensor", "Normalize"], (), "does not know: Lambda"),
        (None, (), "no `transform` attribute"),
    ],
)  # fmt: skip
def test_device_transforms_recognises_torchvision_pipelines(transform, values, reason):
    plan = knobs.get("device-transforms").plan(ctx(facts(loaders=[loader(transform=transform)])))
    assert plan.values == values
    if reason:
        assert reason in plan.reason and "train.py:40" in plan.reason


def test_threads():
    plan = knobs.get("threads").plan(ctx(facts(proc=process(intra_op_threads=32))))
    assert plan.values == (2,)
    smt = dataclasses.replace(CPU_16, physical_cores=8)
    plan = knobs.get("threads").plan(ctx(facts(proc=process(intra_op_threads=32)), cpu=smt))
    assert plan.values == (16, 8) and "physical cores" in plan.reason


def test_anomaly_and_zero_grad_follow_what_the_script_did():
    assert not knobs.get("anomaly-detection-off").plan(ctx()).applicable
    f = facts(proc=process(anomaly_detection=True))
    assert knobs.get("anomaly-detection-off").plan(ctx(f)).values == (True,)
    plan = knobs.get("zero-grad-set-to-none").plan(ctx())
    assert not plan.applicable and "set_to_none=False" in plan.reason
    plan = knobs.get("zero-grad-set-to-none").plan(ctx(facts(calls=CallFacts(zero_grad_keep=3))))
    assert plan.values == (True,) and "None instead of zeros" in plan.reason


def test_model_knobs_need_a_model_and_convs():
    no_conv = facts(mdl=model(conv_layers=0, class_name="MLP"))
    assert "no convolution layers" in knobs.get("channels-last").plan(ctx(no_conv)).reason
    cuda_no_conv = facts(mdl=model(conv_layers=0), proc=process(device="cuda"))
    plan = knobs.get("cudnn-benchmark").plan(ctx(cuda_no_conv, cuda=True))
    assert "no convolution" in plan.reason
    no_model = facts(mdl=None)
    assert "no model was found" in knobs.get("compile").plan(ctx(no_model)).reason
    assert "no model was found" in knobs.get("channels-last").plan(ctx(no_model)).reason


def test_already_compiled_or_autocast():
    f = facts(calls=CallFacts(compiled=True, autocast=True))
    assert knobs.get("compile").plan(ctx(f)).reason == "the script calls torch.compile itself"
    assert knobs.get("amp").plan(ctx(f, cuda=True)).reason == (
        "the script already uses torch.autocast"
    )


def test_compile_needs_a_compiler_on_the_cpu(monkeypatch):
    monkeypatch.delenv("CXX")
    monkeypatch.setattr("shutil.which", lambda name: None)
    plan = knobs.get("compile").plan(ctx())
    assert not plan.applicable and "C++ compiler" in plan.reason


def test_amp_on_the_cpu():
    assert knobs.get("amp").plan(ctx(cpu=CPU_BF16)).values == ("bf16",)
    plan = knobs.get("amp").plan(ctx(try_all=True))
    assert plan.values == ("bf16",) and "--try-all" in plan.reason
    assert not knobs.get("amp").plan(ctx(cpu=CPU_2)).applicable
    unknown = dataclasses.replace(CPU_2, isas=None)
    assert not knobs.get("amp").plan(ctx(cpu=unknown)).applicable


def test_amp_fp16_not_with_two_optimizers_or_a_scaler():
    two = facts(optimizers=[optimizer("Adam"), optimizer("SGD")])
    plan = knobs.get("amp").plan(ctx(two, cuda=True))
    assert plan.values == ("bf16",) and "several optimizers" in plan.reason
    scaler = facts(calls=CallFacts(grad_scaler=True))
    assert knobs.get("amp").plan(ctx(scaler, cuda=True)).values == ("bf16",)


def test_fused_optimizer():
    mine = facts(optimizers=[optimizer(fused=False)])
    assert "sets fused/foreach itself" in knobs.get("fused-optimizer").plan(ctx(mine)).reason
    lbfgs = facts(optimizers=[optimizer("LBFGS")])
    assert not knobs.get("fused-optimizer").plan(ctx(lbfgs)).applicable
    rms = facts(optimizers=[optimizer("RMSprop")])
    assert knobs.get("fused-optimizer").plan(ctx(rms)).values == ("foreach",)
    none = facts(optimizers=[])
    plan = knobs.get("fused-optimizer").plan(ctx(none))
    assert plan.reason == "no optimizer was seen in the script"
    old = dataclasses.replace(ctx(), torch_version=(2, 3))
    assert knobs.get("fused-optimizer").plan(old).values == ("foreach",)


def test_batch_size_is_opt_in_and_doubles():
    knob = knobs.get("batch-size")
    assert knob.opt_in == "--allow-batch-size" and knob.changes_numerics
    plan = knob.plan(ctx(allow_batch_size=True))
    assert plan.values == (64, 128, 256)
    assert "learning rate" in plan.reason and "learning rate" in knob.describe(64)
    small = facts(loaders=[loader(dataset_len=100)])
    assert knob.plan(ctx(small, allow_batch_size=True)).values == (64,)
    no_size = facts(loaders=[loader(batch_size=None)])
    assert "batch_sampler" in knob.plan(ctx(no_size, allow_batch_size=True)).reason


def test_cudnn_benchmark_respects_the_script():
    on = facts(proc=process(device="cuda", cudnn_benchmark=True))
    assert "already sets" in knobs.get("cudnn-benchmark").plan(ctx(on, cuda=True)).reason
    det = facts(proc=process(device="cuda", cudnn_deterministic=True))
    assert "deterministic" in knobs.get("cudnn-benchmark").plan(ctx(det, cuda=True)).reason


def test_depends_on():
    assert knobs.get("persistent-workers").depends_on == ("num-workers",)
    assert knobs.get("prefetch-factor").depends_on == ("num-workers",)
    # apply_all's order puts a knob after those it builds on
    for knob in (knobs.get(name) for name in knobs.NAMES):
        for dep in knob.depends_on:
            assert knobs.NAMES.index(dep) < knobs.NAMES.index(knob.name)


def test_changes_numerics_declared():
    changing = {k.name for k in (knobs.get(name) for name in knobs.NAMES) if k.changes_numerics}
    assert changing == {
        "amp",
        "matmul-precision",
        "batch-size",
        "device-transforms",
        "ddp-broadcast-buffers",
        "ddp-comm-hook",
        "nproc-per-node",
    }


def test_expandable_segments_only_after_fragmentation_and_never_over_the_user(monkeypatch):
    knob = knobs.get("expandable-segments")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert "CUDA" in knob.plan(ctx()).reason  # the CPU: no caching allocator to set
    assert "no fragmentation" in knob.plan(ctx(cuda=True)).reason
    seen = ctx(cuda=True, finding_codes=frozenset({"TP407"}))
    assert knob.plan(seen).values == (True,)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    assert "your setting stands" in knob.plan(seen).reason
    (edit,) = knob.source_edits(True)
    assert edit.kind == "environment" and "PYTORCH_CUDA_ALLOC_CONF" in edit.note
