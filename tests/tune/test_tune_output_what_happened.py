"""tune's output says what happened: the baseline row when no rung was settled, why nothing
was kept (measured and refused, or never tried and what budget they need), the MFU label
only with figures, and one last word per trial (issue 36)."""

from __future__ import annotations

import io

from rich.console import Console

from torchpace.report.roofline import tune_lines
from torchpace.tune import report
from torchpace.tune.result import KnobOutcome, KnobStatus, Rung, TuneResult
from torchpace.tune.trial import Outcome, TrialResult


def _baseline(ms: float, wall_s: float = 50.0) -> TrialResult:
    return TrialResult("baseline", {}, Outcome.OK, step_ms=[ms] * 5, samples_per_step=32.0,
                       peak_bytes=2**30, wall_s=wall_s)  # fmt: skip


def _stopped_before_a_rung() -> TuneResult:
    result = TuneResult(stopped="time-budget", stopped_by="--time-budget 420 s", wall_s=420.0)
    result.trials = [_baseline(4000.0), _baseline(4100.0), _baseline(4200.0)]
    result.knobs = [
        KnobOutcome("num-workers", KnobStatus.NOT_TRIED, "not tried: --time-budget 420 s"),
        KnobOutcome("threads", KnobStatus.NOT_TRIED, "not tried: --time-budget 420 s"),
        KnobOutcome("batch-size", KnobStatus.NOT_TRIED, "opt-in: --allow-batch-size"),
    ]
    return result


def _render(result: TuneResult) -> str:
    text = io.StringIO()
    report.render(result, Console(file=text, width=200))
    return text.getvalue()


def test_a_tune_stopped_before_its_first_rung_shows_the_baseline_row():
    out = _render(_stopped_before_a_rung())
    row = next(line for line in out.splitlines() if "baseline" in line)
    assert "baseline (3 runs)" in row and "4100.0" in row and "1.00x" in row
    assert report.ladder_table(TuneResult()).row_count == 0  # no run at all: no row made up


def test_nothing_kept_says_never_tried_and_the_budget_they_need():
    text = report.nothing_kept_text(_stopped_before_a_rung())
    assert text.startswith("no knob was measured; never tried, --time-budget 420 s ran out")
    assert "num-workers, threads" in text and "batch-size" not in text  # opt-in: not budget
    # 2 knobs x 2 pairs x 2 runs x 50 s
    assert "at least 400 s more" in text and "--time-budget 820" in text


def test_nothing_kept_says_which_knobs_were_measured_and_refused():
    result = TuneResult()
    result.knobs = [KnobOutcome("threads", KnobStatus.REJECTED, "gained 0.5%"),
                    KnobOutcome("num-workers", KnobStatus.NOT_APPLICABLE, "no loader")]  # fmt: skip
    text = report.nothing_kept_text(result)
    assert text == (
        "no knob made this script measurably faster here (measured and not kept: threads)"
    )
    result.knobs = result.knobs[1:]
    assert report.nothing_kept_text(result).startswith("no knob that applies")


def test_the_mfu_label_only_with_figures():
    sol = {"flops_per_step": 1e9, "peak_flop_per_s": 1e11, "peak_source": "measured here",
           "ideal_ms": 10.0, "final_fraction": None,
           "rungs": [{"label": "baseline", "fraction": None}]}  # fmt: skip
    (line,) = tune_lines(sol)
    assert "MFU" not in line and line.endswith("is 10 ms")
    sol["rungs"][0]["fraction"] = 0.25
    assert tune_lines(sol)[0].endswith("each rung's MFU: baseline 25.0%")


def test_a_noise_run_found_disturbed_later_gets_that_word_on_screen_too():
    result = TuneResult()
    result.trials = [_baseline(100.0), _baseline(100.0), _baseline(180.0)]
    result.ladder = [Rung("baseline", {}, 100.0, 320.0, 1.0, None, False)]
    result.verdicts = {
        1: "reference: measures this machine's noise",
        2: "disturbed: 80% slower than the others; run again",
    }
    out = _render(result)
    assert "trial 3 (baseline), shown above as a noise reference, was then found disturbed: " \
        "80% slower than the others; run again" in out  # fmt: skip
    result.verdicts[2] = "disturbed: busy neighbour; pair run again"  # shown when it came
    assert "shown above" not in _render(result)
