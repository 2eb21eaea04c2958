"""Planted GPU loops, each with the fix the doctor should name switchable by a flag, so that a
test can A/B the fix by hand and hold the doctor's estimate to it. CUDA only.

    --case syncs       a stack of small layers whose step reads four values with .item()
                       and counts a mask with nonzero(): launch-bound, the host barely
                       ahead of the device. Fix (--fixed): the values stay on
                       the device, read every 50 steps. Its Adam is fused on a GPU:
                       the syncs are its only planted problem.
    --case floats      float32 sensor frames (not images: Gaussian noise, on no k/255 grid)
                       copied from pageable memory. Fix: pinned and non_blocking.
    --case optimizer   a deep stack of narrow layers trained with Adam (foreach, CUDA's
                       default): the optimizer step is launch-bound. Fix: fused=True.

--report FILE writes the mean ms/step over the steps after --skip (the script's own figure).
Meant for a GPU; on a machine without one it runs on the CPU (unpinned), for a smoke test.
"""

import argparse
import time

import torch
from torch import nn


def mlp_stack(depth: int, width: int) -> nn.Module:
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["syncs", "floats", "optimizer"], required=True)
    p.add_argument("--fixed", action="store_true")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--skip", type=int, default=30)
    p.add_argument("--report", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    if args.case == "syncs":
        model, batch, width = mlp_stack(12, 256).to(dev), 64, 256
    elif args.case == "floats":
        model, batch, width = mlp_stack(2, 1024).to(dev), 256, 1024
    else:
        model, batch, width = mlp_stack(48, 64).to(dev), 32, 64
    # one planted problem a case: the syncs case's Adam is fused on a GPU, or its foreach
    # update over 12 layers is launch-bound too (TP313, 28% of the step on an H100) and
    # ranks above the syncs that the case is about
    fused = (args.case == "optimizer" and args.fixed) or (args.case == "syncs" and cuda)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **({"fused": True} if fused else {}))
    pinned = args.case == "floats" and args.fixed and cuda
    if args.case == "floats":
        # 48 MiB of float32 noise per step: frames of a simulated sensor, not images
        host = [torch.randn(batch, 48, width) for _ in range(4)]
        host = [h.pin_memory() for h in host] if pinned else host
    else:
        host = [torch.randn(batch, width) for _ in range(4)]
    y = torch.randint(0, 10, (batch,), device=dev)
    running = torch.zeros(4, device=dev)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        x = host[step % len(host)]
        if args.case == "floats":
            x = x.to(dev, non_blocking=pinned).mean(dim=1)
        else:
            x = x.to(dev, non_blocking=True)
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.case == "syncs":
            stats = torch.stack([loss.detach(), out.max(), out.min(), out.std()])
            if args.fixed:
                running += stats
                if step % 50 == 49:
                    _ = running.tolist()
            else:
                _ = [v.item() for v in stats]  # four syncs
                _ = (out > 0).nonzero().shape[0]  # a fifth
        if step == args.steps - 1 and cuda:
            torch.cuda.synchronize()  # the last step's time includes the queue's tail
        times.append(time.perf_counter() - t0)
    if args.report:
        kept = times[args.skip :]
        with open(args.report, "w") as f:
            f.write(f"{1000 * sum(kept) / len(kept):.4f}\n")


if __name__ == "__main__":
    main()
