"""What a tune found, as data: each knob's outcome, the ladder's rungs, the whole result.

Read by the report (tune/report.py), the outputs (tune/output.py), the HTML and the
benchmarks; built by the search (tune/search.py) from its ledger when it ends. Nothing here
runs or decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchpace.capture.file_restore import FilesTouched
from torchpace.tune.noise import Noise
from torchpace.tune.trial import TrialResult


class KnobStatus:
    KEPT = "kept"
    REJECTED = "rejected"
    NOT_APPLICABLE = "not-applicable"
    NOT_TRIED = "not-tried"  # opt-in not given, the budget ran out, Ctrl-C
    # its trials ran, and a limit (--time-budget, --budget, Ctrl-C) stopped the tune before
    # they decided: measured, neither kept nor refused
    UNDECIDED = "undecided"
    # its setting was not in force at the timed steps (the script undid it): not judged
    COULD_NOT_APPLY = "could-not-apply"


@dataclass
class KnobOutcome:
    knob: str
    status: str
    reason: str
    value: object = None  # the best value tried (the kept one when kept)
    gain_pct: float | None = None  # on top of the knobs kept before it
    changes_numerics: bool = False
    answers: list[str] = field(default_factory=list)  # finding codes it tests
    reported: bool = False  # the doctor reported one of those findings on this script
    one_time_s: float | None = None  # warm-up time beyond the reference's (compilation)
    payback_steps: int | None = None  # steps until the per-step saving repays one_time_s
    # the gain payback_steps is counted at, where it is under gain_pct: the least the pairs
    # show beyond the noise (payback.assured_gain_pct)
    assured_gain_pct: float | None = None


@dataclass
class Rung:
    """One step of the ladder: the configuration so far and what it measured."""

    label: str
    config: dict
    median_ms: float
    samples_per_s: float | None
    speedup: float  # against the baseline, per sample where samples are known
    peak_bytes: int | None
    changes_numerics: bool
    # the rung's gain over the rung below, in %, where its knob was switched within each
    # process (its runs' own ms/step sit in their processes' speed): settle_figures chains it
    switched_gain_pct: float | None = None

    @property
    def cost_ms(self) -> float:
        """Time per sample where samples are known, else per step: what rungs compare by."""
        if self.samples_per_s:
            return 1000 / self.samples_per_s
        return self.median_ms


@dataclass
class TuneResult:
    noise: Noise | None = None
    trials: list[TrialResult] = field(default_factory=list)
    verdicts: dict[int, str] = field(default_factory=dict)  # trial index -> what it decided
    knobs: list[KnobOutcome] = field(default_factory=list)
    ladder: list[Rung] = field(default_factory=list)
    best: dict = field(default_factory=dict)
    final_speedup: float | None = None  # measured alternately against the baseline
    final_gains_pct: list[float] = field(default_factory=list)  # the final check's pairs
    # a final check whose one knob was switched within each process: its processes (the
    # gains above are then block pairs); 0: processes in pairs
    final_switched_runs: int = 0
    # "budget" (--budget: trials), "time-budget" (--time-budget), "interrupted",
    # "baseline-failed", "final-check-failed", "fidelity" or ""
    stopped: str = ""
    stopped_by: str = ""  # the limit as the user gave it: "--time-budget 450 s", "Ctrl-C"
    wall_s: float = 0.0
    # the batch-size finder's result beside the doctor's headroom estimate (batch_check.py);
    # None when the finder did not run
    batch_check: dict | None = None
    # every figure shown anywhere (ladder, final check, toml, JSON, HTML), computed once by
    # figures.settle_figures: baseline_ms_per_step, tuned_ms_per_step, speedup, ...
    figures: dict = field(default_factory=dict)
    steps: int | None = None  # the timed steps per trial (calibrated, or --steps)
    pair_sd_pct: float | None = None  # pair-to-pair spread of the gains, pooled
    detectable_pct: float | None = None  # the smallest gain MAX_PAIRS pairs could show
    # what the script did to files outside the run folder, over every run (each undone)
    files: FilesTouched = field(default_factory=FilesTouched)
    # a trial's ms/step against the plain script's (tune/fidelity.py); None: not checked
    fidelity: dict | None = None
    # the kept configuration as `torchpace run` runs it (tune/run_check.py); None: not run
    run_check: dict | None = None
    # the ladder as fractions of the device's peak (tune/speed_of_light.py), measured (or
    # read from the peak's cache) by the session before any output is written; None: none
    speed_of_light: dict | None = None
