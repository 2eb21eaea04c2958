"""The `torchpace` command line: one subcommand per verb; each verb's code lives in its package.

A verb module provides ``add_parser(subparsers)``, which registers the verb and sets
``func(args) -> exit code``. Verb modules import their heavy dependencies (torch, libcst)
inside ``func`` so that ``torchpace --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from torchpace import __version__

# Only verbs that exist are listed here, in the order `--help` shows them.
VERB_MODULES = [
    "torchpace.env.command",
    "torchpace.doctor.command",
    "torchpace.lint.command",
    "torchpace.tune.command",
    "torchpace.run.command",
    "torchpace.compare.command",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchpace",
        description="Make PyTorch training fast by measurement.",
    )
    parser.add_argument("--version", action="version", version=f"torchpace {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="<verb>")
    for module in VERB_MODULES:
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("torchpace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
