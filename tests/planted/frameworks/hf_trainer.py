"""A small Hugging Face Trainer run on a tiny GPT-2 built from a config (no download).
Arguments: --steps N, --accumulate K, --out DIR."""

import argparse
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 128, (32,), generator=g)
        return {"input_ids": ids, "labels": ids}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--accumulate", type=int, default=1)
    args = p.parse_args()
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=args.accumulate,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
        )
        trainer = Trainer(model=model, args=training, train_dataset=Tokens())
        trainer.train()  # the user's line


if __name__ == "__main__":
    main()
