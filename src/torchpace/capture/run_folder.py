"""The folder a run's artifacts go to (trace, run facts, report): always new or empty, so
that torchpace never writes over a user's files."""

from __future__ import annotations

import datetime
from pathlib import Path

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
    """``requested`` (``--out``) when it is new or an empty folder, created; else a new
    ``runs_dir/<timestamp>`` folder. ``who`` names the caller in the refusal."""
    if requested is not None:
        if requested.exists() and (not requested.is_dir() or any(requested.iterdir())):
            raise RunFolderError(
                f"--out {requested} already exists and is not an empty folder; {who} "
                "never writes over existing files: give a new folder"
            )
        requested.mkdir(parents=True, exist_ok=True)
        return requested
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(MAX_SAME_SECOND):
        candidate = runs_dir / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            # No exist_ok: a folder made by a run started in the same second is not ours.
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
    raise RunFolderError(f"could not create a new folder under {runs_dir}")
