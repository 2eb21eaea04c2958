"""Which training framework a file drives, for the rules whose facts or advice differ there.

Lightning, Accelerate and the Hugging Face Trainer run parts of the training step that a
plain loop spells out: Lightning calls the user's ``training_step`` once per batch and does
the backward and the optimizer step itself; the HF Trainer calls ``compute_loss``; both move
batches to the device, so a file with no ``.to(device)`` still trains on a GPU. The advice
differs too: AMP is ``Trainer(precision="bf16-mixed")``, not autocast by hand.

The names are torchpace/frameworks.py's, as the capture writes them in run_facts.json
(capture/frameworks.py) and the doctor rewrites its fixes (doctor/frameworks.py).
"""

from __future__ import annotations

import libcst as cst

from torchpace.frameworks import ACCELERATE, AMP_SETTING, HF_TRAINER, LIGHTNING
from torchpace.lint.index import FileIndex, Function
from torchpace.lint.names import keyword

# Every public path of the classes, for `lightning` (2.x), `lightning.pytorch` and the older
# `pytorch_lightning` package.
_LIGHTNING_ROOTS = ("lightning", "lightning.pytorch", "pytorch_lightning")
LIGHTNING_MODULE = {
    f"{root}.{path}"
    for root in _LIGHTNING_ROOTS
    for path in ("LightningModule", "core.LightningModule", "core.module.LightningModule")
}
LIGHTNING_TRAINER = {
    f"{root}.{path}" for root in _LIGHTNING_ROOTS for path in ("Trainer", "trainer.Trainer")
}
ACCELERATOR = {"accelerate.Accelerator", "accelerate.accelerator.Accelerator"}
# Hugging Face's Trainer builds its DataLoader from these (dataloader_num_workers, ...)
HF_TRAINING_ARGUMENTS = {
    "transformers.TrainingArguments",
    "transformers.training_args.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
}
HF_TRAINERS = {
    "transformers.Trainer",
    "transformers.trainer.Trainer",
    "transformers.Seq2SeqTrainer",
    "transformers.trainer_seq2seq.Seq2SeqTrainer",
}

# The methods a framework calls once per training batch, by the class they override.
_STEP_METHODS = {LIGHTNING: ("training_step",), HF_TRAINER: ("compute_loss", "training_step")}


def _subclasses(index: FileIndex, bases: set[str]) -> set[str]:
    """The classes of this file that derive from one of ``bases``, directly or through
    another class of the file (`class Base(L.LightningModule)`, `class Net(Base)`)."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, parents in index.class_bases.items():
            if name not in found and any(p in bases or p in found for p in parents):
                found.add(name)
                changed = True
    return found


def framework_of(index: FileIndex) -> str | None:
    """The framework that drives this file's training, if any. A file that calls
    `Accelerator()` runs its own loop through Accelerate, even with a transformers model;
    transformers alone (a model, a tokenizer) is not the Trainer."""
    cache = index.__dict__.get("_framework", False)
    if cache is not False:
        return cache
    names = {call.name for call in index.calls}
    if names & ACCELERATOR:
        found = ACCELERATE
    elif _subclasses(index, LIGHTNING_MODULE) or names & LIGHTNING_TRAINER:
        found = LIGHTNING
    elif _subclasses(index, HF_TRAINERS) or names & (HF_TRAINERS | HF_TRAINING_ARGUMENTS):
        found = HF_TRAINER
    else:
        found = None
    index.__dict__["_framework"] = found
    return found


def step_methods(index: FileIndex) -> list[Function]:
    """The user's methods the framework calls once per training batch: a LightningModule's
    `training_step`, a Trainer subclass's `compute_loss` / `training_step`."""
    methods = []
    for framework, bases in ((LIGHTNING, LIGHTNING_MODULE), (HF_TRAINER, HF_TRAINERS)):
        for cls in _subclasses(index, bases):
            for name in _STEP_METHODS[framework]:
                methods += index.class_methods(cls, name)
    return methods


def _string(arg: cst.Arg | None) -> str | None:
    if arg is not None and isinstance(arg.value, cst.SimpleString):
        return arg.value.evaluated_value
    return None


def _pinned_to_cpu(call) -> bool:
    """`Trainer(accelerator="cpu")`, `Accelerator(cpu=True)`,
    `TrainingArguments(use_cpu=True)` (or its older `no_cuda=True`)."""
    if call.name in LIGHTNING_TRAINER:
        return _string(keyword(call.node, "accelerator")) == "cpu"
    flags = ("cpu",) if call.name in ACCELERATOR else ("use_cpu", "no_cuda")
    return any(
        (arg := keyword(call.node, flag)) is not None
        and isinstance(arg.value, cst.Name)
        and arg.value.value == "True"
        for flag in flags
    )


def places_on_a_device(index: FileIndex) -> bool:
    """Whether a framework may put this file's model and batches on a GPU: one that builds a
    Trainer / Accelerator / TrainingArguments not pinned to the CPU. The file itself then
    need not say `.to(device)` for its tensors to live on the GPU."""
    drivers = LIGHTNING_TRAINER | ACCELERATOR | HF_TRAINING_ARGUMENTS
    return any(call.name in drivers and not _pinned_to_cpu(call) for call in index.calls)


def mixed_precision_of(index: FileIndex) -> str | None:
    """`Accelerator(mixed_precision="fp16")`: "fp16"; None when no call sets it as a literal
    (the default, or a value from the command line / accelerate config)."""
    for call in index.calls:
        if call.name in ACCELERATOR:
            value = _string(keyword(call.node, "mixed_precision"))
            if value is not None:
                return value
    return None


# A rule's advice as that framework's users make the change (docs/frameworks.md).
AMP_BY_FRAMEWORK = {
    LIGHTNING: f"let Lightning run it: {AMP_SETTING[LIGHTNING]}, no autocast or GradScaler "
    "in the LightningModule",
    ACCELERATE: f"let Accelerate run it: {AMP_SETTING[ACCELERATE]}; accelerator.autocast() "
    "for code outside the prepared model",
    HF_TRAINER: f"let the Trainer run it: {AMP_SETTING[HF_TRAINER]}",
}
CLIP_SETTING = {
    LIGHTNING: "let Lightning clip after unscaling: Trainer(gradient_clip_val=...), or "
    "self.clip_gradients(...) with manual optimization",
    ACCELERATE: "clip with accelerator.clip_grad_norm_(...), which unscales the gradients first",
    HF_TRAINER: "let the Trainer clip after unscaling: TrainingArguments(max_grad_norm=...)",
}
LOG_TENSOR = {
    LIGHTNING: "pass the tensor to self.log: Lightning reduces it without waiting",
}
