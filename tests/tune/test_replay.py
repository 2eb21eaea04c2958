"""The search's decisions replayed on recorded trial times, against a golden file.

Each scenario drives the Tuner with a fake trial runner: every trial's step times come from
a fixed table (a configuration's ms/step, a cycle of run-to-run jitter, a few disturbed
runs, warm-up costs, block pairs for switched trials), never from a process. What the
search made of them (the trials it asked for and in which order, every verdict, every
knob's status and reason, the ladder, the final check, the figures) is compared with
tests/tune/fixtures/replay.json, written on the search as it was before it was split into
parts: the same trials must give the same decisions.

The fakes are installed wherever the tune package holds the registry's ``get``/``NAMES``
and the trial runner ``run_trial`` (by identity), so that the test does not depend on how
the search is split into modules.

To rewrite the golden file after a deliberate change of behaviour:
    TORCHPACE_REPLAY_WRITE=1 python -m pytest tests/tune/test_replay.py
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import itertools
import json
import os
import pkgutil
from pathlib import Path

import torchpace.knobs as registry
import torchpace.tune as tune_package
from torchpace.env.cpu import CpuFacts
from torchpace.facts.run import LoaderFacts, RunFacts, Status
from torchpace.knobs import nproc_per_node
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.report.memory_model import BatchHeadroom
from torchpace.tune import trial as trial_module
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings

GOLDEN = Path(__file__).parent / "fixtures" / "replay.json"
LOSSES = {i: 2.3 for i in range(40)}
# each run's own steps around its ms/step: a spread of about 0.4%
STEP_SHAPE = (-0.004, -0.002, 0.0, 0.002, 0.004, 0.002, 0.0, -0.002)


class ReplayKnob(Knob):
    def __init__(self, name, values, *, applicable=True, numerics=False, depends_on=(),
                 opt_in=None, switchable=False, answers=(), idle_on_top=None):  # fmt: skip
        self.name = name
        self.title = name
        self._values = tuple(values)
        self._applicable = applicable
        self.changes_numerics = numerics
        self.depends_on = depends_on
        self.opt_in = opt_in
        self.switchable = switchable
        self.answers = answers
        self._idle_on_top = idle_on_top

    def plan(self, ctx):
        if not self._applicable:
            return not_applicable(f"{self.name} does not apply here")
        return Plan(self._values, "")

    def on_top_of(self, config):
        return self._idle_on_top(config) if self._idle_on_top else None


class Recorded:
    """The fake trial runner: ``times(config)`` ms/step, times a cycle of jitter (% per
    trial), times ``spikes[index]`` for disturbed runs; ``warmup(config)``: the warm-up
    steps' ms; ``fails``: config predicate -> Outcome; ``gains(config)``: a switched trial's
    block pairs' gains. Advances the fake clock by the trial's wall time."""

    def __init__(self, times, jitter=(1.0, -1.0), spikes=None, warmup=None, fails=None,
                 gains=None, samples=None, losses=None, shape=STEP_SHAPE):  # fmt: skip
        self.times = times
        self.jitter = itertools.cycle(jitter)
        self.spikes = spikes or {}
        self.warmup = warmup
        self.fails = fails or (lambda config, index: None)
        self.gains = gains
        self.samples = samples or (lambda config: 32)
        self.losses = losses or (lambda config: LOSSES)
        self.shape = shape
        self.now = 0.0
        self.calls: list[dict] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, settings: TrialSettings, config, label, out_dir):
        index = len(self.calls)
        self.calls.append({
            "label": label, "config": dict(config), "steps": settings.steps,
            "warmup": settings.warmup, "switch": settings.switch,
            "switch_seed": settings.switch_seed, "timeout_s": settings.timeout_s,
        })  # fmt: skip
        failed = self.fails(config, index)
        if failed is not None:
            self.now += 3.0
            return TrialResult(label, dict(config), failed, error="boom\nRuntimeError: x",
                               wall_s=3.0)  # fmt: skip
        ms = self.times(config) * (1 + next(self.jitter) / 100) * self.spikes.get(index, 1.0)
        steps = [ms * (1 + self.shape[i % len(self.shape)]) for i in range(settings.steps)]
        warm = [self.warmup(config) if self.warmup else ms] * settings.warmup
        wall = 2.0 + (sum(steps) + sum(warm)) / 1000
        self.now += wall
        result = TrialResult(
            label, dict(config), Outcome.OK, step_ms=steps, warmup_ms=warm,
            losses=dict(self.losses(config)), measured_from=settings.warmup,
            samples_per_step=self.samples(config), wall_s=round(wall, 3),
            peak_bytes=(100 + config.get("batch-size", 32)) * 2**20, switch=settings.switch,
        )  # fmt: skip
        if settings.switch and self.gains is not None:
            result.reference_ms = [self.times({}) for _ in range(5)]
            result.block_gains = list(self.gains(config, index))
        return result


class Progress:
    def __init__(self):
        self.lines: list[str] = []

    def trial_started(self, index, label):
        self.lines.append(f"start {index} {label}")

    def trial_done(self, result, verdict, best_speedup):
        self.lines.append(f"done {result.label}: {verdict} (best {best_speedup})")


def _context(**kw) -> TuneContext:
    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=["SGD"],
        optimizer_steps_per_step=1.0, warmup=3, steps_requested=5, status=Status.COMPLETE,
    )  # fmt: skip
    facts.loaders = [LoaderFacts(location="train.py:9", num_workers=0, pin_memory=False,
                                 persistent_workers=False, prefetch_factor=None, drop_last=False,
                                 dataset_len=10_000, dataset_type="D", batch_size=32,
                                 batches_seen=10)]  # fmt: skip
    cpu = CpuFacts("cpu", 2, 2, 2, 1, ("AVX2",), "AVX2")
    return TuneContext(facts, cpu, "cpu", None, False, (2, 14), **kw)


def _install(monkeypatch, knobs: list[Knob], runner: Recorded) -> None:
    """The fake registry and trial runner, wherever the tune package holds the real ones."""
    by_name = {k.name: k for k in knobs}
    replaced = {
        "get": (registry.get, lambda name: by_name[name]),
        "NAMES": (registry.NAMES, tuple(by_name)),
        "run_trial": (trial_module.run_trial, runner),
    }
    modules = [registry, trial_module]
    for info in pkgutil.iter_modules(tune_package.__path__):
        modules.append(importlib.import_module(f"{tune_package.__name__}.{info.name}"))
    for module in modules:
        for name, (original, fake) in replaced.items():
            if getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, fake)


def _tuner_class():
    return importlib.import_module("torchpace.tune.search").Tuner


def _budget(**kw):
    return importlib.import_module("torchpace.tune.search").Budget(**kw)


# --- the scenarios --------------------------------------------------------------------------


def clear_win_and_a_loss():
    knobs = [
        ReplayKnob("fast", [True], answers=("TP101",)),
        ReplayKnob("slow", [True]),
        ReplayKnob("nothing", [True]),
        ReplayKnob("ddp", [True], applicable=False),
    ]
    ms = {"fast": 70.0, "slow": 130.0, "nothing": 100.0}

    def times(config):
        out = 100.0
        for name in config:
            out *= ms[name] / 100
        return out

    return knobs, Recorded(times), {"ctx": _context(finding_codes=frozenset({"TP101"}))}


def small_gain_refused():
    knobs = [ReplayKnob("small", [True])]
    jitter = (0.0, 2.5, -2.5, 0.0, 3.0, -2.0, -1.5, 2.0, 2.5, -3.0, 1.0, -1.0)
    return knobs, Recorded(lambda c: 96.0 if c.get("small") else 100.0, jitter=jitter), {}


def small_win_kept_after_pairs():
    knobs = [ReplayKnob("small", [True])]
    jitter = (0.0, 3.0, -3.0, 1.0, 2.0, -2.0, -1.0, 1.0, 3.0, -3.0)
    return knobs, Recorded(lambda c: 95.0 if c.get("small") else 100.0, jitter=jitter), {}


def disturbed_runs():
    knobs = [ReplayKnob("a", [True]), ReplayKnob("b", [True])]

    def times(config):
        return 100.0 * (0.8 if config.get("a") else 1.0) * (0.9 if config.get("b") else 1.0)

    # a noise run, a screen, and a pair's reference taken by a neighbour
    return knobs, Recorded(times, spikes={2: 4.0, 5: 3.0, 8: 5.0, 13: 5.0, 33: 4.0}), {}


def switched_knob():
    knobs = [ReplayKnob("fused", [True], switchable=True), ReplayKnob("other", [True])]

    def gains(config, index):
        return [5.0 + ((index * 7 + k * 3) % 5 - 2) * 0.4 for k in range(8)]

    def times(config):
        return 100.0 / (1.05 if config.get("fused") else 1.0) / (1.2 if config.get("other") else 1)

    return knobs, Recorded(times, gains=gains), {}


def one_time_cost():
    knobs = [ReplayKnob("compiled", [True]), ReplayKnob("dear", [True]),
             ReplayKnob("cheap", [True])]  # fmt: skip

    def times(config):
        factors = {"compiled": 0.8, "dear": 0.97, "cheap": 0.9}
        out = 100.0
        for name in config:
            out *= factors[name]
        return out

    def warmup(config):
        if config.get("compiled"):
            return 2000.0  # 6 s in 3 warm-up steps
        if config.get("dear"):
            return 4000.0
        return times(config)

    return knobs, Recorded(times, warmup=warmup), {"job_steps": 300}


def batch_size():
    knobs = [ReplayKnob("fast", [True]),
             ReplayKnob("batch-size", [64, 128, 256], opt_in="--allow-batch-size")]  # fmt: skip

    def times(config):
        bs = config.get("batch-size", 32)
        return (80.0 + 0.5 * bs) * (0.8 if config.get("fast") else 1.0)

    def fails(config, index):
        return Outcome.OUT_OF_MEMORY if config.get("batch-size", 0) >= 200 else None

    headroom = BatchHeadroom(batch_size=32, largest_batch_estimate=189,
                             largest_batch_at_limit=210, fixed_bytes=0, per_sample_bytes=2**20,
                             usable_bytes=2**31, capacity_bytes=2**31,
                             capacity_kind="RLIMIT_DATA", capacity_text="2 GiB",
                             how="")  # fmt: skip
    runner = Recorded(times, fails=fails, samples=lambda c: c.get("batch-size", 32))
    return knobs, runner, {"ctx": _context(allow_batch_size=True, batch_headroom=headroom)}


def budget_ends_mid_screens():
    knobs = [ReplayKnob(n, [True]) for n in ("a", "b", "c", "d")]
    knobs.append(ReplayKnob("batch-size", [64], opt_in="--allow-batch-size"))
    knobs.append(ReplayKnob("na", [True], applicable=False))
    ms = {"a": 97.0, "b": 102.0, "c": 60.0, "d": 90.0}

    def times(config):
        out = 100.0
        for name in config:
            out *= ms[name] / 100
        return out

    return knobs, Recorded(times), {"budget": _budget(trials=8)}


def time_budget_ends_during_pairs():
    knobs = [ReplayKnob("a", [True]), ReplayKnob("b", [1, 2])]
    jitter = (0.0, 2.5, -2.5, 0.0, 3.0, -2.0)

    def times(config):
        return 100.0 * (0.5 if config.get("a") else 1.0) * (0.97 if config.get("b") else 1.0)

    return knobs, Recorded(times, jitter=jitter), {"budget": _budget(seconds=40.0)}


def interrupted():
    knobs = [ReplayKnob("a", [True]), ReplayKnob("b", [True]), ReplayKnob("c", [True])]

    def fails(config, index):
        return Outcome.INTERRUPTED if index == 9 else None

    def times(config):
        return 100.0 * (0.5 if config.get("a") else 1.0) * (0.97 if config.get("b") else 1.0)

    return knobs, Recorded(times, fails=fails, jitter=(0.0, 2.0, -2.0, 1.0)), {}


def _no_workers(config):
    return None if config.get("workers") else "no workers to prefetch"


def ranking_runners_up_and_dependents():
    knobs = [
        ReplayKnob("workers", [0, 1, 2], answers=("TP101",)),
        ReplayKnob("persistent", [True], depends_on=("workers",)),
        ReplayKnob("prefetch", [4], depends_on=("workers",), idle_on_top=_no_workers),
        ReplayKnob("lonely", [True], depends_on=("missing",)),
    ]  # fmt: skip
    table = {0: 80.0, 1: 78.0, 2: 77.0}

    def times(config):
        out = table.get(config.get("workers"), 100.0)
        return out * (0.9 if config.get("persistent") else 1.0)

    # workers=2's pairs fall in a slow phase: it is refused, and the runner-up decided
    seen = {"n": 0}

    def slow_phase(config):
        if config.get("workers") == 2 and "persistent" not in config:
            seen["n"] += 1
            return 105.0 if seen["n"] > 1 else 77.0
        return times(config)

    return knobs, Recorded(slow_phase), {}


def final_check_drops_the_top_rung():
    knobs = [ReplayKnob("a", [True]), ReplayKnob("b", [True])]
    runs = {"n": 0}

    def times(config):
        runs["n"] += 1
        if config.get("a") and config.get("b") and runs["n"] > 14:
            return 130.0  # fast on the ladder, slow in the final check
        return 100.0 * (0.8 if config.get("a") else 1.0) * (0.9 if config.get("b") else 1.0)

    return knobs, Recorded(times), {}


def broken_loss_and_a_crash():
    knobs = [ReplayKnob("lossy", [True], numerics=True), ReplayKnob("crashy", [True]),
             ReplayKnob("good", [True])]  # fmt: skip

    def losses(config):
        return {i: 9.9 for i in range(40)} if config.get("lossy") else LOSSES

    def fails(config, index):
        return Outcome.CRASHED if config.get("crashy") else None

    def times(config):
        return 60.0 if config.get("lossy") else 80.0 if config.get("good") else 100.0

    return knobs, Recorded(times, losses=losses, fails=fails), {"loss_tolerance": 0.05}


def processes_per_node():
    knobs = [ReplayKnob("threads", [1]), nproc_per_node.KNOB]

    def times(config):
        if config.get("nproc-per-node") == 1:
            return 45.0
        return 100.0 * (0.8 if "threads" in config else 1.0)

    def samples(config):
        return 32 * config.get("nproc-per-node", 2)

    ctx = _context(nproc_per_node=2, allow_batch_size=True)
    settings = TrialSettings("train.py", [], nproc_per_node=2)
    return knobs, Recorded(times, samples=samples), {"ctx": ctx, "settings": settings}


def calibrated_steps():
    knobs = [ReplayKnob("a", [True])]
    shape = (-0.1, 0.05, 0.0, 0.1, -0.05, 0.02)  # steps scattered by 10%: more of them
    runner = Recorded(lambda c: 20.0 if c.get("a") else 25.0, shape=shape)
    return knobs, runner, {"calibrate": True}


SCENARIOS = [
    clear_win_and_a_loss,
    small_gain_refused,
    small_win_kept_after_pairs,
    disturbed_runs,
    switched_knob,
    one_time_cost,
    batch_size,
    budget_ends_mid_screens,
    time_budget_ends_during_pairs,
    interrupted,
    ranking_runners_up_and_dependents,
    final_check_drops_the_top_rung,
    broken_loss_and_a_crash,
    processes_per_node,
    calibrated_steps,
]


def _plain(value):
    """JSON-ready, floats to 9 significant digits (the same arithmetic in another order
    may differ in the last bit)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


def replay(monkeypatch, scenario) -> dict:
    knobs, runner, kw = scenario()
    _install(monkeypatch, knobs, runner)
    ctx = kw.pop("ctx", None) or _context()
    settings = kw.pop("settings", None) or TrialSettings("train.py", [])
    progress = Progress()
    tuner = _tuner_class()(
        settings, ctx, Path("/nonexistent"), progress, clock=runner.clock, started=0.0, **kw
    )
    result = tuner.run()
    return _plain({
        "trials": runner.calls,
        "progress": progress.lines,
        "verdicts": result.verdicts,
        "knobs": result.knobs,
        "ladder": result.ladder,
        "best": result.best,
        "final_speedup": result.final_speedup,
        "final_gains_pct": result.final_gains_pct,
        "final_switched_runs": result.final_switched_runs,
        "stopped": result.stopped,
        "stopped_by": result.stopped_by,
        "wall_s": result.wall_s,
        "batch_check": result.batch_check,
        "figures": result.figures,
        "steps": result.steps,
        "noise": result.noise,
        "pair_sd_pct": result.pair_sd_pct,
        "detectable_pct": result.detectable_pct,
    })  # fmt: skip


def test_the_search_gives_the_recorded_verdicts(monkeypatch):
    got = {}
    for scenario in SCENARIOS:
        with monkeypatch.context() as patch:
            got[scenario.__name__] = replay(patch, scenario)
    if os.environ.get("TORCHPACE_REPLAY_WRITE"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"scenario {name} decided otherwise"


def test_the_golden_file_records_each_idea():
    """The golden file is no empty record: each scenario shows what it is named for."""
    want = json.loads(GOLDEN.read_text())

    def status(scenario, knob):
        return next(k for k in want[scenario]["knobs"] if k["knob"] == knob)["status"]

    def verdicts(scenario):
        return list(want[scenario]["verdicts"].values())

    assert status("clear_win_and_a_loss", "fast") == "kept"
    assert status("clear_win_and_a_loss", "slow") == "rejected"
    assert status("small_gain_refused", "small") == "rejected"
    assert status("small_win_kept_after_pairs", "small") == "kept"
    assert any("pair 3" in v for v in verdicts("small_win_kept_after_pairs"))
    assert sum("disturbed" in v for v in verdicts("disturbed_runs")) >= 2
    assert any(t["switch"] for t in want["switched_knob"]["trials"])
    assert status("switched_knob", "fused") == "kept"
    assert status("one_time_cost", "dear") == "rejected"
    assert "not repaid" in want["one_time_cost"]["knobs"][1]["reason"]
    assert want["batch_size"]["batch_check"] is not None
    assert want["budget_ends_mid_screens"]["stopped"] == "budget"
    assert status("budget_ends_mid_screens", "a") == "undecided"
    assert status("budget_ends_mid_screens", "d") == "not-tried"
    assert want["time_budget_ends_during_pairs"]["stopped"] == "time-budget"
    assert want["interrupted"]["stopped"] == "interrupted"
    assert status("final_check_drops_the_top_rung", "b") == "rejected"
    assert want["calibrated_steps"]["steps"] > 10
