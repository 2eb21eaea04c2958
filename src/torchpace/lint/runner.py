"""Lint many files, on every core: one task per file, results in path order."""

from __future__ import annotations

import difflib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from torchpace.lint.engine import FileResult, lint_bytes
from torchpace.lint.fixer import NotWritten, is_read_only, read_only_message, write_atomic
from torchpace.lint.rules import RULES

# Starting worker processes costs more than linting a handful of files.
MIN_FILES_PER_WORKER = 8


@dataclass(frozen=True)
class Task:
    path: str
    codes: tuple[str, ...]  # the rules selected for this file
    fix: str | None  # None, "safe" or "unsafe"
    write: bool  # False with --diff: compute fixes, write nothing


def run_task(task: Task) -> FileResult:
    try:
        data = Path(task.path).read_bytes()
    except OSError as e:
        return FileResult(task.path, error=f"{task.path}: cannot read ({e.strerror})")
    rules = [r for r in RULES if r.code in task.codes]
    read_only = task.write and task.fix is not None and is_read_only(Path(task.path))
    fix = None if read_only else task.fix  # its findings are reported as they stand
    try:
        result = lint_bytes(data, task.path, rules, fix)
    except Exception as e:  # a bug of ours must not stop the other files, nor touch this one
        return FileResult(
            task.path,
            error=f"{task.path}: internal error in torchpace lint ({type(e).__name__}: {e}); "
            "the file is left unchanged; please report this with the file",
        )
    if read_only and result.error is None:
        result.error = read_only_message(task.path)
    if result.new_source is not None and task.write:
        try:
            write_atomic(Path(task.path), result.new_source, expected=data)
        except OSError as e:
            error = str(e) if isinstance(e, NotWritten) else f"{task.path}: fixes not written: {e}"
            # what the file still holds, as it is on disk
            result = lint_bytes(data, task.path, rules, None)
            result.error = error
    if not task.write:
        result.original = data
    else:
        result.original = result.new_source = None  # nothing more to send back
    return result


def run_tasks(tasks: list[Task], jobs: int | None = None) -> list[FileResult]:
    jobs = jobs or os.cpu_count() or 1
    jobs = min(jobs, max(1, len(tasks) // MIN_FILES_PER_WORKER))
    if jobs <= 1:
        return [run_task(t) for t in tasks]
    chunksize = max(1, len(tasks) // (jobs * 8))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(run_task, tasks, chunksize=chunksize))


def unified_diff(result: FileResult) -> str:
    if result.new_source is None or result.original is None:
        return ""
    old = result.original.decode("utf-8", "replace").splitlines(keepends=True)
    new = result.new_source.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, f"a/{result.path}", f"b/{result.path}"))
