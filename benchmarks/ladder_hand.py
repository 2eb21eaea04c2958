"""The hand ladder: examples/fake_cifar_resnet.py's loop optimized by hand, one step of
article 002 at a time, as the article does it. Run by benchmarks/ladder.py, one fresh
process per rung; each rung adds its step to every applicable step before it:

    0  as written (FakeCIFAR PIL images, Resize + ToTensor + Normalize, resnet18, SGD)
    1  + DataLoader workers (one per usable core), persistent
    2  + pin_memory and .to(non_blocking=True)                     (CUDA only)
    3  + batch size x4                              (only with --allow-batch-size)
    4  + uint8 over the bus; float and normalize on the device
    5  + optimizer.zero_grad(set_to_none=True)     (torch >= 2.0: already the default)
    6  + AMP: bf16 autocast where the device runs bf16 natively, fp16 + GradScaler on
         older CUDA GPUs; not applicable on a CPU without native bf16
    7  + torch.compile (tried on a CPU too: it may be slower there, and is reported so)
    8  + channels_last + cudnn.benchmark                            (CUDA only)
    9  + resize on the device from the 32 px uint8 images: no per-image PIL work left

    python benchmarks/ladder_hand.py --plan                 # the rungs here, as JSON
    python benchmarks/ladder_hand.py --rung 4 [--image-size 32] [--steps 10] ...
    python benchmarks/ladder_hand.py --ceiling --settings '{"amp": "bf16"}' ...

A rung times W warm-up and K measured steps the way `torchpace tune` times a trial: a
step ends when optimizer.step() returns, its time is the interval since the previous
step's end (data loading included), nothing is synchronised inside the loop, and the
losses are read after the timing. The last line printed is ``RESULT {json}``.

--ceiling is the model's own speed: the same model and optimizer on a synthetic batch
already on the device, no data loading at all, with the model-side settings given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

RESULT_PREFIX = "RESULT "
ARTICLE_SIZE = 32  # FakeCIFAR's images are 32x32x3 uint8
BATCH_FACTOR = 4  # rung 3


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def use_this_checkout() -> None:
    """torchpace from this checkout's src/, before any installed copy."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    if src not in sys.path:
        sys.path.insert(0, src)


# --- which rungs apply here ---------------------------------------------------------------
def machine() -> dict:
    """What decides the plan: the device, its bf16 support, torch's version."""
    import torch

    use_this_checkout()
    from torchpace.env.cpu import read_cpu_facts

    cuda = torch.cuda.is_available()
    facts = {
        "device": "cuda" if cuda else "cpu",
        "torch": torch.__version__,
        "cores": usable_cores(),
        "cpu_bf16_native": read_cpu_facts().bf16_native,
        "cuda_name": None,
        "cuda_capability": None,
        "cuda_bf16": False,
    }
    if cuda:
        cap = torch.cuda.get_device_capability()
        facts.update(
            cuda_name=torch.cuda.get_device_name(),
            cuda_capability=list(cap),
            cuda_bf16=cap >= (8, 0) and torch.cuda.is_bf16_supported(),
        )
    return facts


def amp_dtype(m: dict) -> tuple[str | None, str]:
    """("bf16" | "fp16" | None, why) for rung 6 on this machine."""
    if m["device"] == "cuda":
        if m["cuda_bf16"]:
            return "bf16", "bf16 autocast (the GPU runs bf16 on tensor cores)"
        return "fp16", "fp16 autocast + GradScaler (the GPU has no fast bf16)"
    if m["cpu_bf16_native"]:
        return "bf16", "bf16 autocast on the CPU (native bf16 instructions)"
    if m["cpu_bf16_native"] is None:
        return None, "not applicable: the CPU's bf16 support is unknown (flags unreadable)"
    return None, "not applicable: no native bf16 (emulated bf16 is far slower than fp32)"


def plan(m: dict, allow_batch_size: bool) -> list[dict]:
    """Every rung: {rung, label, status: "run" | "not-applicable" | "no-op", reason}."""
    cuda = m["device"] == "cuda"
    torch2 = int(m["torch"].split(".")[0]) >= 2
    amp, amp_why = amp_dtype(m)
    cuda_only = "not applicable: needs CUDA (this run is on the CPU)"
    rows = [
        (0, "as written", True, "the example's loop, unmodified"),
        (1, f"+ num_workers={m['cores']}, persistent", True, "one worker per usable core"),
        (2, "+ pin_memory, non_blocking", cuda, "" if cuda else cuda_only),
        (3, f"+ batch size x{BATCH_FACTOR}", allow_batch_size,
         "changes training (learning rate)" if allow_batch_size
         else "not applicable: changes training; only with --allow-batch-size"),
        (4, "+ uint8 over the bus, normalize on device", True, "the article's step 4"),
        (5, "+ zero_grad(set_to_none=True)", not torch2,
         "no-op: torch >= 2.0's zero_grad() already sets grads to None" if torch2 else ""),
        (6, f"+ AMP {amp}" if amp else "+ AMP", amp is not None, amp_why),
        (7, "+ torch.compile", True,
         "" if cuda else "on the CPU: tried and reported; it may be slower than eager"),
        (8, "+ channels_last, cudnn.benchmark", cuda, "" if cuda else cuda_only),
        (9, "+ resize on device from 32 px uint8", True, "no per-image PIL work left"),
    ]  # fmt: skip
    out = []
    for n, label, applies, reason in rows:
        status = "run" if applies else ("no-op" if n == 5 else "not-applicable")
        out.append({"rung": n, "label": label, "status": status, "reason": reason})
    return out


# --- one rung -----------------------------------------------------------------------------
def build_steps(rung: int, rows: list[dict], without: set[int]) -> set[int]:
    """The steps a rung runs with: itself and every applicable step below it."""
    return {r["rung"] for r in rows if r["rung"] <= rung and r["status"] == "run"} - without


def run_rung(args, m: dict, rows: list[dict]) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch.utils.data
    import torchvision.models
    import torchvision.transforms as T
    from PIL import Image
    from torchvision.datasets.vision import VisionDataset

    steps = build_steps(args.rung, rows, set(args.without))
    device = torch.device("cuda:0" if m["device"] == "cuda" else "cpu")
    cuda = device.type == "cuda"
    batch_size = args.batch_size * (BATCH_FACTOR if 3 in steps else 1)
    size = args.image_size

    class FakeCIFAR(VisionDataset):
        """The example's data set; rung 9 returns the raw uint8 image as a tensor."""

        def __init__(self, transform, n, raw=False):
            super().__init__(root=None, transform=transform)
            self.data = np.random.randint(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
            self.targets = np.random.randint(0, 10, size=(n), dtype=np.uint8).tolist()
            self.raw = raw

        def __getitem__(self, index):
            img, target = self.data[index], self.targets[index]
            if self.raw:  # HWC uint8 -> CHW uint8, a view: no PIL, no copy
                return torch.from_numpy(img).permute(2, 0, 1), target
            img = Image.fromarray(img)
            if self.transform is not None:
                img = self.transform(img)
            return img, target

        def __len__(self) -> int:
            return len(self.data)

    torch.manual_seed(0)
    np.random.seed(0)
    if 9 in steps:
        transform = None
    elif 4 in steps:
        transform = T.Compose([T.Resize(size), T.PILToTensor()])
    else:
        transform = T.Compose(
            [T.Resize(size), T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
        )
    train_set = FakeCIFAR(transform, args.dataset_size, raw=9 in steps)
    loader_kwargs: dict = {"batch_size": batch_size, "shuffle": True}
    if 1 in steps:
        loader_kwargs.update(num_workers=m["cores"], persistent_workers=True)
    if 2 in steps:
        loader_kwargs.update(pin_memory=True)
    train_loader = torch.utils.data.DataLoader(train_set, **loader_kwargs)
    non_blocking = 2 in steps
    channels_last = 8 in steps
    if 8 in steps:
        torch.backends.cudnn.benchmark = True

    model = torchvision.models.resnet18(weights=None).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    model.train()
    if 7 in steps:
        model = torch.compile(model)
    amp = amp_dtype(m)[0] if 6 in steps else None
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    autocast = (
        (lambda: torch.autocast(device.type, dtype=getattr(torch, _DTYPES[amp])))
        if amp
        else contextlib.nullcontext
    )

    def on_device(inputs):
        """Rungs 4 and 9: the uint8 batch becomes float, resized and normalized here."""
        if 4 in steps or 9 in steps:
            inputs = inputs.to(torch.float32)
            if 9 in steps and size != ARTICLE_SIZE:
                inputs = F.interpolate(inputs, size=(size, size), mode="bilinear")
            inputs = (inputs / 255.0 - 0.5) / 0.5
        if channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs

    def train(data):
        inputs = data[0].to(device=device, non_blocking=non_blocking)
        labels = data[1].to(device=device, non_blocking=non_blocking)
        inputs = on_device(inputs)
        with autocast():
            outputs = model(inputs)
            loss = criterion(outputs, labels)
        if 5 in steps:
            optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach(), labels.shape[0]

    return timed_loop(args, train, epochs=lambda: iter(train_loader), cuda=cuda) | {
        "steps_applied": sorted(steps),
        "batch_size": batch_size,
        "amp": amp,
        "num_workers": loader_kwargs.get("num_workers", 0),
    }


_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def timed_loop(args, train, epochs, cuda: bool) -> dict:
    """W warm-up + K measured steps, as a tune trial times them; epochs restart as needed."""
    import torch

    total = args.warmup + args.steps
    times: list[float] = []
    losses, samples = [], []
    last = time.perf_counter()
    while len(times) < total:
        started = len(times)
        for batch in epochs():
            loss, n = train(batch)
            now = time.perf_counter()
            times.append(1000 * (now - last))
            last = now
            losses.append(loss)
            samples.append(n)
            if len(times) >= total:
                break
        if len(times) == started:
            raise RuntimeError("the data set yields no batch")
    if cuda:
        torch.cuda.synchronize()
    synced_s = time.perf_counter() - last  # what the device still had queued at the end
    measured = times[args.warmup :]
    median_ms = statistics.median(measured)
    per_step = statistics.median(samples[args.warmup :])
    peak = torch.cuda.max_memory_allocated() if cuda else _peak_rss()
    return {
        "status": "ok",
        "median_ms": round(median_ms, 3),
        "samples_per_s": round(per_step / median_ms * 1000, 1),
        "samples_per_step": per_step,
        "step_ms": [round(t, 3) for t in measured],
        "warmup_ms": [round(t, 3) for t in times[: args.warmup]],
        "drain_ms": round(1000 * synced_s, 3),
        "losses": [round(float(x.float()), 4) for x in losses[args.warmup :]],
        "peak_bytes": peak,
        "peak_kind": "cuda" if cuda else "rss",
    }


def _peak_rss() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except (ImportError, OSError):
        return None


# --- the ceiling --------------------------------------------------------------------------
def ceiling_settings(settings: dict, m: dict) -> dict:
    """tune's knob values, as the ceiling applies them: only the model-side ones."""
    out: dict = {}
    amp = settings.get("amp")
    if amp:
        text = str(amp).lower()
        if "16" not in text:  # True or a mode name: what this device runs best
            text = amp_dtype(m)[0] or "bf16"
        out["amp"] = "fp16" if ("fp16" in text or "float16" in text) else "bf16"
    if settings.get("compile"):
        mode = settings["compile"]
        out["compile"] = mode if isinstance(mode, str) else "default"
    for name in ("channels-last", "cudnn-benchmark"):
        if settings.get(name):
            out[name] = True
    if settings.get("fused-optimizer") in ("fused", "foreach"):
        out["fused-optimizer"] = settings["fused-optimizer"]
    if settings.get("matmul-precision") in ("highest", "high", "medium"):
        out["matmul-precision"] = settings["matmul-precision"]
    for name in ("threads", "batch-size"):
        if settings.get(name):
            out[name] = int(settings[name])
    return out


def run_ceiling(args, m: dict) -> dict:
    import torch
    import torchvision.models

    s = ceiling_settings(json.loads(args.settings or "{}"), m)
    device = torch.device("cuda:0" if m["device"] == "cuda" else "cpu")
    cuda = device.type == "cuda"
    if "threads" in s:
        torch.set_num_threads(s["threads"])
    if "matmul-precision" in s:
        torch.set_float32_matmul_precision(s["matmul-precision"])
    if s.get("cudnn-benchmark"):
        torch.backends.cudnn.benchmark = True
    batch_size = s.get("batch-size", args.batch_size)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    fmt = torch.channels_last if s.get("channels-last") else torch.contiguous_format
    model = model.to(memory_format=fmt)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    opt_kwargs = {}
    if "fused-optimizer" in s:
        opt_kwargs[s["fused-optimizer"]] = True
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, **opt_kwargs)
    model.train()
    if "compile" in s:
        mode = s["compile"]
        model = torch.compile(model, mode=None if mode == "default" else mode)
    amp = s.get("amp")
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" and cuda else None
    inputs = torch.randn(batch_size, 3, args.image_size, args.image_size, device=device)
    inputs = inputs.contiguous(memory_format=fmt)
    labels = torch.randint(0, 10, (batch_size,), device=device)

    def train(_):
        ctx = (
            torch.autocast(device.type, dtype=getattr(torch, _DTYPES[amp]))
            if amp
            else contextlib.nullcontext()
        )
        with ctx:
            loss = criterion(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach(), batch_size

    endless = lambda: iter(range(1 << 30))  # noqa: E731
    return timed_loop(args, train, epochs=endless, cuda=cuda) | {
        "settings": s,
        "batch_size": batch_size,
    }


# --- the command line ---------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--rung", type=int, choices=range(10), metavar="N", help="rung 0..9")
    what.add_argument("--plan", action="store_true", help="print the rungs here as JSON")
    what.add_argument("--ceiling", action="store_true", help="synthetic batch on the device")
    p.add_argument("--image-size", type=int, default=32, help="Resize target (32)")
    p.add_argument("--dataset-size", type=int, default=4096, help="images (4096)")
    p.add_argument("--batch-size", type=int, default=32, help="the script's batch (32)")
    p.add_argument("--allow-batch-size", action="store_true", help="rung 3 applies")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps (3)")
    p.add_argument("--steps", type=int, default=10, help="measured steps (10)")
    p.add_argument(
        "--without", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
        help="steps left out of this rung (ones that failed or were slower below it)",
    )  # fmt: skip
    p.add_argument("--settings", help="--ceiling: tune's best configuration, as JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    m = machine()
    rows = plan(m, args.allow_batch_size)
    if args.plan:
        print(RESULT_PREFIX + json.dumps({"machine": m, "rungs": rows}), flush=True)
        return 0
    if args.ceiling:
        result = {"rung": "ceiling", "label": "ceiling: synthetic batch on the device"}
        runner = lambda: run_ceiling(args, m)  # noqa: E731
    else:
        row = rows[args.rung]
        result = dict(row)
        if row["status"] != "run":
            print(RESULT_PREFIX + json.dumps(result), flush=True)
            return 0
        runner = lambda: run_rung(args, m, rows)  # noqa: E731
    result.update(device=m["device"], image_size=args.image_size)
    started = time.perf_counter()
    try:
        result.update(runner())
    except Exception as e:  # reported, not raised: the ladder goes on without this step
        import traceback

        traceback.print_exc()
        result.update(status="failed", error=f"{type(e).__name__}: {e}"[-2000:])
    result["wall_s"] = round(time.perf_counter() - started, 2)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
