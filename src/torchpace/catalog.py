"""The problem codes shared by doctor findings, lint rules and tune knobs.

One code names one problem, wherever torchpace sees it: the doctor in a profile, the linter
in source. The first digit is the family (see docs/ARCHITECTURE.md):
1 data loading and host<->device, 2 CPU<->GPU syncs, 3 compute and precision, 4 memory,
5 distributed, 6 process environment, 9 torchpace itself.

Every code has one docs page, ``docs/codes/<CODE>.md``; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass

FAMILIES = {
    "1": "data loading and host-device copies",
    "2": "CPU-GPU synchronisation",
    "3": "compute and precision",
    "4": "memory",
    "5": "distributed",
    "6": "process environment",
    "9": "torchpace itself",
}


@dataclass(frozen=True)
class Code:
    code: str
    name: str  # kebab-case, describes the pattern (lint) or the problem (doctor)
    title: str
    practices: tuple[str, ...]  # ids in PRACTICES.md, e.g. ("P01",)
    seen_by: tuple[str, ...]  # "doctor", "lint"

    @property
    def family(self) -> str:
        return FAMILIES[self.code[2]]

    @property
    def doc_path(self) -> str:
        return f"docs/codes/{self.code}.md"


_CODES = [
    # 1: data loading and host<->device
    Code(
        "TP101",
        "dataloader-without-workers",
        "Data loaded in the main process",
        ("P01",),
        ("doctor", "lint"),
    ),
    Code(
        "TP102",
        "pageable-host-to-device-copy",
        "Batches copied from pageable memory",
        ("P02",),
        ("doctor", "lint"),
    ),
    Code(
        "TP103",
        "blocking-host-to-device-copy",
        "Host-to-device copy without non_blocking",
        ("P03",),
        ("doctor", "lint"),
    ),
    Code(
        "TP104", "device-underfilled", "Batch too small to fill the device", ("P05",), ("doctor",)
    ),
    Code(
        "TP105",
        "tensor-created-then-moved",
        "Tensor created on the CPU and moved at once",
        ("P06",),
        ("lint",),
    ),
    Code(
        "TP106",
        "float-input-transfer",
        "Inputs converted to float before the copy",
        ("P04",),
        ("doctor",),
    ),
    Code(
        "TP107",
        "workers-crowd-cores",
        "DataLoader workers crowd the cores the step computes on",
        ("P01", "P24"),
        ("doctor",),
    ),
    # 2: syncs
    Code(
        "TP201",
        "sync-in-training-loop",
        "CPU-GPU sync inside the training step",
        ("P18",),
        ("doctor", "lint"),
    ),
    # 3: compute and precision
    Code(
        "TP301",
        "grad-enabled-in-eval",
        "Evaluation runs with autograd on",
        ("P07",),
        ("doctor", "lint"),
    ),
    Code(
        "TP302",
        "conv-bias-before-batchnorm",
        "Conv bias followed by BatchNorm",
        ("P08",),
        ("lint",),
    ),
    Code(
        "TP303",
        "zero-grad-set-to-none-false",
        "Gradients zeroed instead of set to None",
        ("P09",),
        ("lint",),
    ),
    Code(
        "TP304",
        "debug-api-in-training",
        "Debug API left on in training",
        ("P13",),
        ("doctor", "lint"),
    ),
    Code(
        "TP305",
        "clip-before-unscale",
        "Gradients clipped before GradScaler.unscale_",
        ("P15",),
        ("lint",),
    ),
    Code("TP306", "deprecated-cuda-amp", "Deprecated torch.cuda.amp API", ("P19",), ("lint",)),
    Code(
        "TP307",
        "fp32-matmul-on-tensor-cores",
        "Matmul/conv in fp32 on a tensor-core GPU",
        ("P19",),
        ("doctor",),
    ),
    Code(
        "TP308",
        "cudnn-benchmark-off",
        "cudnn.benchmark off for fixed-shape convs",
        ("P17",),
        ("doctor",),
    ),
    Code(
        "TP309",
        "jit-where-compile-serves",
        "torch.jit where torch.compile serves",
        ("P21",),
        ("lint",),
    ),
    Code(
        "TP310",
        "launch-bound-eager",
        "Many tiny kernels: launch overhead dominates",
        ("P21", "P10"),
        ("doctor",),
    ),
    Code(
        "TP311",
        "fp32-where-bf16-serves",
        "TF32/fp32 training on a GPU that runs bf16 at twice the rate",
        ("P19",),
        ("doctor",),
    ),
    Code(
        "TP312",
        "layout-transposes",
        "NCHW convs: cuDNN transposes every tensor to NHWC and back",
        ("P11",),
        ("doctor",),
    ),
    Code(
        "TP313",
        "launch-bound-optimizer",
        "Optimizer step bound by kernel launches: not fused",
        ("P10",),
        ("doctor",),
    ),
    Code(
        "TP314",
        "fp32-on-bf16-cpu",
        "fp32 training on a CPU that computes bf16 natively",
        ("P19",),
        ("doctor",),
    ),
    # 4: memory
    Code(
        "TP401",
        "tensor-accumulated-across-steps",
        "Memory grows across steps",
        ("P22", "P37"),
        ("doctor", "lint"),
    ),
    Code(
        "TP402",
        "empty-cache-in-loop",
        "torch.cuda.empty_cache() inside a loop",
        ("P22",),
        ("doctor", "lint"),
    ),
    Code(
        "TP403",
        "low-memory-headroom",
        "Peak memory close to device capacity",
        ("P37",),
        ("doctor",),
    ),
    Code(
        "TP404",
        "out-of-memory",
        "The script ran out of memory",
        ("P37", "P14", "P12", "P19"),
        ("doctor",),
    ),
    Code(
        "TP405",
        "activations-dominate-memory",
        "Activations fill memory: checkpointing frees most of it",
        ("P12", "P14"),
        ("doctor",),
    ),
    Code(
        "TP406",
        "variable-input-shapes",
        "Input shapes change from step to step",
        ("P20",),
        ("doctor",),
    ),
    Code(
        "TP407",
        "allocator-fragmentation",
        "CUDA memory fragmented: reserved far above allocated",
        ("P37",),
        ("doctor",),
    ),
    # 5: distributed
    Code(
        "TP501",
        "data-parallel",
        "nn.DataParallel instead of DistributedDataParallel",
        ("P28",),
        ("doctor", "lint"),
    ),
    Code(
        "TP502",
        "accumulation-without-no-sync",
        "Gradient accumulation under DDP without no_sync",
        ("P29",),
        ("doctor", "lint"),
    ),
    Code(
        "TP503",
        "find-unused-parameters",
        "DDP find_unused_parameters=True",
        ("P30",),
        ("doctor", "lint"),
    ),
    Code(
        "TP504",
        "syncbn-after-ddp-wrap",
        "SyncBatchNorm conversion after the DDP wrap",
        ("P32",),
        ("lint",),
    ),
    Code(
        "TP505",
        "straggler-rank",
        "One rank does more work per step and the others wait for it",
        ("P31",),
        ("doctor",),
    ),
    Code(
        "TP506",
        "communication-bound",
        "Most GPU time in collectives, little of it overlapped with compute",
        ("P29", "P30"),
        ("doctor",),
    ),
    Code(
        "TP507",
        "host-blocked-behind-collective",
        "The host waits in a sync or copy queued behind a collective",
        ("P18", "P03"),
        ("doctor",),
    ),
    # 6: process environment
    Code(
        "TP601", "thread-oversubscription", "More compute threads than cores", ("P24",), ("doctor",)
    ),
    # 9: torchpace itself
    Code("TP901", "no-step-captured", "No training step was seen", (), ("doctor",)),
    Code(
        "TP902",
        "source-too-deeply-nested",
        "Source nested too deeply to lint; the file was skipped",
        (),
        ("lint",),
    ),
]

CODES: dict[str, Code] = {c.code: c for c in _CODES}


def get(code: str) -> Code:
    """The catalog entry for ``code``; a clear error for a code that does not exist."""
    try:
        return CODES[code.upper()]
    except KeyError:
        known = ", ".join(sorted(CODES))
        raise KeyError(f"unknown torchpace code {code!r}; known codes: {known}") from None
