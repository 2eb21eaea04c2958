"""An Accelerate training script as people write it (lint fixture, never run): prepare on
the model, optimizer, loaders and scheduler; accumulate; accelerator.backward;
clip_grad_norm_ through the accelerator; periodic logging; evaluation with
gather_for_metrics. Accelerate moves batches, handles no_sync under accumulation and the
fp16 loss scale. Three mistakes are planted, each marked MISTAKE."""

import argparse

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_loaders(batch_size):
    x = torch.randn(4096, 128)
    y = torch.randint(0, 10, (4096,))
    train = DataLoader(
        TensorDataset(x[:3584], y[:3584]),
        batch_size=batch_size,
        shuffle=True,
        num_workers=2,
        pin_memory=True,
    )
    evaluation = DataLoader(TensorDataset(x[3584:], y[3584:]), batch_size=256, num_workers=2)
    return train, evaluation


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    set_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=4, mixed_precision="fp16")
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100)
    train_dl, eval_dl = build_loaders(args.batch_size)
    model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, scheduler
    )
    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for step, (x, y) in enumerate(train_dl):
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            running += loss.detach().float()
            if step % 50 == 0:
                accelerator.print(f"epoch {epoch} step {step}: loss {loss.item():.3f}")
            accelerator.log({"loss": loss.item()}, step=step)  # MISTAKE: a sync every step
        model.eval()
        correct = total = 0
        for x, y in eval_dl:
            with torch.no_grad():
                logits = model(x)
            preds, refs = accelerator.gather_for_metrics((logits.argmax(dim=-1), y))
            correct += (preds == refs).sum().item()
            total += refs.numel()
        accelerator.print(f"epoch {epoch}: accuracy {correct / total:.3f}, loss {running}")
    accelerator.wait_for_everyone()
    accelerator.save_model(model, "out")


def finetune(model, loader, optimizer):
    """A second loop, with the clip done by hand."""
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.autocast():
            loss = F.cross_entropy(model(x), y)
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # MISTAKE: scaled gradients
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # MISTAKE: zeros written into every gradient


if __name__ == "__main__":
    main()
