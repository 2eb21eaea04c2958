"""The capture child's state machine: which phase the run is in, and what each step records.

PROFILE (the doctor): warm-up (W steps) -> count (one step whose FLOPs and bytes are
counted, op by op: slower, timed by no figure; first, so that a short script gets it) ->
window (K steps under torch.profiler) -> A/B probes (when a setting is worth probing) ->
throughput (settling steps, then unprofiled steps for as long as the measuring budget takes:
the headline figure) -> done.
TIMING (tune's trials): warm-up (W steps) -> measured (K unprofiled steps) -> done; a
switched trial's measured steps are blocks with one knob on and off (switching.py).
Done ends the script by raising CaptureComplete (unless --continue).

The parts it drives each have one job: boundaries.py says when a step ends, window.py
profiles and exports the trace, probes.py runs the probes, throughput.py says how many
unprofiled steps make the headline figure, this file records the steps
into the RunFacts and saves them.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import torch

from torchpace.capture import machine_load, process_cpu
from torchpace.capture.boundaries import StepBoundaries
from torchpace.capture.loader_period import NONE_MADE, LoaderPeriod, Totals, added, period_ms
from torchpace.capture.loader_swap import LoaderSwap
from torchpace.capture.probes import (
    ProbeRunner,
    cpu_bf16_probe,
    crowded_loader,
    optimizer_probes,
    plan_probes,
)
from torchpace.capture.progress import ProgressReporter
from torchpace.capture.runtime import runtime
from torchpace.capture.spec import CaptureSpec, Mode
from torchpace.capture.switching import SwitchedBlocks
from torchpace.capture.throughput import ThroughputMeter, settle_steps
from torchpace.capture.window import ProfilerWindow
from torchpace.facts.cpu_use import CpuUse
from torchpace.facts.run import FACTS_NAME, RunFacts, RunOn, Status, StepPhase, StepRecord


class Phase(str, Enum):
    WARMUP = "warmup"
    WINDOW = "window"
    PROBES = "probes"
    THROUGHPUT = "throughput"
    COUNT = "count"  # one step under capture/flops.py's counter, between warm-up and window
    MEASURED = "measured"
    DONE = "done"  # measured; the script ends or runs on untouched (--continue)
    CLOSED = "closed"  # the script ended first


class CaptureComplete(BaseException):
    """Ends the user's script once the measurement is complete.

    A BaseException, like KeyboardInterrupt, so that a user's `except Exception` around the
    training step does not swallow it.
    """


# a script running on after its measured steps (spec.run_on_s) with no step for this long past
# its limit is ended by a timer, not by its next step
RUN_ON_GRACE_S = 2.0


class Session:
    def __init__(self, spec: CaptureSpec, facts: RunFacts):
        self.spec = spec
        self.facts = facts
        self.out_dir = Path(spec.out_dir)
        self.started_at = time.perf_counter()
        self.phase = Phase.WARMUP
        self.step_index = 0
        # tune's trials: steps timed boundary to boundary (capture/boundaries.py)
        self.boundaries = StepBoundaries(
            spec.step_on, facts, self._step_ended, contiguous=spec.mode == Mode.TIMING
        )
        self.window: ProfilerWindow | None = None
        self.probes: ProbeRunner | None = None
        self.throughput: ThroughputMeter | None = None
        self.counter = None  # capture/flops.StepCounter during the COUNT phase
        self._load_at: machine_load.LoadSample | None = None  # the phase's first counters
        self._cpu_at: process_cpu.Snapshot | None = None  # the job's processes then
        self.loader_swap = LoaderSwap()  # the loaders, their workers, the probe's switch
        self.measured = 0
        self._loss = None  # the last scalar backward() was called on in this step
        self._losses: dict[int, torch.Tensor] = {}  # step index -> loss, read when done
        self.memory = None  # capture/memory.MemoryTracker, in PROFILE mode (set by the child)
        self.progress = ProgressReporter(spec.progress_fd)  # to the parent's display
        # called as the timed steps start and once they are done (TIMING): the child checks
        # there that each knob's setting is in force (knobs/base.Knob.check)
        self.on_measure: Callable[[], None] | None = None
        # a switched trial (spec.switch): called at the first timed step, it gives the
        # knob's switch or why there is none (knobs/base.Knob.switch)
        self.switch_of: Callable[[], Callable[[int], None] | str] | None = None
        self.switched: SwitchedBlocks | None = None
        # a trial's loader workers' pace (capture/loader_period.py), read over its timed steps
        self.loader_period: LoaderPeriod | None = None
        self._period_at: Totals | None = None
        # a switched trial: what the loader made during the knob's blocks (its arm's pace)
        self._made_by_arm: dict[int, Totals] = {}  # a switched trial's: each arm's blocks'
        self._timed_block_from: Totals | None = None  # where a block's timed steps began
        # spec.run_on_s: when the measured steps were done, the script running on after them
        self._done_at: float | None = None
        self._run_on_timer: threading.Timer | None = None
        self.run_on_expired = False  # the run-on's timer ended it between steps (child.py)
        if spec.warmup == 0:
            self._after_warmup()
        self._told_phase, self._phase_start = self.phase, 0
        self._tell()

    # --- what the hooks report -----------------------------------------------------
    def loss_backward(self, loss: torch.Tensor) -> None:
        # first: where backward() ends the steps, the step it ends is the one before, whose
        # loss was kept at its own backward()
        self.boundaries.backward_called(bool(runtime().optimizers))
        # Warm-up steps too: trials that warm up longer (loader workers) are compared with
        # the baseline on the same step indices, not on their first measured steps.
        recording = self.phase in (Phase.WARMUP, Phase.MEASURED)
        if self.spec.record_loss and recording and loss.numel() == 1:
            self._loss = loss.detach()

    def first_activity(self) -> None:
        if self.facts.startup_s is None:
            self.facts.startup_s = round(time.perf_counter() - self.started_at, 3)

    # --- one step ended --------------------------------------------------------------
    def _step_ended(self, now: float, late: bool) -> None:
        if self.phase == Phase.DONE and self._running_on():
            self.step_index += 1  # counted, not timed: how long the script runs by itself
            if time.perf_counter() - self._done_at > self.spec.run_on_s:
                self._stop_running_on(ended=False)
                raise CaptureComplete
            return
        if self.phase in (Phase.DONE, Phase.CLOSED):  # --continue: stay out of the way
            return
        self.first_activity()
        wall_ms = 1000 * (now - self.boundaries.last_boundary)
        self._record(wall_ms)
        self.step_index += 1
        if late:  # the next step is under way: no phase may start or end in its middle
            self.save()
            return
        if self.phase == Phase.WARMUP:
            self.save()  # os._exit() or a native crash must not lose the steps seen
            if self.step_index >= self.spec.warmup:
                self._after_warmup()
        elif self.phase == Phase.WINDOW:
            if self.window.step_ended(self.spec.steps):
                self._stop_window()  # closes the last ProfilerStep span: no partial one
                self._start_probes()
        elif self.phase == Phase.PROBES:
            self.save()
            self.probes.record(wall_ms)
            if not self.probes.advance():
                self._start_throughput()
        elif self.phase == Phase.THROUGHPUT:
            # no save per step: a file written between measured steps would be in no step's
            # time yet let the GPU catch up; the steps are saved once the phase ends
            if not self.throughput.record(wall_ms):
                self._finish()
        elif self.phase == Phase.COUNT:
            self._stop_count(self.facts.steps[-1])
            self._start_window()
        elif self.phase == Phase.MEASURED and self.switched is not None:
            arm, timed = self.switched.current()
            more = self.switched.advance()
            following = self.switched.current() if more else (None, False)
            if timed and following != (arm, True):  # a block's timed steps ended
                self._loader_made_under(arm)
            elif following[1] and not timed and self.loader_period is not None:
                self._timed_block_from = self.loader_period.totals()  # its timed steps begin
            if not more:
                self._finish()
        elif self.phase == Phase.MEASURED:
            self.measured += 1
            if self.measured >= self.spec.steps:
                self._finish()
        self._tell()
        if self.phase == Phase.DONE and not self.spec.continue_after and not self._running_on():
            raise CaptureComplete

    def _running_on(self) -> bool:
        """After the measured steps, the script runs on (spec.run_on_s) to show where it
        ends by itself: the job a one-time cost must repay (tune/ledger.py's job length)."""
        return self.spec.run_on_s > 0 and self._done_at is not None

    def _start_running_on(self) -> None:
        self._done_at = time.perf_counter()
        # a script that runs on without steps (a long evaluation, a hang) is ended too: a
        # real SIGINT, as the child's watchdog sends, wakes a main thread blocked in a call
        self._run_on_timer = threading.Timer(self.spec.run_on_s + RUN_ON_GRACE_S, self._expire)
        self._run_on_timer.daemon = True
        self._run_on_timer.start()

    def _expire(self) -> None:
        if self._running_on():
            self.run_on_expired = True
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def _stop_running_on(self, ended: bool) -> None:
        """The run-on's end: the script ended by itself (its length in steps is known), or
        ran past spec.run_on_s (it runs at least this many)."""
        if self._run_on_timer is not None:
            self._run_on_timer.cancel()
        self.facts.run_on = RunOn(
            steps=self.step_index,
            # a script that caught the timer's SIGINT and then ended did not end by itself
            ended=ended and not self.run_on_expired,
            seconds=round(time.perf_counter() - self._done_at, 3),
        )
        self._done_at = None
        self.save()

    def _tell(self) -> None:
        """The parent's progress display: the phase and its steps so far (one short write)."""
        if self.phase != self._told_phase:
            self._told_phase, self._phase_start = self.phase, self.step_index
        total = {Phase.WARMUP: self.spec.warmup, Phase.WINDOW: self.spec.steps,
                 Phase.MEASURED: self.spec.steps}.get(self.phase)  # fmt: skip
        self.progress.say(self.phase.value, self.step_index - self._phase_start, total)

    def _record(self, wall_ms: float) -> None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if self._loss is not None:
            self._losses[self.step_index] = self._loss
            self._loss = None
        self.facts.steps.append(
            StepRecord(
                index=self.step_index,
                wall_ms=round(wall_ms, 3),
                data_wait_ms=round(1000 * self.boundaries.data_wait_s, 3),
                in_window=self.phase == Phase.WINDOW,
                phase=self._step_phase(),
                # a timed step reads no file: the peak comes from VmHWM once they are done
                rss_bytes=None if self.phase == Phase.MEASURED else _rss_bytes(),
                cuda_allocated_bytes=torch.cuda.memory_allocated() if cuda else None,
                cuda_peak_bytes=torch.cuda.max_memory_allocated() if cuda else None,
                samples=self.boundaries.samples or None,
                loader_started=self.boundaries.loader_began,
            )
        )
        if self.phase == Phase.MEASURED and self.switched is not None:
            arm, timed = self.switched.current()
            self.facts.steps[-1].arm = arm
            if not timed:  # the switch's own cost: in no block's time
                self.facts.steps[-1].phase = StepPhase.SETTLE
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        if self.memory is not None:
            self.memory.step_ended(self.step_index, self.phase == Phase.WINDOW)

    def _step_phase(self) -> StepPhase:
        if self.phase == Phase.THROUGHPUT:
            return StepPhase.SETTLE if self.throughput.settling else StepPhase.REFERENCE
        return {
            Phase.WARMUP: StepPhase.WARMUP,
            Phase.WINDOW: StepPhase.WINDOW,
            Phase.PROBES: StepPhase.PROBE,
            Phase.MEASURED: StepPhase.MEASURED,
            Phase.COUNT: StepPhase.COUNTED,
        }[self.phase]

    # --- phases ----------------------------------------------------------------------
    def _after_warmup(self) -> None:
        from torchpace.capture.state import read_process_state

        self.facts.process = read_process_state(self.boundaries.device)
        if self.spec.mode == Mode.TIMING:
            self.phase = Phase.MEASURED
            if self.on_measure is not None:
                self.on_measure()
            self._start_switching()
            if self.loader_period is not None:
                self._period_at = self._timed_block_from = self.loader_period.totals()
            self.boundaries.restart_timing()  # the process state read above is no step's
            return
        self._start_count()

    def _start_switching(self) -> None:
        if self.switch_of is None:
            return
        switch = self.switch_of()
        if isinstance(switch, str):  # timed with the knob on throughout, and why said
            self.facts.switch_note = switch
            return
        arms = 1 + max(1, len(self.spec.arms))  # the script's own setting and each value
        self.switched = SwitchedBlocks(switch, self.spec.steps, self.spec.switch_seed, arms)

    def _loader_made_under(self, arm: int) -> None:
        """A switched trial's block's timed steps ended: what the loader's workers made
        during them counts to the arm it ran; not during its settling steps, while the
        other arm's workers still drain their batches (four workers' drain made one
        worker's arm read 5 ms a batch where it makes one in 20). The pace under each arm
        is then its own: the rows of a rung decided within a process (tune/rows.py) are
        capped by it as an ordinary trial's are (fused AdamW kept in blocks left "compute
        26 ms" under a loader that made a batch in 26 ms, and the loader's row waited
        behind the compute row's other knobs), and so are those under a further value's
        arm (two workers screened beside none, read without their pace, left the compute
        row the whole step)."""
        if self._timed_block_from is None:
            return
        now = self.loader_period.totals()
        made = self._made_by_arm.get(arm, NONE_MADE)
        self._made_by_arm[arm] = added(made, self._timed_block_from, now)
        self._timed_block_from = None

    def _start_window(self) -> None:
        self.window = ProfilerWindow(self.out_dir, self.spec.with_stack, self.spec.max_trace_mb)
        self._load_at = machine_load.sample()
        self._cpu_at = process_cpu.snapshot()
        self.window.start()
        self.phase = Phase.WINDOW

    def _stop_window(self) -> None:
        self.facts.window_load = machine_load.between(self._load_at, machine_load.sample(),
                                                      self._cores())  # fmt: skip
        self.facts.window_cpu = self._cpu_since_phase_start()
        trace, truncated, syncs = self.window.stop()
        self.facts.trace_path = str(trace)
        self.facts.trace_truncated = truncated
        self.facts.syncs = syncs
        if self.memory is not None:
            self.memory.stop_tracking()  # its hooks would slow the unprofiled steps
        self.phase = Phase.PROBES
        self.save()

    def _start_probes(self) -> None:
        probes = []
        if self.spec.probes:
            state = self.facts.process
            crowded = crowded_loader(self.facts)
            crowding = (self.loader_swap, *crowded) if crowded is not None else None
            probes = plan_probes(state, crowding) + optimizer_probes(state, runtime().optimizers)
            bf16 = cpu_bf16_probe(state, self.facts, runtime().models, self.spec.continue_after)
            probes += [bf16] if bf16 is not None else []
        self.probes = ProbeRunner(probes)
        if self.probes.pending:
            self.phase = Phase.PROBES
        else:
            self._start_throughput()

    def _start_throughput(self) -> None:
        if self.probes is not None:
            self.facts.probes = self.probes.results()  # the user's own settings back
        settle = settle_steps(self.facts.loaders)
        self.throughput = ThroughputMeter(self.spec.measure_s, settle)
        self._load_at = machine_load.sample()
        self._cpu_at = process_cpu.snapshot()
        self.phase = Phase.THROUGHPUT

    def _start_count(self) -> None:
        """The next step, the first after the warm-up, runs under the FLOP counter; the
        window starts when it ends. First, not last: a script shorter than the capture (a
        fixed number of epochs on a small dataset) still gets its count, and the counted
        step's slowness (Python at every op) is in no figure either way (the window and the
        unprofiled steps time their own steps)."""
        from torchpace.capture.flops import StepCounter

        try:
            self.counter = StepCounter()
            self.counter.start()
        except Exception as e:  # no count is a gap in the report, never a broken run
            self.counter = None
            self.facts.flops.reason = f"the FLOP counter could not start: {e}"
            self._start_window()
            return
        self.phase = Phase.COUNT

    def _stop_count(self, step: StepRecord | None) -> None:
        counter, self.counter = self.counter, None
        if counter is None:
            return
        counter.stop()
        if step is None:
            self.facts.flops.reason = "the script ended before the counted step did"
            return
        self.facts.flops = counter.facts(step.index, step.samples)

    def _finish(self) -> None:
        if not self.facts.flops.counted and self.facts.flops.reason is None:
            self.facts.flops.reason = "the script ended before a step could be counted"
        if self.phase == Phase.PROBES:  # the script ended during the probes
            self.facts.probes = self.probes.results()
        self._end_reference_load()
        self._read_losses()
        if self.phase == Phase.MEASURED and self.on_measure is not None:
            self.on_measure()
        if self._period_at is not None and self.switched is None:  # one setting's pace
            ms, workers = period_ms(self._period_at, self.loader_period.totals())
            self.facts.loader_period_ms, self.facts.loader_workers = ms, workers
        elif self._period_at is not None:  # each arm's blocks' pace; the knob's (arm 1) first
            paces = [period_ms(NONE_MADE, self._made_by_arm.get(arm, NONE_MADE))
                     for arm in range(self.switched.arms)]  # fmt: skip
            self.facts.loader_period_ms, self.facts.loader_workers = paces[1]
            self.facts.loader_period_by_arm = [ms for ms, _ in paces]
        self.phase = Phase.DONE
        if self.spec.run_on_s > 0:
            self._start_running_on()
        self.facts.status = Status.COMPLETE
        self.save()

    def _end_reference_load(self) -> None:
        if self.phase == Phase.THROUGHPUT:
            self.facts.reference_load = machine_load.between(
                self._load_at, machine_load.sample(), self._cores()
            )
            self.facts.reference_cpu = self._cpu_since_phase_start()

    def _cpu_since_phase_start(self) -> CpuUse | None:
        workers = self.loader_swap.worker_pids()
        return process_cpu.between(self._cpu_at, process_cpu.snapshot(), workers, self._cores())

    def _read_losses(self) -> None:
        # One read per step, after the timing: the only syncs the loss record adds.
        by_index = {s.index: s for s in self.facts.steps}
        for index, loss in self._losses.items():
            by_index[index].loss = float(loss.float().item())
        self._losses.clear()

    def _cores(self) -> int | None:
        process = self.facts.process
        return process.usable_cpus if process is not None else None

    # --- the end, however it comes ---------------------------------------------------
    def close(self, status: Status, error: str | None) -> None:
        """The script ended (or was ended) before the capture finished: keep what was seen."""
        if self.phase == Phase.DONE and self._running_on():
            # the measurement was whole: however the script ends now, the trial stands
            self._stop_running_on(ended=status == Status.SCRIPT_EXITED)
            return
        if self.phase == Phase.WINDOW:  # a partial window: keep its trace, it is all there is
            try:
                self._stop_window()
            except Exception as e:  # a trace we cannot write must not hide the user's error
                error = f"{error or ''}\n(torchpace could not write the trace: {e})".strip()
            self.phase = Phase.CLOSED
        elif self.phase == Phase.COUNT:  # the script ended within the counted step
            self._stop_count(None)
            self.phase = Phase.CLOSED
        elif self.phase in (Phase.PROBES, Phase.THROUGHPUT):
            self._finish()  # the window is whole; keep the steps that were measured
            if status == Status.SCRIPT_EXITED:  # the script simply ended during the probes
                return
        elif self.phase == Phase.MEASURED:
            self._read_losses()
        if self.facts.status != Status.COMPLETE or status != Status.SCRIPT_EXITED:
            self.facts.status = status
            self.facts.error = error
        self.save()

    def save(self) -> None:
        # The kernel updates its high-water mark (VmHWM) lazily: only on some unmap paths and
        # when it is read, so memory returned with madvise after a step's end can leave VmHWM
        # below the RSS that step's end read. A peak is at least every RSS we saw.
        seen = [s.rss_bytes for s in self.facts.steps if s.rss_bytes is not None]
        peaks = [p for p in (_rss_peak_bytes(), *seen) if p is not None]
        self.facts.rss_peak_bytes = max(peaks, default=None)
        self.facts.save(self.out_dir / FACTS_NAME)


def _rss_peak_bytes() -> int | None:
    """The kernel's high-water mark of the resident memory (VmHWM in /proc/self/status)."""
    try:
        with open("/proc/self/status") as f:
            line = next((x for x in f if x.startswith("VmHWM:")), None)
        return int(line.split()[1]) * 1024 if line else None
    except (OSError, ValueError, IndexError):
        return None


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
