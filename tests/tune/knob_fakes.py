"""Tune contexts built by hand (what the doctor's capture saw, the machine), and a fresh
ChildRuntime whose patches are undone after each test."""

from __future__ import annotations

import dataclasses

from torchpace.env.cpu import CpuFacts
from torchpace.facts.run import (
    CallFacts,
    LoaderFacts,
    ModelFacts,
    OptimizerFacts,
    ProcessState,
    RunFacts,
    StepRecord,
)
from torchpace.knobs.base import TuneContext

CPU_2 = CpuFacts(
    model="AMD EPYC", logical_cpus=2, usable_cpus=2, physical_cores=2, numa_nodes=1,
    isas=("AVX2",), torch_capability="AVX2",
)  # fmt: skip
CPU_16 = dataclasses.replace(CPU_2, logical_cpus=32, usable_cpus=16, physical_cores=16)
CPU_BF16 = dataclasses.replace(CPU_2, isas=("AVX2", "AVX-512", "AVX512-BF16"))


def process(**kw) -> ProcessState:
    base = dict(
        device="cpu", cuda_available=False, cuda_total_memory_bytes=None,
        anomaly_detection=False, grad_enabled=True, cudnn_benchmark=None,
        cudnn_deterministic=None, deterministic_algorithms=False, tf32_matmul=None,
        tf32_cudnn=None, intra_op_threads=2, inter_op_threads=2, usable_cpus=2,
        physical_cores=2,
    )  # fmt: skip
    base.update(kw)
    return ProcessState(**base)


def loader(**kw) -> LoaderFacts:
    base = dict(
        location="train.py:40", num_workers=0, pin_memory=False, persistent_workers=False,
        prefetch_factor=None, batch_size=32, drop_last=False, dataset_len=10000,
        dataset_type="FakeCIFAR", batches_seen=8, transform=["Resize", "ToTensor", "Normalize"],
    )  # fmt: skip
    base.update(kw)
    return LoaderFacts(**base)


def model(**kw) -> ModelFacts:
    base = dict(class_name="ResNet", location="train.py:50", parameters=11_000_000,
                conv_layers=20, norm_layers=20, device="cpu", dtype="float32")  # fmt: skip
    base.update(kw)
    return ModelFacts(**base)


def optimizer(class_name="SGD", fused=None, foreach=None) -> OptimizerFacts:
    return OptimizerFacts(class_name, "train.py:52", 11_000_000, fused, foreach)


def facts(*, loaders=None, proc=None, mdl="default", optimizers=None, calls=None) -> RunFacts:
    return RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=["SGD"],
        optimizer_steps_per_step=1.0, warmup=2, steps_requested=5, status="complete",
        steps=[StepRecord(i, 10.0, 1.0, in_window=i >= 2, rss_bytes=500 << 20)
               for i in range(7)],
        loaders=[loader()] if loaders is None else list(loaders),
        process=proc or process(),
        model=model() if mdl == "default" else mdl,
        optimizer_details=[optimizer()] if optimizers is None else list(optimizers),
        calls=calls or CallFacts(),
    )  # fmt: skip


def ctx(run_facts=None, *, cuda=False, capability=(9, 0), cpu=CPU_2, **kw) -> TuneContext:
    if run_facts is None:
        run_facts = facts(proc=process(device="cuda", cuda_available=True) if cuda else None)
    return TuneContext(
        facts=run_facts, cpu=cpu, device="cuda" if cuda else "cpu",
        cuda_capability=capability if cuda else None, cuda_bf16=cuda and capability >= (8, 0),
        torch_version=(2, 14), **kw,
    )  # fmt: skip


# Everything a knob or the runtime patches, put back after each in-process test.
def _patched():
    import torch
    import torch.nn.utils as nn_utils
    import torch.nn.utils.clip_grad as clip_grad
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from torchpace.capture.runtime import _torch_optimizers

    targets = [
        (DataLoader, "__init__"), (_BaseDataLoaderIter, "__next__"),
        (torch.optim.Optimizer, "__init__"), (torch.optim.Optimizer, "zero_grad"),
        (torch.nn.Module, "zero_grad"), (torch.Tensor, "to"), (torch.Tensor, "cuda"),
        (torch.autograd, "backward"), (torch, "set_anomaly_enabled"),
        (clip_grad, "clip_grad_norm_"), (clip_grad, "clip_grad_value_"),
        (nn_utils, "clip_grad_norm_"), (nn_utils, "clip_grad_value_"),
    ]  # fmt: skip
    targets += [(cls, "__init__") for cls in _torch_optimizers()]
    return targets


_MISSING = object()


def fresh_runtime():
    """A fresh, installed ChildRuntime (never the process's own ``runtime()``), for a
    fixture to yield from; what it and the knobs patched is put back afterwards."""
    import torch

    from torchpace.capture.runtime import ChildRuntime

    saved = [(o, a, vars(o).get(a, _MISSING)) for o, a in _patched()]
    state = (torch.get_num_threads(), torch.backends.cudnn.benchmark,
             torch.get_float32_matmul_precision(), torch.is_anomaly_enabled())  # fmt: skip
    rt = ChildRuntime()
    rt.install()
    try:
        yield rt
    finally:
        rt.stop_finding_models()
        for owner, attr, value in saved:
            if value is _MISSING:
                if attr in vars(owner):
                    delattr(owner, attr)
            else:
                setattr(owner, attr, value)
        torch.set_num_threads(state[0])
        torch.backends.cudnn.benchmark = state[1]
        torch.set_float32_matmul_precision(state[2])
        torch.autograd.set_detect_anomaly(state[3])
