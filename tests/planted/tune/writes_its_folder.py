"""Planted for tune: a script that writes into its folder as training scripts do. Every step
it saves a checkpoint with torch.save (in place, and through a temporary file renamed over
the old one), appends to train.log, saves out/model.pt (making out/ if needed) and writes a
new log file named after its process; with --resume it starts from state.pt when that
exists. tune must leave the folder as it found it and start every trial from the same state.
"""

import argparse
import os

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--resume", action="store_true")
    p.add_argument("--until", type=int, default=30, help="the step to stop at")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if args.resume and os.path.exists("state.pt"):
        state = torch.load("state.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    print(f"resumed from step {start}", flush=True)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    os.makedirs("out", exist_ok=True)
    os.makedirs("logs", exist_ok=True)
    for step in range(start, args.until):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}
        torch.save(state, "state.pt")
        torch.save(state, "ckpt_0.pt.tmp")
        os.replace("ckpt_0.pt.tmp", "ckpt_0.pt")
        torch.save(model.state_dict(), os.path.join("out", "model.pt"))
        with open("train.log", "a") as log:
            log.write(f"step {step + 1} loss {loss.item():.4f}\n")
        with open(os.path.join("logs", f"run-{os.getpid()}.txt"), "a") as log:
            log.write(f"{step + 1}\n")


if __name__ == "__main__":
    main()
