"""TP101 dataloader-without-workers (P01).

Also where a framework builds the loader from the user's settings: Hugging Face's
``TrainingArguments`` without ``dataloader_num_workers`` (the Trainer's loader then loads in
the main process). Lightning and Accelerate loaders are the user's own ``DataLoader`` calls
(``train_dataloader``, ``accelerator.prepare``): the plain rule sees them."""

from __future__ import annotations

from torchpace.lint.frameworks import HF_TRAINING_ARGUMENTS, LIGHTNING, framework_of
from torchpace.lint.names import argument, is_zero
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DATALOADER

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
NUM_WORKERS_POSITION = 5
# The LightningModule / LightningDataModule hooks whose DataLoader Lightning iterates.
LIGHTNING_LOADER_HOOKS = {
    "train_dataloader",
    "val_dataloader",
    "test_dataloader",
    "predict_dataloader",
}
KEYWORD_ONLY = 10**6  # TrainingArguments has over a hundred parameters: keywords in practice


class DataLoaderWithoutWorkers(Rule):
    """## What it does

    Flags a `DataLoader(...)` whose `num_workers` is `0` or not given (the default is 0), so
    every batch is loaded and transformed in the training process itself.

    ## Why it matters

    With `num_workers=0` the GPU waits while the main process decodes and augments each batch.
    In article 002 (ResNet-18, FakeCIFAR, `Resize(224)`) moving loading to worker processes was
    the first and one of the largest gains of the optimisation ladder. The right number of
    workers is measured (bounded by cores and memory: each worker holds a copy of the dataset
    object), not the folk rule "4 × GPUs"; `torchpace tune` measures it.

    ## Example

    ```python
    loader = DataLoader(train_set, batch_size=32, shuffle=True)
    ```

    ## Use instead

    ```python
    loader = DataLoader(train_set, batch_size=32, shuffle=True,
                        num_workers=4, persistent_workers=True)
    ```

    ## Fix safety

    No automatic fix: the worker count depends on the machine and the dataset (workers copy the
    dataset; lambdas in a dataset do not pickle on spawn). The linter stays silent when
    `num_workers` is not known statically (a variable, `**kwargs`).
    """

    code = "TP101"
    message = "DataLoader loads every batch in the main process"
    VALID = (
        "from torch.utils.data import DataLoader\nDataLoader(ds, batch_size=8, num_workers=4)",
        "import torch\ntorch.utils.data.DataLoader(ds, num_workers=args.workers)",
        "from torch.utils.data import DataLoader\nDataLoader(ds, **loader_kwargs)",
        "class DataLoader: ...\nDataLoader(ds)",
        "from transformers import TrainingArguments\n"
        "TrainingArguments('out', dataloader_num_workers=4)",
    )
    INVALID = (
        "from torch.utils.data import DataLoader\nDataLoader(ds, batch_size=8)",
        "import torch.utils.data as tud\ntud.DataLoader(ds, num_workers=0)",
        "from transformers import TrainingArguments\nTrainingArguments('out', max_steps=10)",
        "import transformers\ntransformers.TrainingArguments('o', dataloader_num_workers=0)",
    )

    def check(self, index):
        lightning = framework_of(index) == LIGHTNING
        for call in index.calls:
            if call.name in HF_TRAINING_ARGUMENTS:
                yield from self._trainer_arguments(call)
                continue
            if call.name not in DATALOADER:
                continue
            known, value = argument(call.node, "num_workers", NUM_WORKERS_POSITION)
            if not known:
                continue
            where = ""
            if lightning and call.function.name in LIGHTNING_LOADER_HOOKS:
                where = (
                    f": set num_workers=N here, in {call.function.name}, which Lightning iterates"
                )
            if value is None:
                yield self.finding(
                    call.node, f"{self.message} (num_workers is not set; the default is 0){where}"
                )
            elif is_zero(value):
                yield self.finding(call.node, f"{self.message} (num_workers=0){where}")

    def _trainer_arguments(self, call):
        known, value = argument(call.node, "dataloader_num_workers", KEYWORD_ONLY)
        where = "the Trainer's DataLoader loads every batch in the main process"
        if known and value is None:
            yield self.finding(
                call.node,
                f"{where} (TrainingArguments: dataloader_num_workers is not set; the default "
                "is 0): add dataloader_num_workers=N",
            )
        elif known and is_zero(value):
            yield self.finding(call.node, f"{where} (dataloader_num_workers=0)")
