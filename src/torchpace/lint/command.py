"""The `torchpace lint` verb."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "lint",
        help="find performance anti-patterns in PyTorch source, with safe autofixes",
        description="Find the training-speed anti-patterns that source code shows (the same "
        "TP codes as `torchpace doctor`). Exit status: 0 clean, 1 findings, 2 usage or "
        "parse errors. Configure under [tool.torchpace.lint] in pyproject.toml; silence a "
        "line with `# noqa: TP101`.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to lint")
    p.add_argument("--select", help="comma-separated codes or prefixes to check (e.g. TP1,TP201)")
    p.add_argument("--ignore", help="comma-separated codes or prefixes to skip")
    p.add_argument("--exclude", action="append", default=[], help="glob of paths to skip")
    p.add_argument("--fix", action="store_true", help="apply safe fixes in place")
    p.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="also apply fixes that change behaviour or checkpoints (with --fix or --diff)",
    )
    p.add_argument("--diff", action="store_true", help="print the fixes as a diff; write nothing")
    p.add_argument("--format", choices=("text", "json", "github"), default="text")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    p.set_defaults(func=run)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def _tasks(args: argparse.Namespace):
    from torchpace.lint.config import check_prefixes, load_settings, python_files
    from torchpace.lint.engine import select_rules
    from torchpace.lint.runner import Task

    fix = None
    if args.fix or args.diff:
        fix = "unsafe" if args.unsafe_fixes else "safe"
    cli_select = check_prefixes(_split(args.select), "--select")
    cli_ignore = check_prefixes(_split(args.ignore), "--ignore")
    tasks, seen = [], set()
    for given in args.paths:
        path = Path(given)
        if not path.exists():
            raise FileNotFoundError(f"{given}: no such file or folder")
        settings = load_settings(path)
        settings.exclude += args.exclude
        rules = select_rules(cli_select or settings.select, settings.ignore + cli_ignore)
        codes = tuple(r.code for r in rules)
        for file in python_files(path, settings):
            real = file.resolve()
            if real not in seen:
                seen.add(real)
                tasks.append(Task(str(file), codes, fix, write=args.fix and not args.diff))
    return tasks, fix


def run(args: argparse.Namespace) -> int:
    from torchpace.lint.config import ConfigError
    from torchpace.lint.output import report
    from torchpace.lint.runner import run_tasks, unified_diff

    if args.unsafe_fixes and not (args.fix or args.diff):
        print("torchpace lint: --unsafe-fixes needs --fix or --diff", file=sys.stderr)
        return EXIT_USAGE
    try:
        tasks, fix = _tasks(args)
    except (ConfigError, FileNotFoundError) as e:
        print(f"torchpace lint: {e}", file=sys.stderr)
        return EXIT_USAGE
    results = run_tasks(tasks, args.jobs)
    if args.diff:
        for result in results:
            sys.stdout.write(unified_diff(result))
        for result in results:
            result.violations = [v for v in result.violations if not v.fixable]
        for note in (n for r in results for n in r.notes):
            print(f"torchpace lint: note: {note}", file=sys.stderr)
        would = sum(r.fixed for r in results)
        print(f"{would} fix{'es' if would != 1 else ''} would be applied.", file=sys.stderr)
    else:
        report(results, args.format, fix)
    if any(r.error for r in results):
        if args.diff:
            for r in results:
                if r.error:
                    print(f"torchpace lint: {r.error}", file=sys.stderr)
        return EXIT_USAGE
    changed = args.diff and any(r.fixed for r in results)
    return EXIT_FINDINGS if changed or any(r.violations for r in results) else EXIT_CLEAN
