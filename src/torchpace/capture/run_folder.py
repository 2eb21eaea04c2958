"""The folder a run's artifacts go to (trace, run facts, report): always new or empty, so
that torchpace never writes over a user's files."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from torchpace.output_paths import folder_problem

DEFAULT_RUNS_DIR = Path("torchpace-runs")
# Runs started within the same second get -1, -2, ... after the timestamp; past this many
# something else is creating folders there and giving up is better than looping.
MAX_SAME_SECOND = 1000


class RunFolderError(Exception):
    """The requested folder holds files, or no new folder could be made; the message says
    which, in words for the user."""


def new_run_folder(
    requested: Path | None, runs_dir: Path = DEFAULT_RUNS_DIR, who: str = "torchpace"
) -> Path:
    """``requested`` (``--out``) when it is new or an empty folder, created with any missing
    parent; else a new ``runs_dir/<timestamp>`` folder. ``who`` names the caller in the
    refusal; a folder that cannot be made or written is a RunFolderError that says why."""
    if requested is not None:
        return _requested_folder(Path(requested), who)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)  # torchpace's own folder of runs
    except OSError as e:
        raise RunFolderError(_default_folder_failure(runs_dir, e)) from None
    for n in range(MAX_SAME_SECOND):
        candidate = runs_dir / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            # No exist_ok: a folder made by a run started in the same second is not ours.
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as e:
            raise RunFolderError(_default_folder_failure(runs_dir, e)) from None
    raise RunFolderError(f"could not create a new folder under {runs_dir}")


def _requested_folder(requested: Path, who: str) -> Path:
    if requested.exists() and (not requested.is_dir() or any(requested.iterdir())):
        raise RunFolderError(
            f"--out {requested} already exists and is not an empty folder; {who} "
            "never writes over existing files: give a new folder"
        )
    problem = folder_problem(requested)
    if problem:
        raise RunFolderError(f"--out {requested}: {problem}")
    try:
        requested.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFolderError(
            f"--out {requested} cannot be written ({e.strerror or e}); give a folder you "
            "can write to"
        ) from None
    return requested


def _default_folder_failure(runs_dir: Path, error: OSError) -> str:
    where = Path(os.getcwd()) / runs_dir
    return (
        f"cannot create the run folder under {where} ({error.strerror or error}); run from "
        "a folder you can write to, or give --out DIR"
    )
