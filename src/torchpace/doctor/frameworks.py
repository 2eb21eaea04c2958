"""Fixes in the language of the framework that runs the training step (Lightning,
Accelerate, the Hugging Face Trainer), where its users would make the change: the checks
write the plain-PyTorch fix, and this rewrites it for the framework the capture saw
(``RunFacts.framework``, from capture/frameworks.py; the names are torchpace/frameworks.py's)."""

from __future__ import annotations

import dataclasses

from torchpace.doctor.finding import Finding
from torchpace.frameworks import ACCELERATE, AMP_SETTING, HF_TRAINER, LIGHTNING

# code -> framework -> the fix as that framework's users write it
FIXES: dict[str, dict[str, str]] = {
    "TP101": {
        LIGHTNING: "in your LightningModule's (or DataModule's) train_dataloader: "
        "DataLoader(..., num_workers=N, persistent_workers=True, pin_memory=True on GPU); "
        "start with N = usable cores - 1 and measure (`torchpace tune`)",
        ACCELERATE: "DataLoader(..., num_workers=N, persistent_workers=True, pin_memory=True "
        "on GPU) where you build it, before accelerator.prepare(); start with N = usable "
        "cores - 1 and measure (`torchpace tune`)",
        HF_TRAINER: "TrainingArguments(dataloader_num_workers=N, "
        "dataloader_persistent_workers=True, dataloader_pin_memory=True); start with "
        "N = usable cores - 1 and measure (`torchpace tune`)",
    },
    "TP102": {
        LIGHTNING: "pin_memory=True in the DataLoader your train_dataloader returns "
        "(Lightning moves batches with non_blocking=True itself)",
        ACCELERATE: "DataLoader(..., pin_memory=True) before accelerator.prepare() (or "
        "Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True)))",
        HF_TRAINER: "TrainingArguments(dataloader_pin_memory=True)",
    },
    "TP307": AMP_SETTING,
    "TP308": {
        LIGHTNING: "Trainer(benchmark=True) when input shapes are fixed",
    },
    "TP310": {
        LIGHTNING: "model = torch.compile(model) on your LightningModule before trainer.fit "
        "(pays back its compile time within a few hundred steps when shapes are fixed)",
        ACCELERATE: 'Accelerator(dynamo_backend="inductor") (torch.compile through '
        "accelerate.prepare)",
        HF_TRAINER: "TrainingArguments(torch_compile=True)",
    },
}


def in_framework_terms(findings: list[Finding], framework: str | None) -> list[Finding]:
    """``findings`` with the fix rewritten for ``framework`` where it has its own way."""
    if framework is None:
        return findings
    out = []
    for f in findings:
        fix = FIXES.get(f.code, {}).get(framework)
        out.append(dataclasses.replace(f, fix=fix) if fix else f)
    return out
