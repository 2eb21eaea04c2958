"""The profiled window: torch.profiler over K steps, and the trace it leaves in the run folder."""

from __future__ import annotations

import gc
import gzip
import json
import shutil
from pathlib import Path

import torch

from torchpace import run_files
from torchpace.atomic import OwnFileError, atomic_file, write_bytes_atomic
from torchpace.capture.hooks import SyncRecorder
from torchpace.capture.profiler_log import LOG_NAME, StderrFilter
from torchpace.env.process import glibc
from torchpace.facts.run import SyncSite

TRACE_NAME = run_files.TRACE


class ProfilerWindow:
    def __init__(self, out_dir: Path, with_stack: bool, max_trace_mb: float):
        self.out_dir = out_dir
        self.with_stack = with_stack
        self.max_trace_bytes = max_trace_mb * 2**20
        self.syncs = SyncRecorder()
        # the profiler's C++ log lines go to the run folder, not between the script's output
        self.stderr = StderrFilter(out_dir / LOG_NAME)
        self.profiler = None
        self.steps = 0

    def start(self) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.stderr.start()
        try:
            self.profiler = torch.profiler.profile(
                activities=activities,
                record_shapes=True,
                profile_memory=True,
                with_stack=self.with_stack,
                # A schedule that always records: only with a schedule does torch.profiler
                # mark each step as a `ProfilerStep#N` span, which the trace model splits
                # steps by.
                schedule=_always_record,
                acc_events=True,  # keep every step's events (and no warning on the user's stderr)
            )
            self.profiler.start()
        except BaseException:
            self.stderr.stop()  # the error itself must reach the terminal
            raise
        self.syncs.start()

    def step_ended(self, wanted: int) -> bool:
        """Counts a profiled step; True when the window holds ``wanted`` steps."""
        self.steps += 1
        if self.steps >= wanted:
            return True
        self.profiler.step()  # opens the next ProfilerStep span
        return False

    def stop(self) -> tuple[Path, bool, list[SyncSite]]:
        """Ends the window: (trace path, whether it was truncated, the sync sites seen)."""
        self.syncs.stop()
        try:
            self.profiler.stop()
            trace, truncated = self._export()
        finally:
            self.stderr.stop()
        steps = max(self.steps, 1)
        syncs = [
            SyncSite(kind, location, count, round(count / steps, 3), device)
            for (kind, location, device), count in self.syncs.counts.most_common()
        ]
        self.profiler = None
        # The stopped profiler's events (some 360,000 Python objects after five steps of a
        # ResNet-18) sit in reference cycles: without a collection here they stay alive
        # through the unprofiled steps the headline samples/s is measured on, doubling the
        # heap the user's loop runs in. Collected now, at the window's end, untimed.
        gc.collect()
        _return_free_heap_to_the_os()
        return trace, truncated, syncs

    def _export(self) -> tuple[Path, bool]:
        raw = self.out_dir / "trace.json"
        final = self.out_dir / TRACE_NAME
        try:  # a full disk: said as torchpace's own write, nothing half-written left
            self.profiler.export_chrome_trace(str(raw))
            with (
                open(raw, "rb") as src,
                atomic_file(final) as out,
                gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as dst,
            ):
                shutil.copyfileobj(src, dst)
        except OwnFileError:
            raise
        except OSError as e:
            raise OwnFileError.of(e, raw) from e
        finally:
            raw.unlink(missing_ok=True)
        if final.stat().st_size > self.max_trace_bytes:
            _shrink_trace(final, self.max_trace_bytes)
            return final, True
        return final, False


def _return_free_heap_to_the_os() -> None:
    """glibc's malloc_trim(0) after the collection: the profiler's freed events leave hundreds
    of MiB of free heap that the user's loop would otherwise allocate from without the page
    faults the plain script pays (measured: ~5,000 faults a step on the bundled example),
    making the headline faster than the script's own. No-op where glibc is not the libc."""
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _always_record(step: int) -> torch.profiler.ProfilerAction:
    return torch.profiler.ProfilerAction.RECORD


def _shrink_trace(path: Path, cap_bytes: float) -> None:
    """Keep the trace under the cap by keeping its earliest events (whole steps first).

    The trace is torchpace's own artifact in its own run folder, never a user's file.
    """
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data.get("traceEvents", [])
    keep_fraction = cap_bytes / path.stat().st_size * 0.9
    timed = sorted((e for e in events if "ts" in e), key=lambda e: float(e["ts"]))
    if timed:
        cutoff = float(timed[int(len(timed) * min(1.0, keep_fraction)) - 1]["ts"])
        data["traceEvents"] = [e for e in events if "ts" not in e or float(e["ts"]) <= cutoff]
    write_bytes_atomic(path, gzip.compress(json.dumps(data).encode()))
