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
    if touched.protected or touched.restored:  # restored alone: a report of an earlier version
        failed = [f.split(": ", 1)[0] for f in touched.failed]
        back = [p for p in touched.changed if p not in failed]
        if back:
            lines.append(f"your files: the script wrote {len(back)} that existed, "
                         f"each put back as it was after every run: {_names(back)}")  # fmt: skip
        if touched.links:
            lines.append(f"your files: {len(touched.links)} written through a symbolic link; "
                         "the file each points to was saved and put back: "
                         f"{_names(touched.links)}")  # fmt: skip
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
        if touched.links:
            lines.append(f"the script wrote through {len(touched.links)} symbolic links: "
                         f"{_names(touched.links)}")  # fmt: skip
    lines.extend(
        f"NOT changed: {r}: torchpace could not save its original first, so it refused the "
        "write and stopped the tune; the file is as it was"
        for r in touched.refused[:SHOWN]
    )
    lines.extend(f"NOT restored: {f}" for f in touched.failed[:SHOWN])
    if touched.note:
        lines.append(f"your files: {touched.note}")
    return lines
