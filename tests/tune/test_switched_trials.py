"""Switched trials (capture/switching.py): a knob switched on and off in blocks within one
process, against the script's own setting, so that a machine whose processes run at
different speeds (gpt.py on the shared 2-core VM: ~20.5 or ~25 ms/step, drawn per process)
does not bury a 5% knob in a 20% process-to-process spread."""

import itertools
import random
import statistics

import pytest

from torchpace.capture.runner import capture_script
from torchpace.capture.spec import CaptureSpec, Mode, SpecError
from torchpace.capture.switching import (
    BLOCK_PAIRS,
    MIN_SETTLING_ROUNDS,
    SETTLE_STEPS,
    SwitchedBlocks,
    arm_gains,
    block_gains,
    block_steps,
)
from torchpace.facts.run import RunFacts, Status, StepPhase, StepRecord
from torchpace.knobs.base import Switch
from torchpace.tune.trial import from_facts


def loop(setup: str, printed: str) -> str:
    """A small training loop: `setup` builds `model` and `x`, `printed` is shown each step."""
    return f"""
import torch
{setup}
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
for step in range(400):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print({printed})
"""


# anomaly detection on (the script's) costs several times a step: the switch's effect is
# unmistakable in every block pair, whatever the machine
ANOMALY = loop(
    "torch.autograd.set_detect_anomaly(True)\n"
    "model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])\n"
    "x = torch.randn(32, 64)",
    '"anomaly", torch.is_anomaly_enabled()',
)
FUSED = loop(
    "model = torch.nn.Linear(8, 1)\nx = torch.randn(16, 8)",
    '"fused", optimizer.param_groups[0]["fused"]',
)


def switched(tmp_path, source, knobs, switch, steps=8, arms=()):
    script = tmp_path / "train.py"
    script.write_text(source)
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, knobs=knobs, switch=switch,
                       warmup=2, steps=steps, seed=0, record_loss=True, timeout_s=240,
                       arms=[list(arm) for arm in arms])  # fmt: skip
    return capture_script(spec, output=tmp_path / "output.log").facts


def test_the_plan_pairs_blocks_in_random_order_and_ends_with_the_knob_on():
    calls = []
    plan = SwitchedBlocks(calls.append, timed_steps=16, seed=3)
    per_block = SETTLE_STEPS + block_steps(16)
    assert plan.steps == 2 * BLOCK_PAIRS * per_block
    arms = [on for on, _ in plan.plan]
    blocks = [arms[i] for i in range(0, len(arms), per_block)]
    assert all(a != b for a, b in zip(blocks[0::2], blocks[1::2], strict=True))
    firsts = blocks[0::2]
    # AB BA AB BA: each two pairs cancel a drift within the run (steps slowing toward an
    # epoch's end); which side leads is drawn per trial, from the seed the parent draws
    assert all(a != b for a, b in itertools.pairwise(firsts))
    leads = {SwitchedBlocks(lambda on: None, 16, seed).plan[0][0] for seed in range(20)}
    assert leads == {True, False}
    timed = [t for _, t in plan.plan]
    assert timed[:per_block] == [False] + [True] * (per_block - 1)  # each block settles first
    while plan.advance():
        pass
    assert calls[-1] == 1  # the trial's last check reads the knob (its first value) in force
    assert len(calls) == 1 + sum(a != b for a, b in itertools.pairwise(arms)) + 1


def test_a_switch_that_settles_long_takes_fewer_longer_rounds_in_the_same_steps():
    plan = SwitchedBlocks(Switch(lambda arm: None, settle_steps=9), timed_steps=80, seed=1)
    planned = 2 * BLOCK_PAIRS * (SETTLE_STEPS + block_steps(80))  # what the parent fitted
    assert plan.rounds == MIN_SETTLING_ROUNDS and plan.steps == planned
    per_block = plan.steps // (2 * plan.rounds)
    timed = [t for _, t in plan.plan[:per_block]]
    assert timed == [False] * 9 + [True] * (per_block - 9) and per_block - 9 >= 9
    arms = [arm for arm, _ in plan.plan[::per_block]]
    assert sorted(arms) == [0] * plan.rounds + [1] * plan.rounds
    assert all(a != b for a, b in zip(arms[0::2], arms[1::2], strict=True))  # still paired
    # three arms: the same trade, every round a block of each, the fitted steps kept (at 8
    # rounds of 11-step blocks this plan overran a 192-step script by 72 steps)
    three = SwitchedBlocks(Switch(lambda arm: None, settle_steps=9), timed_steps=48, seed=2, arms=3)
    assert three.rounds == MIN_SETTLING_ROUNDS
    assert three.steps == 3 * BLOCK_PAIRS * (SETTLE_STEPS + block_steps(48))
    # a settle short beside the block keeps BLOCK_PAIRS rounds, as an ordinary switch does
    short = Switch(lambda arm: None, settle_steps=3)
    assert SwitchedBlocks(short, timed_steps=80, seed=1).rounds == BLOCK_PAIRS
    assert SwitchedBlocks(lambda arm: None, timed_steps=16, seed=1).rounds == BLOCK_PAIRS


def test_block_gains_pair_blocks_as_planned_even_when_two_of_an_arm_meet():
    # pair 1: off then on; pair 2: on then off; the two "on" blocks meet in the middle
    steps = [(False, None), (False, 20.0), (False, 20.0),
             (True, None), (True, 10.0), (True, 10.0),
             (True, None), (True, 16.0), (True, 16.0),
             (False, None), (False, 20.0), (False, 20.0)]  # fmt: skip
    assert block_gains(steps) == pytest.approx([100.0, 25.0])
    # the slowest step of a block of four or more is left out: one burst moves no block
    burst = [(True, None), *[(True, 10.0)] * 3, (True, 90.0), (False, None), *[(False, 11.0)] * 4]
    assert block_gains(burst) == pytest.approx([10.0])
    assert block_gains(steps[:4]) == []  # a pair cut short is no gain


def test_several_arms_run_in_rounds_each_in_its_own_drawn_order():
    calls = []
    plan = SwitchedBlocks(calls.append, timed_steps=16, seed=5, arms=4)
    per_block = SETTLE_STEPS + block_steps(16)
    assert plan.steps == 4 * BLOCK_PAIRS * per_block  # a block of each arm a round
    blocks = [plan.plan[i][0] for i in range(0, plan.steps, per_block)]
    rounds = [tuple(blocks[i : i + 4]) for i in range(0, len(blocks), 4)]
    assert all(sorted(r) == [0, 1, 2, 3] for r in rounds)
    assert len(set(rounds)) > 1  # drawn per round, not one order repeated
    while plan.advance():
        pass
    assert calls[-1] == 1  # the first value in force for the trial's last check


def test_each_arm_is_read_against_the_scripts_block_of_its_round():
    def block(arm, ms):
        return [(arm, None), (arm, ms), (arm, ms)]

    # round 1: arms 2, 0, 1; round 2: 1, 2, 0 (cut short: no arm 0 in round 3)
    steps = [*block(2, 10.0), *block(0, 20.0), *block(1, 16.0),
             *block(1, 8.0), *block(2, 20.0), *block(0, 10.0), *block(1, 5.0)]  # fmt: skip
    gains = arm_gains(steps, 3)
    assert gains[1] == pytest.approx([25.0, 25.0])
    assert gains[2] == pytest.approx([100.0, -50.0])


def test_steps_that_are_not_the_loops_step_keep_their_place_and_add_no_time():
    """Left out by position: the blocks and rounds stay as planned; a block left empty
    gives its round (the script's block) or its arm nothing to compare."""

    def block(arm, *ms):
        return [(arm, None), *[(arm, m) for m in ms]]

    # round 1: 1450 left out; round 2: arm 1's block empty; round 3: no reference
    steps = [*block(0, 20.0, 1450.0), *block(1, 10.0, 10.0),
             *block(1, 370.0, 370.0), *block(0, 20.0, 20.0),
             *block(0, 1450.0, 1450.0), *block(1, 10.0, 10.0)]  # fmt: skip
    out = frozenset({2, 7, 8, 13, 14})
    assert arm_gains(steps, 2, out) == {1: pytest.approx([100.0])}
    assert len(arm_gains(steps, 2)[1]) == 3  # without: every round, spikes and all


def facts_of(steps, samples, started=()):
    """A switched trial's facts: (arm, ms) per step as arm_gains takes them."""
    facts = RunFacts(["python", "train.py"], "optimizer", [], 1.0, 2, 16, Status.COMPLETE)
    for i, (arm, ms) in enumerate(steps):
        phase = StepPhase.SETTLE if ms is None else StepPhase.MEASURED
        facts.steps.append(StepRecord(index=i, wall_ms=ms or 500.0, data_wait_ms=0.0,
                                      in_window=False, phase=phase, samples=samples[i],
                                      arm=arm, loader_started=i in started))  # fmt: skip
    return facts


def test_an_epochs_start_and_its_short_last_batch_are_left_out_of_the_blocks():
    """dcgan, 16 steps an epoch, images and checkpoints saved at each end: the epoch's first
    step took ~1,450 ms (the saves and the workers' start in it) and its last, 40 samples of
    64, ~370, beside 500-550 ms steps; in blocks of two timed steps channels_last's pairs
    read -47% to +137% for a +13% knob. Those steps are no block's time, in either arm."""
    steps, samples, started = [], [], set()
    for pair in range(8):
        for arm, ms in ((0, 550.0), (1, 480.0)) if pair % 2 else ((1, 480.0), (0, 550.0)):
            steps += [(arm, None), (arm, ms), (arm, ms)]
            samples += [64, 64, 64]
    for epoch_end in (10, 27, 40):  # a short batch, then the next epoch's first step
        steps[epoch_end] = (steps[epoch_end][0], 370.0)
        samples[epoch_end] = 40
        steps[epoch_end + 1] = (steps[epoch_end + 1][0], 1450.0)
        started.add(epoch_end + 1)
    trial = from_facts(facts_of(steps, samples, started), "cl", {"channels-last": True})
    assert trial.block_gains and all(
        g == pytest.approx(100 * (550 / 480 - 1)) for g in trial.block_gains
    ), trial.block_gains
    # a loop whose batches all differ (no usual size) keeps every step of them
    varied = [64 + i % 5 for i in range(len(steps))]
    trial = from_facts(facts_of(steps, varied), "cl", {"channels-last": True})
    assert len(trial.block_gains) == BLOCK_PAIRS


EPOCHS = """
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(20, 8)), batch_size=8)  # 8, 8, then 4
for epoch in range(12):
    for (x,) in loader:
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.slow
def test_the_step_an_epoch_starts_in_is_marked(tmp_path):
    """The capture marks the step in which the script's DataLoader began an iterator: the
    epoch's first, after the short last batch of the one before."""
    script = tmp_path / "train.py"
    script.write_text(EPOCHS)
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, knobs={}, warmup=2, steps=12,
                       seed=0, timeout_s=240)  # fmt: skip
    facts = capture_script(spec, output=tmp_path / "output.log").facts
    assert facts.status == "complete", facts.error
    steps = [s for s in facts.steps if s.phase == StepPhase.MEASURED]
    assert [s.samples for s in steps[:6]] in ([8, 8, 4, 8, 8, 4], [8, 4, 8, 8, 4, 8],
                                              [4, 8, 8, 4, 8, 8])  # fmt: skip
    for before, step in itertools.pairwise(steps):
        assert step.loader_started == (before.samples == 4), (before, step)


def test_a_block_is_read_by_its_middle_half_so_stalls_from_a_neighbour_move_nothing():
    """makemore beside a CPU-bound process: 15 ms steps, one in ten or twenty stalled by
    100-250 ms. The mean less its slowest step read such a block pair at -22% or +87%."""
    rng = random.Random(1)
    for _ in range(50):
        on = [15.0 * rng.uniform(0.98, 1.02) for _ in range(25)]
        off = [15.0 * rng.uniform(0.98, 1.02) for _ in range(25)]
        for block in (on, off):
            for i in rng.sample(range(25), rng.randint(0, 3)):
                block[i] = rng.uniform(100, 260)
        steps = [(True, None), *[(True, ms) for ms in on], (False, None)]
        steps += [(False, ms) for ms in off]
        (gain,) = block_gains(steps)
        assert abs(gain) < 3, gain


def test_a_switch_names_a_knob_of_a_timing_run(tmp_path):
    with pytest.raises(SpecError, match="switch 'threads' is not a knob of a timing run"):
        CaptureSpec.from_dict({"target": "t.py", "args": [], "out_dir": str(tmp_path),
                               "mode": "timing", "knobs": {}, "switch": "threads"})  # fmt: skip


@pytest.mark.slow
def test_a_switched_trial_measures_the_knob_against_the_scripts_setting_in_one_process(tmp_path):
    # 32 timed steps: four a block, read by their interquartile mean, so one step stalled by
    # a neighbour on a shared machine does not decide a block (two a block read by their
    # median did, once, in CI's run beside another job)
    facts = switched(tmp_path, ANOMALY, {"anomaly-detection-off": True}, "anomaly-detection-off",
                     steps=32)  # fmt: skip
    assert facts.status == "complete", facts.error
    trial = from_facts(facts, "anomaly detection off", {"anomaly-detection-off": True})
    assert trial.switched and len(trial.block_gains) == BLOCK_PAIRS
    # the script's own anomaly mode ran in the reference blocks: each pair shows its cost
    # (about +100%; one pair read +17% once in CI beside the rest of the suite on a loaded
    # 2-core VM, so the bound is on the pairs' median, and every pair must still gain)
    assert min(trial.block_gains) > 0 and statistics.median(trial.block_gains) > 30, (
        trial.block_gains
    )
    assert len(trial.step_ms) == len(trial.reference_ms) == BLOCK_PAIRS * block_steps(32)
    settling = [s for s in facts.steps if s.phase == StepPhase.SETTLE]
    assert len(settling) == 2 * BLOCK_PAIRS * SETTLE_STEPS
    log = (tmp_path / "output.log").read_text()
    assert "anomaly True" in log and "anomaly False" in log
    (record,) = facts.knobs
    assert record.holds is True  # checked at the first and last timed steps, switched on


@pytest.mark.slow
def test_fused_is_switched_on_the_optimizers_param_groups(tmp_path):
    facts = switched(tmp_path, FUSED, {"fused-optimizer": "fused"}, "fused-optimizer")
    assert facts.status == "complete", facts.error
    trial = from_facts(facts, "optimizer fused=True", {"fused-optimizer": "fused"})
    assert trial.switched and facts.switch_note is None
    log = (tmp_path / "output.log").read_text()
    assert "fused True" in log and "fused None" in log  # the script's own: not set


def net_loop(layers: str, forward: str, printed: str, x: str, device: str = "") -> str:
    """A loop over a small module whose forward prints `printed` (what it ran under):
    `layers` are the module's attributes (one a line), `forward` what it returns."""
    attributes = "\n".join(f"        self.{line}" for line in layers.splitlines())
    return f"""
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
{attributes}

    def forward(self, x):
        print({printed})
        return {forward}

model = Net(){device}
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = {x}
for step in range(400):
    loss = model(x).float().pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


AUTOCAST = net_loop(
    "layer = torch.nn.Linear(8, 1)", "self.layer(x)",
    '"autocast", torch.is_autocast_enabled("cpu")', "torch.randn(16, 8)",
)  # fmt: skip


@pytest.mark.slow
def test_bf16_autocast_is_switched_per_forward(tmp_path):
    facts = switched(tmp_path, AUTOCAST, {"amp": "bf16"}, "amp")
    assert facts.status == "complete", facts.error
    trial = from_facts(facts, "autocast bf16", {"amp": "bf16"})
    assert trial.switched and facts.switch_note is None
    log = (tmp_path / "output.log").read_text()
    assert "autocast True" in log and "autocast False" in log


@pytest.mark.slow
def test_a_knob_that_cannot_be_switched_times_an_ordinary_trial_and_says_why(tmp_path):
    """The script sets foreach itself: fused is not in force, nothing to switch."""
    source = FUSED.replace("lr=0.01)", "lr=0.01, foreach=False)")
    facts = switched(tmp_path, source, {"fused-optimizer": "fused"}, "fused-optimizer")
    trial = from_facts(facts, "optimizer fused=True", {"fused-optimizer": "fused"})
    assert not trial.switched and trial.step_ms
    assert facts.switch_note == "fused-optimizer is not in force: not switched"


# on a GPU: the process-wide flags (TF32 matmuls, cudnn.benchmark) and bf16 autocast switch
# per block; the script prints what each forward ran under
GPU_FLAGS = net_loop(
    "conv = torch.nn.Conv2d(3, 8, 3)\nhead = torch.nn.Linear(8 * 14 * 14, 10)",
    "self.head(self.conv(x).flatten(1))",
    '"flags", torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark, '
    'torch.is_autocast_enabled("cuda")',
    'torch.randn(16, 3, 16, 16, device="cuda")',
    device=".cuda()",
)


@pytest.mark.cuda
@pytest.mark.parametrize(
    ("knob", "value", "on", "off"),
    [("matmul-precision", "high", "flags high", "flags highest"),
     ("cudnn-benchmark", True, "True False\n", "False False\n"),
     ("amp", "bf16", " True\n", "False\n")],
)  # fmt: skip
def test_gpu_settings_are_switched_per_block(tmp_path, knob, value, on, off):
    facts = switched(tmp_path, GPU_FLAGS, {knob: value}, knob)
    assert facts.status == "complete", facts.error
    trial = from_facts(facts, knob, {knob: value})
    assert trial.switched and facts.switch_note is None
    assert len(trial.block_gains) == BLOCK_PAIRS
    log = (tmp_path / "output.log").read_text()
    assert on in log and off in log, log[-400:]
    (record,) = facts.knobs
    assert record.holds is True


def test_process_flags_switch_between_the_knobs_setting_and_the_one_before():
    """matmul-precision and cudnn-benchmark: the flag the process had before the knob in
    the reference blocks (no GPU needed to set the flags)."""
    import torch

    from torchpace.knobs import get

    precision, benchmark = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.benchmark = False
        tf32, cudnn = get("matmul-precision"), get("cudnn-benchmark")
        tf32.apply("high", _Runtime())
        cudnn.apply(True, _Runtime())
        to_tf32, to_cudnn = tf32.switch("high", _Runtime()), cudnn.switch(True, _Runtime())
        to_tf32(False)
        to_cudnn(False)
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cudnn.benchmark is False
        to_tf32(True)
        to_cudnn(True)
        assert torch.get_float32_matmul_precision() == "high"
        assert torch.backends.cudnn.benchmark is True
        # the script set it back itself after the knob: nothing to switch, and why
        torch.backends.cudnn.benchmark = False
        assert "itself" in cudnn.switch(True, _Runtime())
        assert "was not applied" in tf32.switch("medium", _Runtime())
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.benchmark = benchmark


def test_threads_switch_between_the_knobs_count_and_the_scripts():
    import torch

    from torchpace.knobs import get

    knob = get("threads")
    before = torch.get_num_threads()
    original = torch.set_num_threads
    try:
        knob.apply(1, _Runtime())
        torch.set_num_threads(2)  # the script's own call: held at 1
        assert torch.get_num_threads() == 1
        switch = knob.switch(1, _Runtime())
        switch(False)
        assert torch.get_num_threads() == 2  # the script's count in the reference blocks
        switch(True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads = original
        original(before)


class _Runtime:
    optimizers = ()

    @staticmethod
    def user_location():
        return "train.py:1"


def test_random_processes_of_two_speeds_cancel_within_a_process():
    """Why switching: processes drawn at 20.5 or 25 ms/step, a 5% knob. Between processes
    the pairs spread by ~20%; within one, every block pair reads the knob."""
    rng = random.Random(0)
    for _ in range(20):
        speed = rng.choice([20.5, 25.0])
        steps = []
        for _pair in range(BLOCK_PAIRS):
            for on in (True, False):
                steps.append((on, None))
                steps += [(on, speed / (1.05 if on else 1.0) * rng.uniform(0.99, 1.01))] * 3
        gains = block_gains(steps)
        assert all(2 < g < 8 for g in gains)


def test_blocks_fit_the_job_or_the_script_length():
    from torchpace.tune.switched import block_steps_that_fit

    assert block_steps_that_fit(200, 5, []) == block_steps(200)  # no length known: K / 8
    # makemore's 300 steps after a warm-up of 5: 6 of 8 pairs of 25-step blocks would not
    # fit, so the blocks shrink until all 8 pairs do
    fitted = block_steps_that_fit(200, 5, [300])
    assert 2 * BLOCK_PAIRS * (SETTLE_STEPS + fitted) <= 300 - 5
    assert block_steps_that_fit(200, 5, [300, 1000]) == fitted  # the shorter length rules
    assert block_steps_that_fit(200, 5, [9]) == 0  # not one pair of two-step blocks: ordinary


# host-malloc: twelve 4 MiB blocks a step, each page written, freed last to first at the heap's
# top. glibc as it starts maps the first step's blocks and raises its thresholds to their size
# (trim: twice it), so each later step's 48 MiB goes back to the kernel and faults in again
# (12,288 pages); with the knob's thresholds the heap keeps them. ctypes' own objects are
# Python's, not glibc's heap: nothing lands above the blocks to change that.
MALLOC_BLOCKS = """
import ctypes, resource, torch
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
SIZE = 4 << 20
for step in range(400):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(SIZE) for _ in range(12)]
    for block in blocks:
        ctypes.memset(block, 1, SIZE)
    for block in reversed(blocks):
        libc.free(block)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print("faults", step, faults, flush=True)
"""


@pytest.mark.slow
def test_host_malloc_switches_between_its_thresholds_and_glibcs_own_state(tmp_path):
    from torchpace.env.process import glibc

    if glibc() is None:
        pytest.skip("glibc only")
    facts = switched(tmp_path, MALLOC_BLOCKS, {"host-malloc": True}, "host-malloc")
    assert facts.status == "complete", facts.error
    trial = from_facts(facts, "glibc malloc", {"host-malloc": True})
    assert trial.switched and facts.switch_note is None
    (record,) = facts.knobs
    assert "held back to the first timed step" in record.detail
    faults = {}
    for line in (tmp_path / "output.log").read_text().splitlines():
        if line.startswith("faults "):
            _, step, count = line.split()
            faults[int(step)] = int(count)
    arm_faults = {0: [], 1: []}
    for step in facts.steps:  # a step runs from one optimizer.step() to the next: the
        # blocks of the loop's next iteration
        if step.arm is not None and step.index + 1 in faults:
            arm_faults[step.arm].append(faults[step.index + 1])
    script_own, knob = (statistics.median(arm_faults[arm]) for arm in (0, 1))
    # the script's own state, read back at the first timed step, faults the blocks in again
    # every step (12,288 pages as a process never switched does); the knob's keeps them
    assert min(len(arm_faults[0]), len(arm_faults[1])) >= BLOCK_PAIRS, arm_faults
    assert script_own > 6_000 and knob < 600, arm_faults
