"""The capture child's state: step boundaries, the profiled window, the A/B probes.

Phases, in order: warm-up (W steps, not profiled) -> window (K steps under torch.profiler)
-> probes (a few steps each way, only when a condition needs measuring) -> done (the script
is ended, or let run on with --continue).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import torch

from torchpace.capture.facts import ProbeResult, RunFacts, StepRecord, SyncSite
from torchpace.capture.hooks import SyncRecorder
from torchpace.capture.probes import plan_probes

TRACE_NAME = "trace.json.gz"
REFERENCE = "reference"
# Unprofiled steps measured right after the window: the step time without the profiler's
# own per-op overhead (shapes and memory recording), for the doctor to price problems on.
REFERENCE_STEPS = 3
FACTS_NAME = "run_facts.json"
# Untimed steps at the start of each probe block, while a switched setting settles.
SETTLE_STEPS = 1


class CaptureComplete(BaseException):
    """Ends the user's script once the window is captured.

    A BaseException, like KeyboardInterrupt, so that a user's `except Exception` around the
    training step does not swallow it.
    """


class Session:
    def __init__(self, spec: dict, facts: RunFacts):
        self.spec = spec
        self.facts = facts
        self.out_dir = Path(spec["out_dir"])
        self.phase = "warmup"
        self.step_index = 0
        self.last_boundary = time.perf_counter()
        self.data_wait_s = 0.0
        self.window_steps = 0
        self.profiler = None
        self.syncs = SyncRecorder()
        self.probe_plan: list[tuple[str, bool]] = []  # (probe name, switched?) per step
        self.probe_times: dict[tuple[str, bool], list[float]] = {}
        self.probes = []
        # Optimizer cycle: the optimizers stepped in one iteration, learned from the first.
        self._cycle: list[int] | None = None
        self._seen: list[int] = []
        self._last_post_t: float | None = None
        self._wait_at_last_post = 0.0
        self._first_dataloader_next = True
        self._device: str | None = None
        if spec["warmup"] == 0:
            self._start_window()

    # --- step boundaries -------------------------------------------------------------
    def optimizer_stepped(self, optimizer) -> None:
        if self.spec["step_on"] != "optimizer":
            return
        key = id(optimizer)
        name = type(optimizer).__name__
        if name not in self.facts.optimizers:
            self.facts.optimizers.append(name)
        if self._device is None:
            self._device = next(
                (p.device.type for g in optimizer.param_groups for p in g["params"]), None
            )
        now = time.perf_counter()
        if self._cycle is None:
            if key in self._seen:  # the first iteration is over: its optimizers are the cycle
                self._cycle = list(self._seen)
                self.facts.optimizer_steps_per_step = float(len(self._cycle))
                # Step 0 ended at its last optimizer's step; we only know it now.
                wait_after = self.data_wait_s - self._wait_at_last_post
                self.data_wait_s = self._wait_at_last_post
                self._record_step(self._last_post_t)
                self.step_index += 1
                self.last_boundary = self._last_post_t
                self.data_wait_s = wait_after
            else:
                self._seen.append(key)
                self._last_post_t = now
                self._wait_at_last_post = self.data_wait_s
                return
        if key == self._cycle[-1]:
            self.boundary(now)

    def dataloader_next(self) -> None:
        if self.spec["step_on"] != "dataloader":
            return
        if self._first_dataloader_next:  # the first batch starts step 0
            self._first_dataloader_next = False
            self.last_boundary = time.perf_counter()
            self.data_wait_s = 0.0
            return
        self.boundary(time.perf_counter())

    def manual_step(self) -> None:
        if self.spec["step_on"] == "manual":
            self.boundary(time.perf_counter())

    def boundary(self, now: float | None) -> None:
        if self.phase == "done":  # running on after the capture (--continue): stay out of it
            return
        now = time.perf_counter() if now is None else now
        self._record_step(now)
        self.step_index += 1
        if self.phase != "window":  # os._exit() or a native crash must not lose the steps seen
            self.save()
        if self.phase == "warmup" and self.step_index >= self.spec["warmup"]:
            self._start_window()
        elif self.phase == "window":
            self.window_steps += 1
            if self.window_steps >= self.spec["steps"]:
                self._stop_window()  # closes the last ProfilerStep span: no partial one
                self._start_probes()
            else:
                self.profiler.step()
        elif self.phase == "probes":
            self._next_probe_step()
        if self.phase == "done" and not self.spec["continue_after"]:
            raise CaptureComplete
        self.last_boundary = time.perf_counter()
        self.data_wait_s = 0.0

    def _record_step(self, now: float) -> None:
        wall_ms = 1000 * (now - self.last_boundary)
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.facts.steps.append(
            StepRecord(
                index=self.step_index,
                wall_ms=round(wall_ms, 3),
                data_wait_ms=round(1000 * self.data_wait_s, 3),
                in_window=self.phase == "window",
                phase=self._phase_label(),
                rss_bytes=_rss_bytes(),
                cuda_allocated_bytes=torch.cuda.memory_allocated() if cuda else None,
                cuda_peak_bytes=torch.cuda.max_memory_allocated() if cuda else None,
            )
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        if self.phase == "probes" and self.probe_plan:
            entry = self.probe_plan[0]
            if entry[0] == REFERENCE or self._steps_in_block >= SETTLE_STEPS:
                self.probe_times.setdefault(entry, []).append(wall_ms)

    def _phase_label(self) -> str:
        if self.phase == "probes" and self.probe_plan:
            return "reference" if self.probe_plan[0][0] == REFERENCE else "probe"
        return self.phase

    # --- the profiled window ---------------------------------------------------------
    def _start_window(self) -> None:
        from torchpace.capture.state import read_process_state

        self.facts.process = read_process_state(self._device)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities,
            record_shapes=True,
            profile_memory=True,
            with_stack=self.spec["with_stack"],
            # A schedule that always records: only with a schedule does torch.profiler mark
            # each step as a `ProfilerStep#N` span, which the trace model splits steps by.
            schedule=_always_record,
            acc_events=True,  # keep every step's events (and no warning on the user's stderr)
        )
        self.profiler.start()
        self.syncs.start()
        self.phase = "window"

    def _stop_window(self) -> None:
        self.syncs.stop()
        self.profiler.stop()
        self._export_trace()
        steps = max(self.window_steps, 1)
        self.facts.syncs = [
            SyncSite(kind, location, count, round(count / steps, 3), device)
            for (kind, location, device), count in self.syncs.counts.most_common()
        ]
        self.profiler = None
        self.phase = "probes"
        self.save()

    def _export_trace(self) -> None:
        raw = self.out_dir / "trace.json"
        self.profiler.export_chrome_trace(str(raw))
        final = self.out_dir / TRACE_NAME
        with open(raw, "rb") as src, gzip.open(final, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        cap = self.spec["max_trace_mb"] * 2**20
        if final.stat().st_size > cap:
            _shrink_trace(final, cap)
            self.facts.trace_truncated = True
        self.facts.trace_path = str(final)

    # --- A/B probes ------------------------------------------------------------------
    def _start_probes(self) -> None:
        self.probes = plan_probes(self.facts.process) if self.spec["probes"] else []
        # First a few unprofiled steps as they are: the step time without profiler overhead.
        self.probe_plan = [(REFERENCE, False)] * REFERENCE_STEPS
        for probe in self.probes:
            # In blocks, not step by step: the first steps after a switch pay for the switch
            # itself (a thread pool resized while the old threads still spin cost 20x a step
            # here), so each block starts with untimed settling steps.
            for switched in (True, False):
                self.probe_plan += [(probe.name, switched)] * (SETTLE_STEPS + probe.steps)
        self._steps_in_block = 0
        if self.probe_plan:
            self._apply(self.probe_plan[0])
        else:
            self._finish()

    def _next_probe_step(self) -> None:
        done = self.probe_plan.pop(0)
        same = bool(self.probe_plan) and self.probe_plan[0] == done
        self._steps_in_block = self._steps_in_block + 1 if same else 0
        if self.probe_plan:
            self._apply(self.probe_plan[0])
        else:
            self._finish()

    def _apply(self, step: tuple[str, bool]) -> None:
        name, switched = step
        for probe in self.probes:
            if probe.name == name:
                probe.apply(switched)
            else:
                probe.apply(False)

    def _finish(self) -> None:
        for probe in self.probes:
            probe.apply(False)  # the user's own setting back
            on = self.probe_times.get((probe.name, False), [])
            off = self.probe_times.get((probe.name, True), [])
            if on and off:
                self.facts.probes.append(
                    ProbeResult(
                        probe.name,
                        round(statistics.median(on), 3),
                        round(statistics.median(off), 3),
                        min(len(on), len(off)),
                        probe.detail,
                    )
                )
        self.phase = "done"
        self.facts.status = "complete"
        self.save()

    # --- the end, however it comes ---------------------------------------------------
    def close(self, status: str, error: str | None) -> None:
        """The script ended (or was ended) before the capture finished: keep what was seen."""
        if self.phase == "window":  # a partial window: keep its trace, it is all there is
            try:
                self._stop_window()
            except Exception as e:  # a trace we cannot write must not hide the user's error
                error = f"{error or ''}\n(torchpace could not write the trace: {e})".strip()
            self.phase = "closed"
        elif self.phase == "probes":
            self._finish()  # the window is whole; keep the probe steps that were measured
            if status == "script-exited":  # the script simply ended during the probes
                return
        if self.facts.status != "complete" or status != "script-exited":
            self.facts.status = status
            self.facts.error = error
        self.save()

    def save(self) -> None:
        self.facts.save(self.out_dir / FACTS_NAME)


def _always_record(step: int) -> torch.profiler.ProfilerAction:
    return torch.profiler.ProfilerAction.RECORD


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


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
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(data, f)
    tmp.replace(path)
