"""Comparisons of a candidate configuration with its reference: the screen (one run against
the reference's most recent run: the nearest in time is the fairest on a drifting machine,
with a second look at a run slower beyond the clear margin), and the decision (the
sequential paired test, noise.judge).

Each pair runs its reference and its candidate in an order drawn at random (RMIT: a
neighbour's periodic load or the machine's drift favours neither), and its gain is the
candidate over the reference of the same pair. A disturbed run (disturbed.py) is left out and
its pair run again, at most MAX_RERUNS times per decision.

A knob that can be switched within one process (capture/switching.py) is compared there
instead: block pairs of the knob on and off in each process (`paired_switched`), whose
spread is their own (switched.py).

Every run, gain and decision goes into the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchpace import knobs as registry
from torchpace.capture.switching import MIN_BLOCK_STEPS
from torchpace.knobs.nproc_per_node import from_config as processes_in
from torchpace.tune.disturbed import MAX_RERUNS, set_aside_if_disturbed
from torchpace.tune.ledger import Ledger, cost_ms, drained, label, loader_workers
from torchpace.tune.noise import MIN_GAIN_PCT, Decision, Judgement, gain_pct, interval, judge
from torchpace.tune.switched import (
    MAX_SWITCHED_PAIRS,
    MAX_SWITCHED_RUNS,
    MIN_SWITCHED_RUNS,
    block_estimate,
    switched_judgement,
    switched_noise,
)
from torchpace.tune.trial import ENDED_EARLY, TrialResult, applied_config

# several values share a process only where the script holds this many whole rounds of
# their blocks (one is a single block pair a value: less than a screen of one value)
ROUNDS_AT_LEAST = 2


@dataclass
class Paired:
    """What a decision's pairs said: the judgement, the candidate's runs, the reference's
    runs (none when switched: each process is its own reference), and why the candidate
    is out when one of its runs failed or broke the loss (else None)."""

    judgement: Judgement
    runs: list[TrialResult]
    references: list[TrialResult]
    failed: str | None


def screen(
    ledger: Ledger, reference: dict, config: dict, name: str
) -> tuple[TrialResult, str | None]:
    """One run of `config` against the reference's latest run: (the run, why it is out).
    Out only when slower beyond the clear margin: one pair cannot refuse a small gain
    (a 5% gain under 5% pair noise screens below +3% a third of the time)."""
    switch = switch_for(ledger, reference, config)
    result = ledger.trial(config, name, switch)
    if switch and _ended_before_its_blocks(ledger, switch, result):
        switch, result = "", ledger.trial(config, name)  # an ordinary trial, as it will be
    why = ledger.reject_reason(result)
    if why is None and switch:
        if result.switched:
            return _screened_switched(ledger, result)
        cannot_switch(ledger, switch, result)  # an ordinary trial: screened as one
    if why is None and set_aside_if_disturbed(ledger, result):
        result = ledger.trial(config, name)  # once: then it is measured as it is
        why = ledger.reject_reason(result)
    # an ordinary trial (a switched one that could not switch included) against the
    # reference's latest run: the run before it in time, or one now where none ran
    reference_ms = _reference_ms(ledger, reference) if why is None else None
    if why is None and reference_ms is None:
        why = f"its reference, {label(reference)}, failed"
    if why is None:
        gain = gain_pct(cost_ms(result), reference_ms)
        ledger.gains[id(result)] = gain
        if gain < -ledger.clear_pct:
            return _second_look(ledger, reference, config, name, result, gain)
    ledger.verdict(result, why or f"{ledger.gains[id(result)]:+.1f}%: to be confirmed")
    return result, why


def switches_together(ledger: Ledger, reference: dict, name: str, values: list) -> bool:
    """Every value of the knob is switched within a process on top of ``reference``
    (``switch_for``), all of them in the same one (Knob.switches_arms)."""
    return registry.get(name).switches_arms(tuple(values)) and all(
        switch_for(ledger, reference, {**reference, name: value}) == name for value in values
    )


def can_share_a_process(
    ledger: Ledger, reference: dict, pairs: list[tuple[str, object]], settle: int
) -> bool:
    """Whether these (knob, value) pairs can be screened in one process on top of
    ``reference``, an arm each: every knob switches all its values there (``switch_for``,
    Knob.switches_arms), and the script, where its end is known, holds ROUNDS_AT_LEAST
    rounds of their blocks, each block starting with ``settle`` untimed steps
    (Knob.settle_estimate)."""
    values: dict[str, list] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    if not all(switches_together(ledger, reference, name, v) for name, v in values.items()):
        return False
    arms = 1 + len(pairs)
    settings = drained(ledger.settings, applied_config(reference, pairs))
    per_block = settle + ledger.block_steps_that_fit(settings, arms)
    length = ledger.job_length()
    return length is None or length[0] - settings.warmup >= ROUNDS_AT_LEAST * arms * per_block


def screen_arms(
    ledger: Ledger, reference: dict, pairs: list[tuple[str, object]], names: list[str]
) -> list[tuple[TrialResult, str | None]] | None:
    """Several (knob, value) pairs screened in one process, an arm each against the
    script's setting in every round of blocks (capture/switching.py): (the run, why it is
    out) per pair, in order, each read as a switched screen. The caller has checked
    ``can_share_a_process``. None where the process could not switch them, failed, or the
    script ended before a whole round: the pairs are then screened one by one (``screen``).
    On a GPU each process pays seconds of set-up (5-6 s of an H100 trial's 11-12): four
    worker counts, or a row's switchable knobs, in one process pay it once."""
    arms = 1 + len(pairs)
    together = f" ({len(pairs)} arms, one process)" if len(pairs) > 1 else " (switched)"
    results = ledger.trial_arms(reference, pairs, [name + together for name in names])
    first = results[0]
    ended = _ended_early(first)  # here: a round of this many arms did not fit, not the knob
    why = None if ended else ledger.reject_reason(first)
    if ended or (why is None and not first.switched and first.switch_note is None):
        why = f"the script ended before a whole round of its {arms} arms' blocks"
    elif why is None and not first.switched:
        # which knob could not switch: the note names it; those knobs go alone from here
        for name in dict(pairs):
            if name in (first.switch_note or ""):
                cannot_switch(ledger, name, first)
        why = first.switch_note or "not switched"
    if why is not None:  # one process for every arm: no arm's own failure
        for result in results:
            ledger.verdict(result, f"{why}: screened one by one")
        return None
    return [_screened_switched(ledger, result) for result in results]


def _screened_switched(ledger: Ledger, result: TrialResult) -> tuple[TrialResult, str | None]:
    """A switched screen: its block pairs against the script's setting in the same
    process. Out only when slower beyond their own clear margin."""
    ledger.gains[id(result)] = block_estimate(result)
    why = switched_screen_out(result)
    if why is None:
        ledger.verdict(result, f"{_switched_words(result)}: to be confirmed")
    else:
        ledger.verdict(result, why)
    return result, why


def _switched_words(result: TrialResult) -> str:
    gains = result.block_gains
    return (
        f"{block_estimate(result):+.1f}% over {len(gains)} block pairs, switched within the process"
    )


def switched_screen_out(result: TrialResult) -> str | None:
    """Why a switched screen is out, from its own block pairs (None: to be confirmed):
    slower beyond their clear margin, or bounded under what a change must be worth."""
    gains = result.block_gains
    gain, said = block_estimate(result), _switched_words(result)
    ci = interval(gains)
    if gain < -switched_noise(gains).clear_pct:
        return f"slower ({said})"
    if ci.high_pct is not None and ci.high_pct < MIN_GAIN_PCT:
        # its own block pairs bound it under what a change must be worth: the processes of
        # a decision could only refuse it (makemore's bf16: -9.6% at its screen, 90%
        # interval under 0, then two processes, 15 s of a 170 s tune, to say "slower")
        return (f"not worth a change ({said}; 90% interval {ci.low_pct:+.1f}% to "
                f"{ci.high_pct:+.1f}%: under {MIN_GAIN_PCT:.0f}%)")  # fmt: skip
    return None


def spent_its_share(ledger: Ledger, left_at_start: float | None, share: float | None) -> str:
    """Why a decision still undecided stops here: it has used its share of the time budget
    that was left when it began ("" while it has not, or without a time budget). On the
    README's quick-start example (150 s) glibc malloc screened +11.8%, clear at its screen,
    and its pairs (+11.8, -4.0, -1.5, +7.1, +11.6, -5.8, +1.5%) took the rest of the time
    while the fused optimizer and the device transforms were never screened."""
    if share is None or left_at_start is None:
        return ""
    used = left_at_start - max(ledger.seconds_left() or 0.0, 0.0)
    if used < share * left_at_start:
        return ""
    return (f"undecided within its share of the time ({used:.0f} s of the {left_at_start:.0f}"
            " s left when it began; the other knobs' turn)")  # fmt: skip


def _out_of_its_share(judgement: Judgement, spent: str) -> Judgement:
    """A decision stopped by spent_its_share: refused, its pairs' reading said after why."""
    return Judgement(Decision.NOT_FASTER, judgement.gains_pct, f"{spent}: {judgement.reason}")


def switch_for(ledger: Ledger, reference: dict, config: dict) -> str:
    """The knob a comparison can switch within each process (capture/switching.py):
    ``config`` is ``reference`` plus one switchable knob, on a one-process job, and no
    trial of that knob failed to switch it. "" otherwise: processes in pairs."""
    added = [name for name in config if name not in reference]
    same = all(config.get(name) == value for name, value in reference.items())
    if len(added) != 1 or not same or ledger.settings.nproc_per_node > 1:
        return ""
    if processes_in(config) or added[0] in ledger.not_switched:
        return ""
    knob = registry.get(added[0])
    if not knob.switches_beside_workers and loader_workers(config, ledger.script_workers):
        return ""
    fits = ledger.block_steps_that_fit(drained(ledger.settings, config)) >= MIN_BLOCK_STEPS
    return added[0] if knob.switches(config[added[0]]) and fits else ""


def _ended_before_its_blocks(ledger: Ledger, switch: str, result: TrialResult) -> bool:
    """A switched trial whose script simply ended before the plan's timed steps: the knob
    cannot be switched within this script (its blocks' settling steps do not fit it: 33 a
    block for 8 loader workers' batches in flight, on the planted crowded job's 30 steps,
    where every num-workers screen "crashed" and the knob was refused unmeasured). Said,
    and the knob's comparisons are processes in pairs from here on."""
    if not _ended_early(result):
        return False
    ledger.not_switched[switch] = "the script ended before its switched blocks' timed steps"
    ledger.verdict(result, f"not switched ({ledger.not_switched[switch]}): run again as an "
                           "ordinary trial")  # fmt: skip
    return True


def _ended_early(result: TrialResult) -> bool:
    """A switched trial whose script ended by itself before the plan's timed steps (every
    reading of a switched trial's failure starts here)."""
    return not result.ok and (result.error or "").startswith(ENDED_EARLY)


def cannot_switch(ledger: Ledger, switch: str, result: TrialResult) -> None:
    """A trial whose knob could not be switched is an ordinary trial; the knob's later
    comparisons are processes in pairs."""
    ledger.not_switched[switch] = result.switch_note or "not switched"
    result.knob_details.append(f"{switch} not switched: {ledger.not_switched[switch]}")


def _reference_ms(ledger: Ledger, reference: dict) -> float | None:
    """The reference's latest run, or, where it never ran (a refused fix climbed from under
    knobs kept since it was screened: ladder.py), one run of it now; None when that failed.
    moving_bottleneck's climb from two refused workers under the fused optimizer, kept
    after them, found no run of the two together and ended the tune (LookupError)."""
    try:
        return ledger.latest_ms(reference)
    except LookupError:
        pass
    ref = ledger.trial(reference, f"reference {label(reference)}")
    if ledger.reject_reason(ref) is not None:
        ledger.verdict(ref, f"reference failed: {ref.outcome}")
        return None
    ledger.verdict(ref, "reference: its first run, for the screens on top of it")
    return cost_ms(ref)


def _second_look(
    ledger: Ledger, reference: dict, config: dict, name: str, first: TrialResult, first_gain: float
) -> tuple[TrialResult, str | None]:
    """A candidate slower beyond the clear margin in its first run gets one more pair
    (its order drawn at random) before it is refused: one run can fall in a slow phase
    of a shared machine that the back-to-back baselines did not show (seen on the 2-core
    VM: steps switching between 27 and 40 ms/step for seconds at a time; fused AdamW,
    1.27x faster on gpt.py over whole runs, screened at -10.0% and was refused). Refused
    when both pairs are slower beyond the margin; otherwise the second run is the
    screened one, and the first pair's gain stays in its evidence (no pair is dropped
    for having been unlucky)."""
    ledger.verdict(first, f"{first_gain:+.1f}%: slower in its first run, one more pair")
    ref = result = None
    for is_reference in (True, False) if ledger.order.random() < 0.5 else (False, True):
        if is_reference:
            ref = ledger.trial(reference, f"reference {label(reference)} (second look)")
        else:
            result = ledger.trial(config, f"{name} (second look)")
    why = ledger.reject_reason(result)
    if why is not None:
        ledger.verdict(result, why)
        return result, why
    reference_ms = cost_ms(ref) if ref.ok else ledger.latest_ms(reference)
    ledger.verdict(ref, f"reference: second look at {name}")
    gain = gain_pct(cost_ms(result), reference_ms)
    ledger.gains[id(result)] = gain
    if gain < -ledger.clear_pct:
        why = f"slower ({first_gain:+.1f}% and {gain:+.1f}% in its first two runs)"
        ledger.verdict(result, why)
        return result, why
    ledger.prior_gains[id(result)] = [first_gain]
    ledger.verdict(result, f"{gain:+.1f}%: to be confirmed (first run {first_gain:+.1f}%)")
    return result, None


def paired(
    ledger: Ledger,
    reference: dict,
    config: dict,
    name: str,
    screened: TrialResult | None = None,
    min_pairs: int = 1,
    prior: list[float] | None = None,
    share: float | None = None,
    afresh: bool = False,
) -> Paired:
    """Reference and candidate in pairs, each pair's order drawn at random, until the
    sequential test decides. `screened` is a candidate run already measured against the
    reference's latest run: its pair counts. `prior`: gains of earlier pairs of the very
    same comparison, which count; `min_pairs` new pairs are run whatever they say. `share`:
    the part of the time budget left now that the decision may take while undecided (the
    ladder's, while other knobs wait: `spent_its_share`). A knob that can be switched within
    a process is compared there instead (`paired_switched`); `afresh`: without the block
    pairs of an earlier decision of the same comparison (the ladder's second look)."""
    left_at_start = ledger.seconds_left() if share is not None else None
    switch = switch_for(ledger, reference, config)
    if switch and (screened is None or screened.switched):
        return paired_switched(ledger, reference, config, name, switch, screened, share, afresh)
    runs = [screened] if screened is not None else []
    gains = list(prior or [])
    n_prior = len(gains)  # already in the ledger's decisions: not counted twice in the spread
    gains += [ledger.gains[id(screened)]] if screened is not None else []
    first_new = len(gains)
    references: list[TrialResult] = []
    judgement = judge(gains, ledger.noise)
    reruns = 0
    while judgement.decision == Decision.UNDECIDED or len(gains) - first_new < min_pairs:
        if len(gains) - first_new >= min_pairs and (
            spent := spent_its_share(ledger, left_at_start, share)
        ):
            judgement = _out_of_its_share(judgement, spent)
            break
        pair = len(gains) + 1
        ref, result = _pair(ledger, reference, config, name, pair)
        why = ledger.reject_reason(result)
        if why is not None:
            ledger.verdict(result, why)
            ledger.record_decision(reference, config, gains[n_prior:])
            return Paired(judgement, runs, references, why)
        if not ref.ok:  # the reference itself failed (rare): measured as it is next pair
            ledger.verdict(ref, f"reference failed: {ref.outcome}")
            reruns += 1
            if reruns > MAX_RERUNS:
                return Paired(judgement, runs, references, f"its reference failed: {ref.outcome}")
            continue
        if reruns < MAX_RERUNS and (
            set_aside_if_disturbed(ledger, ref) or set_aside_if_disturbed(ledger, result)
        ):
            reruns += 1
            for other in (ref, result):
                if id(other) not in ledger.disturbed:
                    ledger.disturbed.add(id(other))  # a half pair is no evidence
                    ledger.verdict(other, "its pair was disturbed: run again")
            continue
        ledger.verdict(ref, f"reference: paired with {name}")
        if reference == {}:
            ledger.note_baseline(ref)
        references.append(ref)
        gains.append(gain_pct(cost_ms(result), cost_ms(ref)))
        ledger.gains[id(result)] = gains[-1]
        runs.append(result)
        judgement = judge(gains, ledger.noise)
        if judgement.decision == Decision.NOT_FASTER and len(gains) - first_new < min_pairs:
            judgement = Judgement(Decision.UNDECIDED, judgement.gains_pct, judgement.reason)
        ledger.verdict(result, f"pair {pair}: {gains[-1]:+.1f}%; {judgement.reason}")
    ledger.record_decision(reference, config, gains[n_prior:])
    return Paired(judgement, runs, references, None)


def _pair(
    ledger: Ledger, reference: dict, config: dict, name: str, pair: int
) -> tuple[TrialResult | None, TrialResult]:
    """One pair, its order drawn at random; a candidate that fails or breaks the loss
    ends it before its reference runs (the reference is then None)."""
    ref_label = f"reference {label(reference)} (pair {pair})"
    first_is_reference = ledger.order.random() < 0.5
    ref = result = None
    for is_reference in (first_is_reference, not first_is_reference):
        if is_reference:
            ref = ledger.trial(reference, ref_label)
        else:
            result = ledger.trial(config, f"{name} (pair {pair})")
            if ledger.reject_reason(result) is not None:
                break
    return ref, result


def paired_switched(
    ledger: Ledger,
    reference: dict,
    config: dict,
    name: str,
    switch: str,
    screened: TrialResult | None,
    share: float | None = None,
    afresh: bool = False,
) -> Paired:
    """The sequential test on block pairs: each process switches the knob on and off in
    BLOCK_PAIRS block pairs (capture/switching.py), and every block pair of every
    process counts, at least MIN_SWITCHED_RUNS processes (a new one whatever the screen
    said), at most MAX_SWITCHED_RUNS. The clear margin is the block pairs' own spread.
    A process that could not switch the knob ends it: processes in pairs from there on.
    `share`, `afresh`: as `paired`'s."""
    left_at_start = ledger.seconds_left() if share is not None else None
    runs = [screened] if screened is not None else []
    earlier = [] if afresh else [
        (gains, n) for ref, cand, gains, n in ledger.switched_decisions
        if ref == reference and cand == config
    ]  # fmt: skip
    prior = [g for gains, _ in earlier for g in gains]
    processes = sum(n for _, n in earlier)  # theirs and this decision's, in the words
    gains = prior + [g for run in runs for g in run.block_gains]
    new = 0
    most = MAX_SWITCHED_PAIRS
    judgement = switched_judgement(gains, processes + len(runs), most)
    while judgement.decision == Decision.UNDECIDED or len(runs) < MIN_SWITCHED_RUNS or not new:
        if len(runs) >= MAX_SWITCHED_RUNS:  # a short script's few pairs: decided as they are
            judgement = switched_judgement(gains, processes + len(runs), len(gains))
            break
        if (
            len(runs) >= MIN_SWITCHED_RUNS
            and new
            and (spent := spent_its_share(ledger, left_at_start, share))
        ):
            judgement = _out_of_its_share(judgement, spent)
            break
        result = ledger.trial(config, f"{name} (switched {len(runs) + 1})", switch)
        new += 1
        if _ended_before_its_blocks(ledger, switch, result):
            return paired(ledger, reference, config, name)
        why = ledger.reject_reason(result)
        if why is not None:
            ledger.verdict(result, why)
            return Paired(judgement, runs, [], why)
        if not result.switched:
            cannot_switch(ledger, switch, result)
            ledger.verdict(result, f"not switched ({ledger.not_switched[switch]}): "
                                   "decided by processes in pairs")  # fmt: skip
            return paired(ledger, reference, config, name)
        runs.append(result)
        gains += result.block_gains
        ledger.gains[id(result)] = block_estimate(result)
        judgement = switched_judgement(gains, processes + len(runs), most)
        if len(runs) < MIN_SWITCHED_RUNS:
            judgement = Judgement(Decision.UNDECIDED, judgement.gains_pct, judgement.reason)
        ledger.verdict(
            result,
            f"{ledger.gains[id(result)]:+.1f}% over its "
            f"{len(result.block_gains)} block pairs; {judgement.reason}",
        )
    ledger.switched_decisions.append((reference, config, gains[len(prior) :], len(runs)))
    return Paired(judgement, runs, [], None)
