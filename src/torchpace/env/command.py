"""The `torchpace env` verb."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "env",
        help="print the facts of this machine and process that decide training speed",
        description="Python, torch, CUDA/cuDNN/NCCL, devices, CPU instruction sets, cores, "
        "NUMA, threads, allocator and shared memory, as read here ('unknown' where a fact "
        "cannot be read).",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--no-peak",
        action="store_true",
        help="leave out the measured peak (a matmul per dtype and a copy, under 2 s the first "
        "time on a machine, cached in ~/.cache/torchpace/peak.json after)",
    )
    p.add_argument(
        "--measure-peak",
        action="store_true",
        help="measure the peak again and replace the cached figures (a probe that ran on a "
        "busy machine reads the peak low)",
    )
    p.set_defaults(func=run)


# docs/schemas/env.schema.json; raised when a key is renamed, removed or changes meaning
SCHEMA_VERSION = 1


def run(args: argparse.Namespace) -> int:
    from torchpace.env.facts import collect

    facts = collect()
    peaks = [] if args.no_peak else _peaks(facts, refresh=args.measure_peak)
    if args.json:
        from torchpace._version import __version__

        out = {"schema_version": SCHEMA_VERSION, "verb": "env", "torchpace": __version__}
        out |= facts.to_dict()
        out["peak"] = None if args.no_peak else [p.to_dict() for p in peaks]
        print(json.dumps(out, indent=2))
    else:
        from torchpace.env.render import print_env

        print_env(facts, peaks)
    return 0


def _peaks(facts, refresh: bool = False) -> list:
    """The CPU's measured peak and each GPU's (beside its datasheet's)."""
    from torchpace.env.peak import cpu_dtypes, measure_peak

    peaks = [measure_peak("cpu", cpu_dtypes(facts.cpu.bf16_native), refresh=refresh)]
    peaks += [measure_peak(f"cuda:{d.index}", refresh=refresh) for d in facts.torch.devices]
    return peaks
