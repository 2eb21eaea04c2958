"""A training loop whose bottleneck moves: a slow loader hides a slow optimizer step.

What it plants (for benchmarks/tune_noise.py, runner `moving_bottleneck`; issue 35):

- **The loader.** Each item waits on "disk" (``time.sleep(--load-ms / 1000)``, 0.5 ms by
  default: ~27 ms a batch of 40 with the sleep's own overshoot), read by ONE DataLoader
  worker. A sleeping worker takes no core, so more workers overlap the waits for free: the
  loader is the bottleneck, and workers fix it.
- **The step.** An MLP of many small layers (32 blocks of Linear, LayerNorm, GELU: 130
  parameter tensors) under ``AdamW`` built without ``fused``/``foreach``: on a CPU torch
  then updates parameter by parameter in a Python loop. ``fused=True`` (torchpace's knob
  ``fused-optimizer``) does the same update in one kernel.

Why one worker and not the main process: with ``num_workers=0`` on a CPU, loading and compute
run one after the other, so a faster step shows in proportion whatever the loader costs. One
worker overlaps them (on a GPU the device's asynchrony does the same with no worker at all):
the step is ``max(load, compute)`` and a faster compute step reads nothing while the loader
is slower, which is what issue 35 saw on a GPU (bf16 -0.6% behind a loader that was later
fixed, then +11.9%).

What a person fixes by hand, in this order: (1) the profile shows the step waiting on the
loader: 2 workers (the loader then keeps ahead of the step and the step is compute-bound);
(2) the profile now shows the optimizer's per-parameter loop: ``AdamW(..., fused=True)``.
Fixed in the other order, (2) alone reads nothing: it is hidden behind the loader.

Sized so that one worker's ~27 ms a batch is slower than the per-parameter step (~21 ms) and
two workers' ~14 ms faster than the fused one (~16.5 ms): the window is narrow (the loader
must sit between the slow step and twice the fast one), so ``--load-ms`` and the sizes move
together.

Hand figures (2-core Intel Xeon with AMX, shared, torch 2.14.1, 2026-11-27; the runs of
benchmarks/tune_noise.py's measurement, each configuration through ``torchpace run
--config``, 5 alternated rounds of ``--steps 60``; ms/step is the median over rounds of each
run's median step after 3 warm-up steps; "x" is speed, the median of the rounds' paired
ratios, with the rounds):

    as written (1 worker)          26.8 ms/step   4.84 s
    fused AdamW alone              26.8           4.92   1.006x plain (0.95-1.04): hidden
    2 workers                      21.6           4.68   1.27x plain (1.10-1.28)
    2 workers + fused AdamW        16.7           4.37   1.31x 2 workers (1.22-1.40)
    4 workers + fused AdamW        16.8           4.37   1.007x 2 workers + fused: 2 suffice
    2 workers + foreach AdamW      25.1           4.93   0.86x 2 workers: foreach loses here
    2 workers + fused + host-malloc  16.5         4.29   1.03x 2 workers + fused; 1.62x plain
    2 workers + fused + bf16       19.8           4.53   0.85x 2 workers + fused

The script's own count (one run each, ``--steps 200``): 1 worker 27.5 ms/step of which 4.4
ms waiting on the loader (the rest of the loader's time is hidden under the step); 2 workers
22.3 ms, 1.6 ms waiting (receiving the batch); 4 workers 23.0 ms, 1.7 ms; the main process
(``--workers 0``, load then compute one after the other) 46.8 ms, 25.9 ms waiting. In
tune_noise's one smoke round at ``--steps 200``: plain 26.5 ms/step and 8.8 s, 2 workers +
fused 17.2 ms and 7.0 s.

    python benchmarks/jobs/moving_bottleneck.py --steps 60
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
import torch.utils.data


class SlowDisk(torch.utils.data.Dataset):
    """Pre-made samples, each read after a wait on "disk" (a sleep: no core is busy)."""

    def __init__(self, size: int, width: int, load_ms: float):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, width, generator=g)
        self.y = torch.randint(0, 10, (size,), generator=g)
        self.wait_s = load_ms / 1000

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.wait_s)
        return self.x[i], self.y[i]


def make_model(width: int, depth: int) -> torch.nn.Module:
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps (60)")
    p.add_argument("--batch-size", type=int, default=40, help="(40)")
    p.add_argument("--load-ms", type=float, default=0.5, help="the disk wait per item (0.5)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers (1)")
    p.add_argument("--width", type=int, default=256, help="(256)")
    p.add_argument("--depth", type=int, default=32, help="blocks of Linear+LayerNorm+GELU (32)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.manual_seed(0)
    # enough items for one epoch of the whole run: no worker restart in the timed steps
    data = SlowDisk(args.steps * args.batch_size, args.width, args.load_ms)
    loader = torch.utils.data.DataLoader(
        data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers
    )
    model = make_model(args.width, args.depth)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # no fused/foreach: the plant

    steps, waits = [], []  # per step: the whole step, and the time spent in the loader's next
    start = time.perf_counter()
    batches = iter(loader)
    for step in range(args.steps):
        t0 = time.perf_counter()
        x, y = next(batches)
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        t2 = time.perf_counter()
        if step >= 3:  # past the first steps (workers starting, allocation)
            steps.append(t2 - t0)
            waits.append(t1 - t0)
    print(
        f"{args.steps} steps in {time.perf_counter() - start:.2f} s: "
        f"{1000 * statistics.median(steps):.1f} ms/step (median), of which "
        f"{1000 * statistics.median(waits):.1f} ms waiting on the loader; loss {loss.item():.3f}"
    )


if __name__ == "__main__":
    main()
