"""Planted: the script runs out of memory in the middle of a step.

``--fail-at N``: in step N's backward an OutOfMemoryError is raised by a gradient hook, as the
caching allocator raises it (the message is CUDA's, the sizes are this step's own);
``--cap-mib M`` instead caps the process's data segment at M MiB above what it uses at the
start (RLIMIT_DATA, resource.setrlimit, as ``ulimit -d`` would) and doubles the batch every
step until the CPU allocator fails for real; ``--cuda-fraction F`` does the same on the GPU,
capped at that fraction of the device's memory (torch.cuda.set_per_process_memory_fraction).
"""

import argparse
import resource

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--fail-at", type=int, default=None)
    p.add_argument("--cap-mib", type=int, default=None)
    p.add_argument("--cuda-fraction", type=float, default=None)
    args = p.parse_args()
    device = "cuda" if args.cuda_fraction is not None else "cpu"
    doubling = args.cap_mib is not None or args.cuda_fraction is not None
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)).to(device)  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = 1024 if doubling else 64
    if args.cuda_fraction is not None:
        torch.cuda.set_per_process_memory_fraction(args.cuda_fraction)
    if args.cap_mib is not None:
        with open("/proc/self/status") as f:
            used = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmData:"))
        limit = used + args.cap_mib * 2**20
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    for step in range(args.steps):
        x = torch.randn(batch, 256, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        if step == args.fail_at:  # the first ReLU's output fails its backward
            model[1].register_forward_hook(_fail_in_backward)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if doubling:
            batch *= 2  # the job that doubles its batch each step


def _fail_in_backward(module, args, output):
    output.register_hook(_out_of_memory)


def _out_of_memory(grad):
    raise torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {grad.nbytes * 64 / 2**30:.2f} GiB. GPU 0 has a "
        "total capacity of 79.11 GiB of which 512.00 MiB is free."
    )


if __name__ == "__main__":
    main()
