"""A small Lightning script as a new user writes it: a LightningModule whose
train_dataloader builds a DataLoader without workers over a slow dataset, Trainer.fit.
Arguments: --steps N (optimizer steps), --accumulate K, --precision P."""

import argparse
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)  # decoding an image, say
        g = torch.Generator().manual_seed(i)
        return torch.randn(128, generator=g), int(i % 10)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(SlowDataset(), batch_size=32, shuffle=True)  # the user's line


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--precision", default="32-true")
    args = p.parse_args()
    trainer = L.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        devices=1,
        accumulate_grad_batches=args.accumulate,
        precision=args.precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Classifier())


if __name__ == "__main__":
    main()
