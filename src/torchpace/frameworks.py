"""The training frameworks torchpace speaks to (Lightning, Accelerate, the Hugging Face
Trainer), named once: the capture records which one drove the steps (capture/frameworks.py),
lint reads which one a file drives (lint/frameworks.py), the doctor writes its fixes in its
terms (doctor/frameworks.py). Standard library only: it sits on the lowest floor.

AMP is the advice all three give differently from plain PyTorch: a setting of the framework,
not autocast by hand; it is written here once, for the doctor's TP307 and lint's TP306.
"""

from __future__ import annotations

LIGHTNING = "lightning"
ACCELERATE = "accelerate"
HF_TRAINER = "hf-trainer"

# How each framework's users switch on mixed precision (docs/frameworks.md).
AMP_SETTING = {
    LIGHTNING: 'Trainer(precision="bf16-mixed") (or "16-mixed" on GPUs without bf16)',
    ACCELERATE: 'Accelerator(mixed_precision="bf16") (or "fp16" on GPUs without bf16)',
    HF_TRAINER: "TrainingArguments(bf16=True) (or fp16=True on GPUs without bf16)",
}
