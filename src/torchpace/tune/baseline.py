"""tune's first phase: the baseline. One run of the script as it is, which warms the caches
and gives the reference losses (loss_check.py), then NOISE_RUNS back to back: this machine's
run-to-run noise for this script (noise.py). Between the two, the doctor's first finding's
knob is screened (suspect.py). With the fidelity check on, the back-to-back runs alternate
with plain runs of the script (tune/fidelity.py), and a trial that times another workload
than the script's stops the tune before any knob is tried on the ladder; they then stay runs
of the script as it is whatever the first finding did (the check compares the script with
itself under the capture): a kept first finding's rung is its screen and its pair, and the
baseline's rung its pair's reference and these runs. Without the check, a kept first
finding's back-to-back runs are of it, and join its rung.

The timed steps per trial are calibrated on the first run (`calibrated_steps`): as many as
make a run's median stable to about 1%, within a few seconds.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from torchpace.capture.outcome import exception_line
from torchpace.tune import fidelity as fidelity_check
from torchpace.tune.disturbed import MAX_RERUNS, disturbance_among
from torchpace.tune.ledger import BASELINE, Ledger, Stop, cost_ms, label
from torchpace.tune.noise import measure_noise
from torchpace.tune.suspect import KeptSuspect
from torchpace.tune.trial import TrialResult, TrialSettings

NOISE_RUNS = 3  # back-to-back baseline runs after the first (cold) one: the noise
# Step calibration: a run's median should move by about this much (in %) from one run to the
# next from its own steps' jitter alone (the standard error of a median: 1.25 sd / sqrt(K)),
# within these bounds on the timed steps and the timed seconds.
STABLE_MEDIAN_PCT = 1.0
MAX_CALIBRATED_STEPS = 200
MAX_TIMED_S = 4.0
# The cold run goes on after its timed steps for at most this long, its steps counted: a
# script that ends by itself within it is the job a one-time cost must repay
# (Ledger.job_length). moving_bottleneck's 200 steps end 3 s after the cold run's timed ones,
# and torch.compile's 30 s there were kept because the job's length was unknown (0.73x end
# to end). A longer script costs these seconds once and is a long job.
RUN_ON_S = 15.0
# Without --time-budget, a script that ends by itself during the cold run is tuned for at most
# this many of its whole runs, and no less than SHORT_JOB_MIN_S: a tune worth 85 runs of a
# 7 s job (the README's quick-start example under the 10 minutes' default end) is more than
# anyone gives a job that short.
SHORT_JOB_RUNS = 20
SHORT_JOB_MIN_S = 150.0


def cold_run(
    ledger: Ledger, calibrate: bool, note: Callable[[str], None] = lambda line: None
) -> TrialSettings:
    """The first run of the script as it is: the loss reference, and the timed steps
    calibrated on it. Stop("baseline-failed") when the script does not run as it is.
    Returns the settings asked for (a repeat that fails with the calibrated steps goes back
    to them)."""
    # it runs on after its timed steps to show the job's length, unless --job-steps says it
    first = ledger.trial({}, BASELINE, run_on_s=RUN_ON_S if ledger.job_steps is None else 0.0)
    if not first.ok:
        ledger.verdict(first, f"the unmodified script failed: {first.outcome}")
        raise Stop("baseline-failed")
    ledger.loss_reference = first
    ledger.verdict(first, "reference losses; warms the caches (not timed against)")
    short = _short_job_end(ledger, first)
    note(_after_the_cold_run(ledger, first) + short)
    given = ledger.settings
    if calibrate:
        steps = calibrated_steps(first, given.steps)
        ledger.use_settings(dataclasses.replace(given, steps=steps))
    return given


def _short_job_end(ledger: Ledger, first: TrialResult) -> str:
    """A script that ended by itself in its cold run is a short job: without --time-budget
    the tune spends at most SHORT_JOB_RUNS of its whole runs (at least SHORT_JOB_MIN_S), not
    the default's 10 minutes. Returns the words that say so ("" where the end stays)."""
    budget = ledger.budget
    # the cold run is the first trial: a length known now is where it saw the script end
    if not (budget.default_seconds and budget.seconds and ledger.script_steps is not None):
        return ""
    job_s = first.wall_s + first.ran_on_s
    end = max(SHORT_JOB_MIN_S, SHORT_JOB_RUNS * job_s)
    if end >= budget.seconds:
        return ""
    ledger.budget = dataclasses.replace(budget, seconds=end)
    return (f"; a short job ({job_s:.1f} s a run): tune ends by {end:.0f} s, "
            f"{SHORT_JOB_RUNS} of its runs (--time-budget S to change it)")  # fmt: skip


def _after_the_cold_run(ledger: Ledger, first: TrialResult) -> str:
    """The estimate again, from a real trial (the doctor's run times the script's steps but
    not a whole process), and the job's length where the run-on saw it."""
    left = ledger.seconds_left()
    fit = ""
    if left and first.wall_s > 0:
        trials = min(int(left / first.wall_s), ledger.trials_left())
        fit = f": about {trials} more in the {left:.0f} s left"
    job = ledger.job_length()
    if job is not None:
        length = f"; {job[1]}"
    elif ledger.script_runs_past:
        length = f"; the script runs past {ledger.script_runs_past:,} steps: a long job"
    else:
        length = ""
    return f"  the first trial took {first.wall_s:.1f} s{fit}{length}"


def noise_runs(
    ledger: Ledger,
    given: TrialSettings,
    fidelity: fidelity_check.Fidelity | None,
    note: Callable[[str], None],
    kept: KeptSuspect | None = None,
) -> None:
    """The back-to-back runs into the ledger (its noise, the ladder's first rung). With the
    first finding's knob kept (suspect.py), the ladder is the baseline (its pair's reference)
    and that knob's rung (its screen and its pair), and the runs are of the kept knob, which
    they join; with the fidelity check on, they stay runs of the script as it is (the check
    compares them with plain runs) and join the baseline's rung. Stop("baseline-failed")
    when no repeat ran, Stop("fidelity") when the trials would not time what the script
    does."""
    # a knob kept within processes is a gain over the script's own setting in each: the
    # runs stay the script's, the baseline its rung's gain chains on
    of_kept = kept is not None and fidelity is None and kept.switched_gain_pct is None
    config = kept.config if of_kept else {}
    if kept is not None:  # rungs now: a stop during the noise runs keeps the knob kept
        ledger.ladder.append(ledger.rung(BASELINE, {}, kept.references or [ledger.loss_reference]))
        ledger.ladder.append(kept.rung(ledger))
    runs = _repeats(ledger, given, fidelity, note, config)
    if not runs:  # the script ran once and then failed: nothing steady to compare with
        raise Stop("baseline-failed")
    runs = _without_disturbed_noise_runs(ledger, runs, config)
    # Only back-to-back runs measure the noise: later baselines are separated by other
    # trials, and the machine's drift between them is cancelled by alternation instead.
    ledger.noise = measure_noise([cost_ms(r) for r in runs])
    if config:  # of the kept knob: its rung's
        ledger.ladder[-1] = ledger.rung(kept.name, config, [*kept.runs, *runs])
        return
    for run in runs:
        ledger.note_baseline(run)
    references = kept.references if kept is not None else []
    ledger.ladder[:1] = [  # the baseline's rung: the first, or in place of the one so far
        ledger.rung(BASELINE, {}, [*references, *runs])
    ]
    if kept is not None:  # its speedup over the baseline's runs, all of them now
        ledger.ladder[1] = kept.rung(ledger)


def _repeats(
    ledger: Ledger,
    given: TrialSettings,
    fidelity: fidelity_check.Fidelity | None,
    note: Callable[[str], None],
    config: dict,
) -> list[TrialResult]:
    """NOISE_RUNS back-to-back baseline runs, the noise's measure; with the fidelity
    check on, the first fidelity.PAIRS of them each beside a plain run of the script
    (alternated), and more pairs while the check needs them: the check's trials are these
    runs, not runs of their own. A check within its limit after two pairs takes no third
    plain run: a trial's time saved before the first knob (a run of the whole script on a
    short job, 9 s of moving_bottleneck's 180 s)."""
    runs: list[TrialResult] = []
    attempts = 0

    def repeat(_where: Path | None = None) -> TrialResult:
        nonlocal attempts
        attempts += 1
        again = ledger.trial(config, f"{label(config)} (repeat)")
        if not again.ok and ledger.settings is not given and not runs:
            # the script ends before the calibrated steps: back to the steps asked for
            ledger.verdict(again, f"{again.outcome} with {ledger.settings.steps} timed steps: "
                                  f"back to {given.steps}")  # fmt: skip
            ledger.use_settings(given)
            again = ledger.trial(config, f"{label(config)} (repeat)")
        if _noise_run(ledger, again):
            runs.append(again)
        return again

    if fidelity is not None:
        _check_fidelity(ledger, fidelity, repeat, note)
    while attempts < NOISE_RUNS:
        repeat()
    return runs


def _check_fidelity(
    ledger: Ledger,
    fidelity: fidelity_check.Fidelity,
    repeat: Callable[[Path], TrialResult],
    note: Callable[[str], None],
) -> None:
    """The baseline's repeats against plain runs (tune/fidelity.py); Stop("fidelity")
    when a trial is confirmed to time another workload than the script's."""
    note("[bold]fidelity[/]: the script as it is vs the baseline's repeats, alternated")

    def plain(where: Path) -> float | str:
        ledger.check_time({})  # a plain run takes a baseline trial's time
        return fidelity_check.plain_run(ledger.settings, where)

    def told(side: str, ms: float | None) -> None:
        if side == "plain":  # a trial has its own line (the progress display's)
            timing = "failed" if ms is None else f"{ms:8.2f} ms/step"
            note(f"  {'plain script (one step hook)':<42} {timing}")

    fidelity_check.check_fidelity(
        ledger.settings, ledger.run_dir / "fidelity", fidelity.limit_pct, told,
        run_baseline=repeat, run_plain=plain, min_pairs=fidelity_check.PAIRS, fidelity=fidelity,
    )  # fmt: skip
    note(f"  {fidelity.line()}")
    if not fidelity.ok:
        raise Stop("fidelity")


def _without_disturbed_noise_runs(
    ledger: Ledger, runs: list[TrialResult], config: dict
) -> list[TrialResult]:
    """One disturbed run among the back-to-back baselines would make the noise, and with
    it every threshold, as large as the disturbance: it is replaced by another run."""
    for _ in range(MAX_RERUNS):
        if len(runs) < 2:
            return runs
        why, worst = None, None
        for run in sorted(runs, key=cost_ms, reverse=True):
            others = [r for r in runs if r is not run]
            why = disturbance_among(ledger, run, others)
            if why is not None:
                worst = run
                break
        if worst is None:
            return runs
        ledger.disturbed.add(id(worst))
        ledger.verdicts[ledger.index(worst)] = f"disturbed: {why}; run again"
        runs = [r for r in runs if r is not worst]
        again = ledger.trial(config, f"{label(config)} (repeat)")
        if _noise_run(ledger, again):
            runs.append(again)
    return runs


def _noise_run(ledger: Ledger, run: TrialResult) -> bool:
    """Its verdict, whether it succeeded or not (a failed repeat gets its line too)."""
    if run.ok:
        ledger.verdict(run, "reference: measures this machine's noise")
        return True
    named = exception_line(run.error or "")
    why = f"{run.outcome}" + (f" ({named})" if named else "")
    ledger.verdict(run, f"baseline repeat failed: {why}; left out of the noise")
    return False


def calibrated_steps(first: TrialResult, asked: int) -> int:
    """Timed steps that make a run's median stable to about STABLE_MEDIAN_PCT (pyperf
    calibrates its loops the same way): from the first run's own step jitter (the IQR as a
    standard deviation, 1.35 of them), the standard error of a median being 1.25 sd /
    sqrt(K); at least what was asked, at most MAX_CALIBRATED_STEPS or MAX_TIMED_S of steps."""
    steps = sorted(first.step_ms)
    if len(steps) < 4 or not first.ms_per_step:
        return asked
    q = statistics.quantiles(steps, n=4)
    sd_pct = 100 * (q[2] - q[0]) / 1.35 / first.ms_per_step
    wanted = math.ceil((1.25 * sd_pct / STABLE_MEDIAN_PCT) ** 2)
    by_time = int(MAX_TIMED_S * 1000 / first.ms_per_step)
    return max(asked, min(wanted, MAX_CALIBRATED_STEPS, by_time))
