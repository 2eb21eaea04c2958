"""The `torchpace compare A B` verb: two doctor runs (or traces) side by side."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchpace.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from torchpace.printable import printable

USAGE = "torchpace compare [options] A B   (doctor run folders, doctor reports or traces)"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        usage=USAGE,
        help="compare two doctor runs (before/after a change); a CI gate on the step time",
        description="Show two doctor runs (or two torch.profiler traces) side by side: step "
        "time and samples/s with their ratio, the breakdown per phase, GPU busy, peak memory, "
        "the findings that appeared or went away, and the operators/kernels whose time "
        "changed most. With --fail-if-slower PCT, exit 1 when B is more than PCT %% slower "
        "than A beyond the noise of the runs.",
    )
    p.add_argument("a", type=Path, metavar="A", help="the reference: a run folder or trace")
    p.add_argument("b", type=Path, metavar="B", help="the run to judge against A")
    p.add_argument(
        "--fail-if-slower",
        type=float,
        metavar="PCT",
        help="exit 1 when B's step time is more than PCT %% above A's and beyond the noise",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the comparison as JSON")
    p.add_argument("--html", type=Path, metavar="PATH", help="also write it as an HTML page")
    p.set_defaults(func=run)


def say(message: str) -> None:
    print(f"torchpace compare: {printable(message, lines=True)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.fail_if_slower is not None and args.fail_if_slower < 0:
        say(f"--fail-if-slower is a percentage >= 0 (got {args.fail_if_slower:g})")
        return EXIT_USAGE
    from torchpace.report.html import is_replaceable

    if args.html is not None and not is_replaceable(args.html):
        say(f"--html {args.html} exists and is not an earlier torchpace report; give a new path")
        return EXIT_USAGE
    if args.json is not None and not _replaceable_json(args.json):
        say(f"--json {args.json} exists and is not an earlier compare report; give a new path")
        return EXIT_USAGE
    from torchpace.output_paths import output_file_problem, write_output

    for flag, path in (("--json", args.json), ("--html", args.html)):
        problem = output_file_problem(flag, path) if path is not None else None
        if problem:
            say(problem)
            return EXIT_USAGE
    from torchpace.compare.diff import compare
    from torchpace.compare.sides import CompareInputError, load_side

    try:
        a, b = load_side(args.a), load_side(args.b)
    except CompareInputError as e:
        say(str(e))
        return EXIT_USAGE
    result = compare(a, b, args.fail_if_slower)
    from torchpace.report.compare_terminal import render

    render(result)
    if args.json is not None:
        from torchpace.report.doctor_json import write_json

        write_output("--json", args.json, lambda p: write_json(result, p), say)
    if args.html is not None:
        from torchpace.report.html import HtmlUnavailable, compare_html, write_html

        try:
            text = compare_html(result)
        except HtmlUnavailable as e:
            say(f"--html: {e}")
            return EXIT_FAILURE
        write_output("--html", args.html, lambda p: write_html(text, p), say)
    gate = result["gate"]
    return EXIT_FAILURE if gate and gate["failed"] else EXIT_OK


def _replaceable_json(path: Path) -> bool:
    from torchpace.output_paths import is_own_report

    return is_own_report(path, "compare")
