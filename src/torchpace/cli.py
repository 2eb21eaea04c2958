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
    "torchpace.launch.command",
    "torchpace.compare.command",
]
# Verbs that parse their own command line, handed everything after the verb: `launch`
# forwards torchrun's flags to torchrun's own parser.
OWN_PARSER_VERBS = {"launch": "torchpace.launch.command"}


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
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in OWN_PARSER_VERBS:
        try:
            return importlib.import_module(OWN_PARSER_VERBS[argv[0]]).main(argv[1:])
        except KeyboardInterrupt:
            print("torchpace: interrupted", file=sys.stderr)
            return 130
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verb is None:
        parser.print_help()
        return 2
    try:
        if args.verb == "doctor" and args.nproc_per_node is not None:
            # many processes are launch's job (launch --doctor); the doctor package does not
            # import launch, which imports the doctor for the job's report
            from torchpace.launch.command import doctor_job

            return doctor_job(args)
        return args.func(args)
    except KeyboardInterrupt:
        print("torchpace: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
