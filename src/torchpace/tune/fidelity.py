"""Does a trial time what the plain script does? The fidelity check of every tune.

A trial (capture TIMING mode) runs the script with what tune needs: the knobs' patches, a
seed, each step's loss, the DataLoader's fetch times, a watchdog, the progress pipe. The
reference is the script as it is (capture PLAIN mode, capture/plain.py: one step-timing hook
and the file guard, nothing else). Before any knob is tried, baseline trials and plain runs
alternate, pair after pair (in a tune the trials are the baseline's repeats that measure the
noise: tune/baseline.py `_repeats`); the fidelity is the median of the pairs' ratios
(trial ms/step over plain ms/step). Past LIMIT_PCT, more pairs are run, up to MAX_PAIRS. The
tune stops only when the ratio is outside the limit beyond this machine's noise: the
signed-rank interval of the pairs' log-ratios (tune/noise.py, the statistics every knob is judged
by) lies wholly outside it, which takes DECIDING_PAIRS pairs or more. A knob judged on a
workload that is not the user's would be judged wrongly (issue 22: anomaly mode read 10.7
ms/step under the capture, 2.1 plainly). A ratio outside the limit that the interval does
not confirm is inconclusive (CI's 2-core VM read pairs of 0.87x to 1.83x on a 2.5 ms step):
said, and the tune goes on.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchpace import run_files
from torchpace.capture.runner import capture_script
from torchpace.capture.spec import Mode
from torchpace.facts.run import Status, StepPhase
from torchpace.tune.noise import ALPHA, Interval, interval
from torchpace.tune.trial import (
    ENDED_EARLY,
    MIN_MEASURED,
    TrialResult,
    TrialSettings,
    capture_spec,
    run_ms_per_step,
    run_trial,
)

LIMIT_PCT = 10.0  # |trial / plain - 1| beyond this, beyond the noise, stops the tune
PAIRS = 2  # pairs always run
MAX_PAIRS = 6  # pairs at most, while the ratio is out of bounds and not yet confirmed
# The fewest pairs whose signed-rank interval exists at noise.ALPHA (5: all 32 sign patterns
# but the all-one-side one); fewer pairs never stop a tune.
DECIDING_PAIRS = 5


@dataclass
class Fidelity:
    plain_ms: list[float] = field(default_factory=list)  # each plain run's ms/step
    trial_ms: list[float] = field(default_factory=list)  # each baseline trial's
    limit_pct: float = LIMIT_PCT
    error: str | None = None  # why it could not be measured (a run failed)

    @property
    def ratios(self) -> list[float]:
        return [t / p for t, p in zip(self.trial_ms, self.plain_ms, strict=False) if p > 0]

    @property
    def ratio(self) -> float | None:
        """Trial ms/step over plain ms/step: 1.0 is a trial that times what python runs."""
        return round(statistics.median(self.ratios), 3) if self.ratios else None

    @property
    def off_pct(self) -> float | None:
        return None if self.ratio is None else round(100 * abs(self.ratio - 1), 1)

    @property
    def within(self) -> bool:
        return self.off_pct is None or self.off_pct <= self.limit_pct

    @property
    def slowdown(self) -> Interval:
        """How much slower a trial times the script than it runs, in %, with the
        signed-rank interval (bounds None under DECIDING_PAIRS pairs)."""
        return interval([100 * (r - 1) for r in self.ratios], ALPHA)

    @property
    def confirmed_out(self) -> bool:
        """Outside the limit beyond the noise: the whole interval past it, on one side, from
        DECIDING_PAIRS pairs or more, every run measured."""
        if self.ratio is None or self.error or len(self.ratios) < DECIDING_PAIRS:
            return False
        slowdown = self.slowdown
        low, high = slowdown.low_pct, slowdown.high_pct
        if low is None or high is None:
            return False
        return low > self.limit_pct or high < -self.limit_pct

    @property
    def ok(self) -> bool:
        """Within the limit; or not measurable (a failed run is the baseline's to report);
        or inconclusive (out of bounds, but not beyond the machine's noise)."""
        return self.within or not self.confirmed_out

    def line(self) -> str:
        if self.ratio is None:
            return f"fidelity: not measured ({self.error or 'no run'})"
        plain, trial = statistics.median(self.plain_ms), statistics.median(self.trial_ms)
        text = (
            f"fidelity: a trial times this script at {self.ratio:.3f}x its plain speed "
            f"({trial:.2f} vs {plain:.2f} ms/step, median of {len(self.ratios)} alternated "
            f"pairs; limit {self.limit_pct:.0f}%)"
        )
        if self.error:
            text += f"; incomplete: {self.error}"
        elif not self.within and not self.confirmed_out:
            text += (
                f"; inconclusive: the pairs range from {min(self.ratios):.2f}x to "
                f"{max(self.ratios):.2f}x, not outside the limit beyond this machine's "
                "noise; every verdict below is less certain"
            )
        return text

    def failure(self) -> str:
        slower = "slower" if (self.ratio or 1) > 1 else "faster"
        return (
            f"{self.line()}: the capture makes this script {self.off_pct:.0f}% {slower} than "
            "it runs plainly, so a knob would be judged on another workload; nothing was "
            'tried. What the capture adds is listed in docs/tune.md ("What a trial '
            'changes"); a script that walks its stack every step (anomaly detection, '
            "warnings) or many more threads than cores are the cases seen. Please report it "
            "with the run folder; --fidelity-limit PCT sets the limit (0: no check)"
        )

    def to_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "off_pct": self.off_pct,
            "limit_pct": self.limit_pct,
            "ok": self.ok,
            "inconclusive": not self.within and not self.confirmed_out and not self.error,
            "plain_ms": [round(x, 3) for x in self.plain_ms],
            "trial_ms": [round(x, 3) for x in self.trial_ms],
            "error": self.error,
        }


def plain_run(settings: TrialSettings, out_dir: Path, knobs: dict | None = None) -> float | str:
    """The script as it is, timed by its steps: its ms/step (trial.run_ms_per_step, as a
    trial's), or why it failed. A script that simply ends before the steps asked for is
    timed on the steps it has, MIN_MEASURED at least, as a trial is (trial.py): the planted
    crowded job's 30 steps were all its trials had, and every plain run of it "failed".
    ``knobs``: applied first, as `torchpace run` applies them (tune/run_check.py)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # the plain reference runs the user's script too: guarded as a trial is
    spec = capture_spec(settings, out_dir, Mode.PLAIN, knobs=dict(knobs or {}))
    facts = capture_script(spec, output=out_dir / run_files.SCRIPT_OUTPUT).facts
    measured = [s.wall_ms for s in facts.steps if s.phase == StepPhase.MEASURED]
    ended = facts.status == Status.SCRIPT_EXITED and (
        not facts.error or facts.error.startswith(ENDED_EARLY)  # not sys.exit, not a kill
    )
    if not measured or (facts.status != Status.COMPLETE and not ended):
        return f"the plain run ended {facts.status}: {(facts.error or '').strip()[-300:]}"
    if facts.status != Status.COMPLETE and len(measured) < MIN_MEASURED:
        return f"the plain run timed {len(measured)} steps: {(facts.error or '').strip()[-300:]}"
    return run_ms_per_step(measured)


def run_pair(
    order: tuple[str, ...] | list[str],
    run_side: Callable[[str, Path], float | str],
    out_dir: Path,
    pair: int,
    on_run: Callable[[str, float | None], None] | None,
) -> dict[str, float] | str:
    """One alternated pair (this check's, tune/run_check.py's): each side in ``order`` run
    into ``out_dir/NN-side`` by ``run_side`` (its ms/step, or why it failed), told to
    ``on_run``; the sides' ms/step, or the first failure's reason."""
    got: dict[str, float] = {}
    for side in order:
        ms = run_side(side, out_dir / f"{pair:02d}-{side}")
        if on_run is not None:
            on_run(side, None if isinstance(ms, str) else ms)
        if isinstance(ms, str):
            return ms
        got[side] = ms
    return got


def check_fidelity(
    settings: TrialSettings,
    out_dir: Path,
    limit_pct: float = LIMIT_PCT,
    on_run: Callable[[str, float | None], None] | None = None,
    *,
    run_baseline: Callable[[Path], TrialResult] | None = None,
    run_plain: Callable[[Path], float | str] | None = None,
    min_pairs: int = PAIRS,
    fidelity: Fidelity | None = None,
) -> Fidelity:
    """Plain and baseline trial, alternated: ``min_pairs`` pairs, then more up to MAX_PAIRS
    while out of bounds and not confirmed. ``on_run(label, ms)``: told after each run (the
    progress display). ``run_baseline(where)``: one baseline trial (default: a trial of its
    own into ``where``); tune's search gives its baseline repeats instead, so that the
    check's trials are the runs that measure the noise too, not runs of their own (on an
    H100 the check's ten runs took 90 s of a 140 s budget before any knob). ``run_plain``:
    the plain run (default plain_run). ``fidelity``: filled in pair by pair, so that a
    budget's stop half-way keeps the pairs measured."""
    fidelity = fidelity if fidelity is not None else Fidelity(limit_pct=limit_pct)

    def run_side(side: str, where: Path) -> float | str:
        if side == "plain":
            return run_plain(where) if run_plain is not None else plain_run(settings, where)
        if run_baseline is not None:
            result = run_baseline(where)
        else:
            result = run_trial(settings, {}, "baseline (fidelity)", where)
        return result.ms_per_step if result.ok else f"the baseline trial {result.outcome}"

    for pair in range(max(MAX_PAIRS, min_pairs)):
        if pair >= min_pairs and (fidelity.within or fidelity.confirmed_out):
            break
        # the order alternates too: neither side always runs first after the other
        order = ("plain", "trial") if pair % 2 == 0 else ("trial", "plain")
        got = run_pair(order, run_side, out_dir, pair, on_run)
        if isinstance(got, str):
            fidelity.error = got
            return fidelity
        fidelity.plain_ms.append(got["plain"])
        fidelity.trial_ms.append(got["trial"])
    return fidelity
