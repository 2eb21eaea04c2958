"""The switches beyond the process-wide flags (knobs' ``switch``): each holds its value in the
knob's blocks and the script's own in the others, read by a real tiny script through the
switched path (capture/switching.py), and the script's own setting put back exactly."""

import pytest
import torch
from knob_fakes import fresh_runtime
from test_switched_trials import net_loop
from test_switched_trials import switched as run_switched

from torchpace.capture.switching import (
    BLOCK_PAIRS,
    MIN_SETTLING_ROUNDS,
    SETTLE_STEPS,
    SwitchedBlocks,
    block_gains,
    plan_blocks,
)
from torchpace.facts.run import KnobRecord, StepPhase
from torchpace.knobs import apply_all, get
from torchpace.knobs.base import Switch
from torchpace.tune.trial import from_facts


@pytest.fixture
def runtime():
    yield from fresh_runtime()


def switched(tmp_path, source, knobs, switch, steps=8, arms=()):
    """The script run as a switched trial (of several arms: ``arms``, (knob, value) pairs):
    its facts and what it printed."""
    facts = run_switched(tmp_path, source, knobs, switch, steps, arms=arms)
    assert facts.status == "complete", facts.error
    assert facts.switch_note is None, facts.switch_note
    trial = from_facts(facts, switch, knobs)
    assert trial.switched and trial.block_gains
    return facts, (tmp_path / "output.log").read_text()


def states_by_arm(facts, log: str, tag: str) -> dict[bool, set[str]]:
    """What the script printed (`tag state`, once an iteration) in the timed steps of each
    arm: its iterations are the capture's steps, in order."""
    printed = [line.split(" ", 1)[1] for line in log.splitlines() if line.startswith(tag + " ")]
    seen: dict[bool, set[str]] = {True: set(), False: set()}
    for step in facts.steps:
        if step.arm is not None and step.phase == StepPhase.MEASURED:
            seen[bool(step.arm)].add(printed[step.index])
    return seen


def test_a_switch_asks_for_more_settling_steps_and_the_plan_keeps_its_length():
    plain = SwitchedBlocks(lambda on: None, timed_steps=64, seed=0)
    settling = SwitchedBlocks(Switch(lambda on: None, settle_steps=4), timed_steps=64, seed=0)
    assert plain.steps == settling.steps  # fitted to the script by the parent: unchanged
    assert sum(not t for _, t in settling.plan) == 16 * 4
    assert sum(not t for _, t in plain.plan) == 16 * SETTLE_STEPS
    # settling longer than the block's timed steps: fewer, longer rounds, never more steps
    longer = SwitchedBlocks(Switch(lambda on: None, settle_steps=5), timed_steps=64, seed=0)
    assert longer.rounds < BLOCK_PAIRS and longer.steps <= plain.steps
    assert sum(t for _, t in longer.plan) >= sum(not t for _, t in longer.plan)
    # a block too short for its settling grows to keep two timed steps, in fewer rounds
    short = SwitchedBlocks(Switch(lambda on: None, settle_steps=9), timed_steps=8, seed=0)
    assert short.rounds == MIN_SETTLING_ROUNDS
    assert short.steps == 2 * MIN_SETTLING_ROUNDS * 11
    assert sum(t for _, t in short.plan) == 2 * MIN_SETTLING_ROUNDS * 2
    # each block's settling steps, however many, start it: every pair is read
    steps = [(on, 10.0 if t else None) for on, t in short.plan]
    assert block_gains(steps) == [0.0] * MIN_SETTLING_ROUNDS


def test_amp_switches_bf16_only():
    amp = get("amp")
    assert amp.switches("bf16") and not amp.switches("fp16")
    assert get("threads").switches(1) and not get("batch-size").switches(64)


# --- channels_last ------------------------------------------------------------------------
# the weight's Adam moment, once the first step made it, and what the forward was given
CONV = net_loop(
    "conv = torch.nn.Conv2d(3, 8, 3)\nhead = torch.nn.Linear(8, 2)",
    "self.head(self.conv(x).mean((2, 3)))",
    '"layout", x.is_contiguous(memory_format=torch.channels_last), '
    "self.conv.weight.is_contiguous(memory_format=torch.channels_last), "
    'optimizer.state[self.conv.weight].get("exp_avg", x).is_contiguous('
    "memory_format=torch.channels_last)",
    "torch.randn(4, 3, 8, 8)",
).replace("optim.SGD(", "optim.AdamW(")


@pytest.mark.slow
def test_channels_last_switches_model_inputs_and_optimizer_state(tmp_path):
    facts, log = switched(tmp_path, CONV, {"channels-last": True}, "channels-last")
    seen = states_by_arm(facts, log, "layout")
    assert seen == {True: {"True True True"}, False: {"False False False"}}


def test_channels_last_switched_off_is_the_scripts_layout_bit_for_bit(runtime):
    apply_all({"channels-last": True}, runtime, _record)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.randn(2, 3, 5, 5)).sum().backward()  # the knob converts at this call
    optimizer.step()
    weight = model[0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last)
    switch = get("channels-last").switch(True, runtime)
    switch(False)
    momentum = optimizer.state[weight]["momentum_buffer"]
    assert weight.is_contiguous() and weight.grad.is_contiguous() and momentum.is_contiguous()
    assert weight.stride() == before["0.weight"].stride()
    assert optimizer.param_groups[0]["params"][0] is weight  # the same Parameter
    values = weight.detach().clone()
    switch(True)
    assert momentum is not optimizer.state[weight]["momentum_buffer"]
    assert optimizer.state[weight]["momentum_buffer"].is_contiguous(
        memory_format=torch.channels_last
    )
    switch(False)
    assert torch.equal(weight, values)  # the round trip moves no value


def _record(name, value, detail):
    return KnobRecord(name, value, True, detail)


# --- torch.compile ------------------------------------------------------------------------
def test_compile_switches_the_compiled_call_and_keeps_it(runtime):
    apply_all({"compile": "default"}, runtime, _record)
    model = torch.nn.Linear(4, 2)
    torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4))  # found: compiled in place, this first call eager
    compiled = model._compiled_call_impl
    assert compiled is not None
    switch = get("compile").switch("default", runtime)
    switch(False)
    assert model._compiled_call_impl is None  # Module.__call__ runs the eager forward
    model(torch.randn(2, 4))
    switch(True)
    assert model._compiled_call_impl is compiled  # the same compiled code: no recompile
    model._compiled_call_impl = None  # the script's own doing: said, not switched
    assert "replaced" in get("compile").switch("default", runtime)


COMPILED = net_loop(
    "layer = torch.nn.Linear(8, 1)", "self.layer(x)",
    '"compiled", torch.compiler.is_compiling()', "torch.randn(16, 8)",
)  # fmt: skip


@pytest.mark.slow
def test_compile_is_switched_per_block_and_compiled_once(tmp_path):
    facts, log = switched(tmp_path, COMPILED, {"compile": "default"}, "compile", steps=16)
    seen = states_by_arm(facts, log, "compiled")
    assert seen == {True: {"True"}, False: {"False"}}
    # compiled in the warm-up only: the timed steps paid no compilation
    trial = from_facts(facts, "compile", {"compile": "default"})
    assert max(trial.warmup_ms) > 5 * max(trial.step_ms + trial.reference_ms)


# --- fused optimizer: the step count where each path keeps it ------------------------------
def _stepped_adamw():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    return list(model.parameters()), optimizer


def test_fused_moves_each_step_count_to_the_parameters_device():
    from torchpace.knobs.fused_optimizer import move_steps

    params, optimizer = _stepped_adamw()
    meta = torch.device("meta")  # a device other than the CPU's, in place of a GPU
    move_steps(torch, optimizer.param_groups, [optimizer.state], True, lambda p: meta)
    assert {optimizer.state[p]["step"].device.type for p in params} == {"meta"}


def test_fused_step_counts_come_back_to_the_cpu_in_the_other_paths_dtype():
    from torchpace.knobs.fused_optimizer import move_steps

    default = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)  # the unfused path's step is float64 then
        params, optimizer = _stepped_adamw()
        groups, states = optimizer.param_groups, [optimizer.state]
        move_steps(torch, groups, states, fused=True)
        assert {optimizer.state[p]["step"].dtype for p in params} == {torch.float32}
        move_steps(torch, groups, states, fused=False)
        steps = [optimizer.state[p]["step"] for p in params]
        assert {(s.device.type, s.dtype) for s in steps} == {("cpu", torch.float64)}
        assert [s.item() for s in steps] == [1.0, 1.0]
    finally:
        torch.set_default_dtype(default)


FUSED_CUDA = """
import torch
model = torch.nn.Linear(8, 1).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
x = torch.randn(16, 8, device="cuda")
for step in range(400):
    state = optimizer.state[model.weight]
    print("fused", optimizer.param_groups[0]["fused"], state["step"].device.type if state else "-")
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.cuda
def test_fused_on_a_gpu_is_switched_with_its_step_state(tmp_path):
    facts, log = switched(tmp_path, FUSED_CUDA, {"fused-optimizer": "fused"}, "fused-optimizer")
    seen = states_by_arm(facts, log, "fused")
    assert seen == {True: {"True cuda"}, False: {"None cpu"}}


# --- pinned memory ------------------------------------------------------------------------
def test_pin_memory_switches_the_pinning_and_the_non_blocking_copies(monkeypatch):
    import torch.utils.data._utils.pin_memory as pinning

    from torchpace.knobs import pin_memory

    pinned = []
    monkeypatch.setattr(pinning, "pin_memory", lambda data, device=None: pinned.append(data))
    monkeypatch.setattr(pin_memory, "_on", [True])
    knob = get("pin-memory")
    knob._script_pinned = [False]  # what apply() records of a loader the script left unpinned
    switch = knob.switch(True, _Loaders())
    assert isinstance(switch, Switch) and switch.settle_steps == 1 + 4
    switch(False)
    assert pinning.pin_memory("batch") == "batch" and pinned == []  # passed through
    assert pin_memory._on == [False]  # copies as the script makes them: blocking
    switch(True)
    pinning.pin_memory("batch")
    assert pinned == ["batch"] and pin_memory._on == [True]
    knob._script_pinned = [True, False]
    assert "some DataLoaders itself" in knob.switch(True, _Loaders())


def test_a_loader_the_script_pinned_stays_pinned_only_its_copies_switch(monkeypatch):
    import torch.utils.data._utils.pin_memory as pinning

    from torchpace.knobs import pin_memory

    pinned = []
    monkeypatch.setattr(pinning, "pin_memory", lambda data, device=None: pinned.append(data))
    monkeypatch.setattr(pin_memory, "_on", [True])
    knob = get("pin-memory")
    knob._script_pinned = [True]
    switch = knob.switch(True, _Loaders())
    switch(False)
    pinning.pin_memory("batch")
    assert pinned == ["batch"] and pin_memory._on == [False]


class _Loaders:
    """A runtime whose loader has two workers prefetching two batches each."""

    batches_ahead = 4
    optimizers = ()


PINNED_CUDA = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(4096, 8))
model = torch.nn.Linear(8, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(4):
    for (x,) in DataLoader(data, batch_size=16, num_workers=1):
        print("pinned", x.is_pinned())
        loss = model(x.to("cuda")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.cuda
def test_pin_memory_on_a_gpu_is_switched_per_block(tmp_path):
    facts, log = switched(tmp_path, PINNED_CUDA, {"pin-memory": True}, "pin-memory")
    assert states_by_arm(facts, log, "pinned") == {True: {"True"}, False: {"False"}}


# --- device transforms --------------------------------------------------------------------
TRANSFORMED = """
import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader, Dataset

class Images(Dataset):
    def __init__(self):
        self.transform = T.Compose([T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])
        self.data = np.random.RandomState(0).randint(0, 256, (64, 8, 8, 3), dtype=np.uint8)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), i

model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for images, _ in DataLoader(Images(), batch_size=8, num_workers=1):
        print("images", type(images).__name__)
        loss = model(images.to("cpu")).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.slow
def test_device_transforms_switch_in_the_workers_too(tmp_path):
    knobs = {"device-transforms": "normalize"}
    facts, log = switched(tmp_path, TRANSFORMED, knobs, "device-transforms")
    seen = states_by_arm(facts, log, "images")
    # uint8 batches deferred to the device with the knob; the script's float32 ones without
    assert seen == {True: {"DeferredImages"}, False: {"Tensor"}}


# --- DataLoader workers -------------------------------------------------------------------
WORKERS = """
import os
import torch
from torch.utils.data import DataLoader, Dataset

MAIN = os.getpid()

class Indices(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.tensor([i, os.getpid() != MAIN])

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Indices(), batch_size=4, shuffle=True)
for epoch in range(1000):
    for batch in loader:
        print("batch", " ".join(str(i) for i in batch[:, 0].tolist()))
        print("workers", bool(batch[:, 1].all()))
        loss = model(batch.float()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


@pytest.mark.slow
def test_workers_are_switched_by_a_fresh_iterator_per_arm_over_the_scripts_data(tmp_path):
    facts, log = switched(tmp_path, WORKERS, {"num-workers": 2}, "num-workers")
    assert states_by_arm(facts, log, "workers") == {True: {"True"}, False: {"False"}}
    # every batch the script's order gives, once: none lost in a drained arm, none twice
    indices = [int(i) for line in log.splitlines() if line.startswith("batch ")
               for i in line.split()[1:]]  # fmt: skip
    epochs = [indices[i : i + 48] for i in range(0, len(indices), 48)]
    assert len(epochs) > 2
    for epoch in epochs[:-1]:
        assert sorted(epoch) == list(range(48))
    assert len(set(epochs[-1])) == len(epochs[-1])


COUNTED = """
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

class Indices(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        info = get_worker_info()
        return torch.tensor([i, 0 if info is None else info.num_workers])

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Indices(), batch_size=4, shuffle=True)
for epoch in range(1000):
    for batch in loader:
        print("batch", " ".join(str(i) for i in batch[:, 0].tolist()))
        print("workers", set(batch[:, 1].tolist()), torch.get_num_threads())
        loss = model(batch.float()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def printed_by_arm(facts, log: str, tag: str) -> dict[int, set[str]]:
    """What the script printed (`tag state`) in the timed steps of each arm (0: its own)."""
    printed = [line.split(" ", 1)[1] for line in log.splitlines() if line.startswith(tag + " ")]
    seen: dict[int, set[str]] = {}
    for step in facts.steps:
        if step.arm is not None and step.phase == StepPhase.MEASURED:
            seen.setdefault(step.arm, set()).add(printed[step.index])
    return seen


@pytest.mark.slow
def test_several_worker_counts_share_one_process_each_its_own_arm(tmp_path):
    """Screening 1 and 2 workers in one process (issue 35: several arms at once): each
    arm's timed steps read batches made by its own count, the script's arm by the main
    process, every batch of the script's order once; each value's gains come back."""
    facts, log = switched(
        tmp_path, COUNTED, {"num-workers": 1}, "num-workers",
        arms=[("num-workers", 1), ("num-workers", 2)],
    )  # fmt: skip
    workers = {arm: {seen.split()[0] for seen in printed}
               for arm, printed in printed_by_arm(facts, log, "workers").items()}  # fmt: skip
    assert workers == {0: {"{0}"}, 1: {"{1}"}, 2: {"{2}"}}
    # rounds of three blocks, each round in its own order
    rounds = [s.arm for s in facts.steps if s.arm is not None and s.phase == StepPhase.SETTLE]
    assert len(set(rounds)) == 3
    indices = [int(i) for line in log.splitlines() if line.startswith("batch ")
               for i in line.split()[1:]]  # fmt: skip
    for epoch in [indices[i : i + 48] for i in range(0, len(indices), 48)][:-1]:
        assert sorted(epoch) == list(range(48))
    one, two = (
        from_facts(facts, "1", {"num-workers": 1}),
        from_facts(facts, "2", {"num-workers": 2}, 2),
    )
    assert one.switched and two.switched
    # 2 workers' batches in flight (prefetch 2) drained and refilled: 9 settling steps, more
    # than the 8 steps' blocks time, so the plan takes fewer, longer rounds
    rounds = plan_blocks(8, 1 + 2 * 2 * 2)[0]
    assert rounds < BLOCK_PAIRS and len(one.block_gains) == len(two.block_gains) == rounds
    assert one.step_ms != two.step_ms and one.reference_ms == two.reference_ms


@pytest.mark.slow
def test_several_thread_counts_share_one_process_and_the_scripts_comes_back(tmp_path):
    script = "import torch\ntorch.set_num_threads(1)\n" + COUNTED.split("import torch\n", 1)[1]
    facts, log = switched(
        tmp_path, script, {"threads": 2}, "threads", arms=[("threads", 2), ("threads", 3)]
    )
    assert printed_by_arm(facts, log, "workers") == {0: {"{0} 1"}, 1: {"{0} 2"}, 2: {"{0} 3"}}


MIXED = """
import torch
torch.set_num_threads(1)
model = torch.nn.Linear(8, 1)
x = torch.randn(16, 8)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
for step in range(400):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    group = optimizer.param_groups[0]
    print("state", torch.get_num_threads(), group["fused"], group["foreach"])
    optimizer.step()
"""


@pytest.mark.slow
def test_fused_and_foreach_share_one_process_never_both_on(tmp_path):
    knobs = {"fused-optimizer": "fused"}
    arms = [("fused-optimizer", "fused"), ("fused-optimizer", "foreach")]
    facts, log = switched(tmp_path, MIXED, knobs, "fused-optimizer", arms=arms)
    # the script's one thread throughout; its flags, fused alone, foreach alone
    assert printed_by_arm(facts, log, "state") == {
        0: {"1 None None"},
        1: {"1 True None"},
        2: {"1 None True"},
    }


@pytest.mark.slow
def test_two_knobs_share_one_process_one_arm_on_at_a_time(tmp_path):
    """A row's knobs in one process (issue 35, fixed cost once): arm i puts its pair in
    force and every other knob at the script's own setting; at the end every knob's first
    value is in force, so that each one's last check reads it (none "could not apply")."""
    knobs = {"threads": 2, "fused-optimizer": "fused"}
    arms = [("threads", 2), ("fused-optimizer", "fused"), ("fused-optimizer", "foreach")]
    facts, log = switched(tmp_path, MIXED, knobs, "threads", arms=arms)
    assert printed_by_arm(facts, log, "state") == {
        0: {"1 None None"},
        1: {"2 None None"},
        2: {"1 True None"},
        3: {"1 None True"},
    }
    assert all(record.holds is True for record in facts.knobs), facts.knobs
    third = from_facts(facts, "foreach", {"fused-optimizer": "foreach"}, arm=3)
    assert third.switched and len(third.block_gains) == BLOCK_PAIRS


def test_a_knob_that_holds_one_value_at_a_time_refuses_several_arms():
    assert get("num-workers").switches_arms((2, 4)) and get("threads").switches_arms((1, 4))
    assert get("fused-optimizer").switches_arms((True,))
    assert not get("pin-memory").switches_arms((True, False))
    # worker counts for different loaders' lines cannot share the loaders the trial set
    assert not get("num-workers").switches_arms(({"a.py:1": 2}, {"b.py:2": 2}))
    assert get("num-workers").switches_arms(({"a.py:1": 2}, {"a.py:1": 4}))
    assert "one value at a time" in get("pin-memory").switch_arms((True, False), None)


def test_the_search_switches_amp_by_its_value(tmp_path):
    """issue 35 item 3: fp16 (GradScaler state) runs as an ordinary trial, so it no longer
    marks amp "not switchable"; bf16 on top of the same reference is switched in-process."""
    from torchpace.tune.compare import switch_for
    from torchpace.tune.ledger import Budget, Ledger
    from torchpace.tune.trial import TrialSettings

    settings = TrialSettings(target="train.py", args=[], warmup=3, steps=40)
    ledger = Ledger(settings, tmp_path, None, Budget(), lambda: 0.0, 0.0, 0.1, None)
    assert switch_for(ledger, {}, {"amp": "fp16"}) == ""
    assert switch_for(ledger, {}, {"amp": "bf16"}) == "amp"
    assert switch_for(ledger, {"threads": 1}, {"threads": 1, "amp": "bf16"}) == "amp"


def test_a_flip_while_a_batch_is_built_never_mixes_its_samples():
    """CI caught a worker building one batch across a flip: uint8 and float32 samples that
    default_collate cannot stack. The arm is read at a batch's first sample and held until
    its collate ends it."""
    from torch.utils.data import default_collate

    from torchpace.knobs import _device_images as images

    on = images.switch_flag()
    transform = images.SwitchedTransform(
        lambda i: torch.zeros(3, dtype=torch.uint8), lambda i: torch.zeros(3), on
    )
    transform.latch = True
    collate = images.BatchLatch(default_collate)

    first = [transform(0)]
    on[0] = 0  # the switch flips while the batch is half built
    first += [transform(i) for i in range(1, 4)]
    assert collate(first).dtype == torch.uint8  # the whole batch under the arm it began in
    assert collate([transform(i) for i in range(4)]).dtype == torch.float32  # the next: off
