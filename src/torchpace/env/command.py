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
    p.set_defaults(func=run)


# docs/schemas/env.schema.json; raised when a key is renamed, removed or changes meaning
SCHEMA_VERSION = 1


def run(args: argparse.Namespace) -> int:
    from torchpace.env import collect

    facts = collect()
    if args.json:
        from torchpace import __version__

        out = {"schema_version": SCHEMA_VERSION, "verb": "env", "torchpace": __version__}
        print(json.dumps(out | facts.to_dict(), indent=2))
    else:
        from torchpace.env.render import print_env

        print_env(facts)
    return 0
