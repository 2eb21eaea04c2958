"""A Hugging Face Trainer script as people write it (lint fixture, never run): a tiny GPT-2
from a config (no download), a Trainer subclass with its own compute_loss, compute_metrics
on numpy arrays, TrainingArguments with evaluation, bf16 and workers. The Trainer runs the
loop, moves batches, zeroes gradients and steps. Two mistakes are planted, each MISTAKE."""

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 128, (32,), generator=g)
        return {"input_ids": ids, "labels": ids}


class WeightedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1].reshape(-1, outputs.logits.shape[-1])
        weights = torch.ones(outputs.logits.shape[-1]).to(logits.device)  # MISTAKE: CPU first
        loss = F.cross_entropy(logits, labels[:, 1:].reshape(-1), weight=weights)
        return (loss, outputs) if return_outputs else loss


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    predictions = np.argmax(logits, axis=-1)
    return {"accuracy": float((predictions[:, :-1] == labels[:, 1:]).mean())}


def main():
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        gradient_accumulation_steps=2,
        learning_rate=3e-4,
        num_train_epochs=1,
        eval_strategy="steps",
        eval_steps=50,
        logging_steps=10,
        bf16=torch.cuda.is_available(),
        dataloader_num_workers=2,
        dataloader_pin_memory=True,
        report_to="none",
    )
    trainer = WeightedTrainer(
        model=model,
        args=args,
        train_dataset=Tokens(2048),
        eval_dataset=Tokens(256),
        compute_metrics=compute_metrics,
    )
    trainer.train()
    print(trainer.evaluate())
    sweep = TrainingArguments(output_dir="sweep", max_steps=100)  # MISTAKE: no workers
    WeightedTrainer(model=model, args=sweep, train_dataset=Tokens(512)).train()


if __name__ == "__main__":
    main()
