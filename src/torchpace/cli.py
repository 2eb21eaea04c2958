"""The `torchpace` command line: one subcommand per verb; each verb's code lives in its package.

A verb module provides ``add_parser(subparsers)``, which registers the verb and sets
``func(args) -> exit code``. Verb modules import their heavy dependencies (torch, libcst)
inside ``func`` so that ``torchpace --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

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


class _Version(argparse.Action):
    """--version, read only when asked: importlib.metadata costs start-up time that
    `torchpace run` would add to the user's script."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from torchpace._version import __version__

        print(f"torchpace {__version__}")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """``only``: the verb given, whose module alone is imported (each verb's module costs
    start-up time; `torchpace run` starts the user's script in this process)."""
    parser = argparse.ArgumentParser(
        prog="torchpace",
        description="Make PyTorch training fast by measurement.",
    )
    parser.add_argument("--version", action=_Version)
    subparsers = parser.add_subparsers(dest="verb", metavar="<verb>")
    modules = [m for m in VERB_MODULES if only is not None and m == f"torchpace.{only}.command"]
    for module in modules or VERB_MODULES:
        importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # a tune killed here mid-run left the user's files changed: put back before anything else
    from torchpace.capture.guard_journal import recover_here

    recover_here(lambda line: print(line, file=sys.stderr))
    if argv and argv[0] in OWN_PARSER_VERBS:
        try:
            return importlib.import_module(OWN_PARSER_VERBS[argv[0]]).main(argv[1:])
        except KeyboardInterrupt:
            print("torchpace: interrupted", file=sys.stderr)
            return 130
    parser = build_parser(only=argv[0] if argv else None)
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
