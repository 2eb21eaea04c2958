"""How fast `torchpace lint` is on a large tree: lines per second on a generated 100k-line
tree of training code, linted with every core (target: under 30 s on 2 cores).

    python benchmarks/lint_speed.py [--lines 100000] [--jobs N] [--compare]

--compare also lints the same tree with one worker and prints the speed-up, side by side.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from torchpace.lint.rules import RULES
from torchpace.lint.runner import Task, run_tasks

TARGET_SECONDS = 30.0  # the target for 100k lines on a 2-core machine
LINES_PER_FILE = 500  # a long-ish training script; real repositories mix small and large
FINDINGS_EVERY = 7  # blocks: about one finding per 250 lines, denser than real code

# One block of realistic training code: data, model, loop, evaluation, with the patterns the
# rules look for, so that rules do real work rather than return at once. One block in
# FINDINGS_EVERY holds two findings (a conv bias before BatchNorm, a .item() every step),
# the others the corrected forms; --dense puts findings in every block (the worst case:
# positions are computed for every statement that holds a finding).
BLOCK = """

class Net{i}(nn.Module):
    def __init__(self, width={i}):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1{conv_bias}),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean((2, 3)))


def make_loader_{i}(dataset, cfg):
    return DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.workers)


def train_{i}(model, dataset, optimizer, scaler, device, epochs=3):
    loader = DataLoader(dataset, batch_size=64, pin_memory=True, num_workers=4)
    total = 0.0
    for epoch in range(epochs):
        model.train()
        for step, (inputs, labels) in enumerate(loader):
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.float16):
                outputs = model(inputs)
                loss = F.cross_entropy(outputs, labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            total += loss{read}
            if step % 100 == 0:
                print(f"epoch {{epoch}} step {{step}} loss {{total / (step + 1):.4f}}")
    return total


@torch.no_grad()
def evaluate_{i}(model, loader, device):
    model.eval()
    correct = seen = 0
    for inputs, labels in loader:
        outputs = model(inputs.to(device))
        correct += (outputs.argmax(1) == labels.to(device)).sum()
        seen += labels.numel()
    return correct / max(seen, 1)
"""
HEADER = '''"""Generated training module {n} for the lint speed benchmark."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
'''


def block(i: int, dense: bool) -> str:
    findings = dense or i % FINDINGS_EVERY == 0
    return BLOCK.format(
        i=i,
        conv_bias="" if findings else ", bias=False",
        read=".item()" if findings else ".detach()",
    )


def generate_tree(root: Path, total_lines: int, dense: bool = False) -> tuple[int, int]:
    """Write about ``total_lines`` lines of Python under ``root``; returns (files, lines)."""
    files = lines = 0
    package = root / "pkg"
    while lines < total_lines:
        folder = package / f"sub{files // 20}"
        folder.mkdir(parents=True, exist_ok=True)
        parts = [HEADER.format(n=files)]
        i = 0
        while sum(p.count("\n") for p in parts) < LINES_PER_FILE:
            parts.append(block(i, dense))
            i += 1
        text = "".join(parts)
        (folder / f"train_{files:04d}.py").write_text(text)
        files += 1
        lines += text.count("\n")
    return files, lines


def lint_tree(root: Path, jobs: int) -> tuple[float, int]:
    paths = sorted(str(p) for p in root.rglob("*.py"))
    codes = tuple(r.code for r in RULES)
    tasks = [Task(p, codes, fix=None, write=False) for p in paths]
    start = time.perf_counter()
    results = run_tasks(tasks, jobs)
    seconds = time.perf_counter() - start
    errors = [r.error for r in results if r.error]
    if errors:
        raise SystemExit(f"lint failed on generated files: {errors[:3]}")
    return seconds, sum(len(r.violations) for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compare", action="store_true", help="also time one worker")
    parser.add_argument("--dense", action="store_true", help="findings in every block")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torchpace-lint-speed-") as tmp:
        files, lines = generate_tree(Path(tmp), args.lines, args.dense)
        print(f"tree: {files} files, {lines} lines; {len(RULES)} rules")
        seconds, findings = lint_tree(Path(tmp), args.jobs)
        verdict = "within" if seconds < TARGET_SECONDS else "OVER"
        print(
            f"{args.jobs} workers: {seconds:.1f} s, {lines / seconds:,.0f} lines/s, "
            f"{findings} findings ({verdict} the {TARGET_SECONDS:.0f} s target)"
        )
        if args.compare:
            serial, _ = lint_tree(Path(tmp), 1)
            print(
                f"1 worker:  {serial:.1f} s, {lines / serial:,.0f} lines/s; "
                f"speed-up with {args.jobs} workers: {serial / seconds:.2f}x"
            )


if __name__ == "__main__":
    main()
