"""What a script wrote outside the run folder, in words (tune's report and the doctor's
terminal): the files it changed and created, and what torchpace could not protect."""

from __future__ import annotations

import os

from torchpace.capture.file_restore import CREATED, FilesTouched

SHOWN = 8  # paths named per line; the JSON report holds them all


def _names(paths: list[str]) -> str:
    cwd = os.getcwd()
    shown = [os.path.relpath(p, cwd) if p.startswith(cwd + "/") else p for p in paths[:SHOWN]]
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(shown) + more


def files_lines(touched: FilesTouched) -> list[str]:
    if not touched.any and not touched.note:
        return ["your files: the script wrote none outside the run folder"]
    lines = []
    if touched.restored:
        if touched.changed:
            lines.append(f"your files: the script wrote {len(touched.changed)} that existed, "
                         f"each put back as it was after every run: "
                         f"{_names(touched.changed)}")  # fmt: skip
        if touched.created:
            lines.append(f"your files: the script created {len(touched.created)}, moved after "
                         f"each run into that run's folder ({CREATED}/): "
                         f"{_names(touched.created)}")  # fmt: skip
        if touched.unwatched:
            lines.append(f"NOT protected: {_names(touched.unwatched)} changed by code "
                         "torchpace cannot watch (C code, a subprocess): not put back")  # fmt: skip
    else:
        written = touched.changed + touched.created + touched.unwatched
        if written:
            lines.append(f"the script wrote {len(written)} files outside the run folder: "
                         f"{_names(written)}")  # fmt: skip
    lines.extend(f"NOT restored: {f}" for f in touched.failed[:SHOWN])
    if touched.note:
        lines.append(f"your files: {touched.note}")
    return lines
