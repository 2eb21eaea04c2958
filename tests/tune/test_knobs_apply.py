"""Each knob applied for real, in this process, on a fresh ChildRuntime (its patches undone
after each test): the DataLoader really has the workers, the optimizer really is fused,
autocast really runs in the forward. Tiny models, a few steps."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from knob_fakes import fresh_runtime
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from torchpace.facts.run import KnobRecord
from torchpace.knobs import apply_all
from torchpace.knobs.compile import cpp_compiler


def _record(name, value, detail):
    return KnobRecord(name, value, True, detail)


HERE = "test_knobs_apply.py:"


@pytest.fixture
def runtime():
    yield from fresh_runtime()


def data(n=16):
    return TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))


def one(config, rt):
    (record,) = apply_all(config, rt, _record)
    return record


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 3)
        self.seen = []  # what the layers saw: (dtype, channels_last) of the conv's input

    def forward(self, x):
        self.seen.append((x.dtype, x.is_contiguous(memory_format=torch.channels_last)))
        x = self.conv(x).relu().mean((2, 3))
        return self.fc(x)


# --- DataLoader knobs ---------------------------------------------------------------------
def test_num_workers_sets_every_map_style_loader(runtime):
    record = one({"num-workers": 2}, runtime)
    loader = DataLoader(data(), batch_size=4)
    assert loader.num_workers == 2
    assert f"{HERE}" in record.detail and "num_workers 0 -> 2" in record.detail

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(4))

    assert DataLoader(Stream()).num_workers == 0  # each worker would replay the stream
    assert "left alone (iterable-style data set)" in record.detail


def test_workers_with_persistence_and_prefetch(runtime):
    records = apply_all(
        {"prefetch-factor": 4, "num-workers": 2, "persistent-workers": True}, runtime, _record
    )
    assert [r.name for r in records] == ["num-workers", "persistent-workers", "prefetch-factor"]
    loader = DataLoader(data(), batch_size=4, shuffle=True)
    assert (loader.num_workers, loader.persistent_workers, loader.prefetch_factor) == (2, True, 4)
    assert sum(len(x) for x, _ in loader) == 16  # the workers really load


def test_persistent_and_prefetch_leave_a_loader_without_workers(runtime):
    records = apply_all({"persistent-workers": True, "prefetch-factor": 4}, runtime, _record)
    loader = DataLoader(data(), batch_size=4)  # torch would refuse both without workers
    assert (loader.persistent_workers, loader.prefetch_factor) == (False, None)
    assert all("left alone (num_workers=0)" in r.detail for r in records)


def test_batch_size_only_grows(runtime):
    record = one({"batch-size": 8}, runtime)
    assert DataLoader(data(), batch_size=4).batch_size == 8
    assert DataLoader(data(), batch_size=16).batch_size == 16  # an evaluation loader's
    sampler = torch.utils.data.BatchSampler(range(16), 4, False)
    assert DataLoader(data(), batch_sampler=sampler).batch_size is None
    assert "batch_size 4 -> 8" in record.detail and "learning rate" in record.detail


def test_pin_memory_adds_non_blocking_only_to_pinned_cpu_to_cuda_copies(runtime, monkeypatch):
    calls = []

    def fake_to(self, *args, **kwargs):  # stands for the real copy: no GPU needed
        calls.append((args, kwargs))
        return self

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    monkeypatch.setattr(torch.Tensor, "cuda", fake_to)
    record = one({"pin-memory": True}, runtime)
    assert DataLoader(data(), batch_size=4).pin_memory is True
    assert "pin_memory False -> True" in record.detail
    x = torch.zeros(2)
    x.to("cuda")  # not pinned: left alone
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)
    x.to("cuda")
    x.to(device="cuda:0", dtype=torch.float16)
    x.to("cuda", non_blocking=False)  # the caller said: kept
    x.to(torch.float16)  # no device change
    x.to("cpu")
    x.cuda()
    said = [kw.get("non_blocking") for _, kw in calls]
    assert said == [None, True, True, False, None, None, True]


@pytest.mark.cuda
def test_pin_memory_on_cuda(runtime):
    one({"pin-memory": True}, runtime)
    x, _ = next(iter(DataLoader(data(), batch_size=4)))
    assert x.is_pinned()
    assert torch.equal(x.to("cuda").cpu(), x)


# --- device-transforms --------------------------------------------------------------------
class Images(torch.utils.data.Dataset):
    """CIFAR-like: uint8 HWC arrays returned through PIL, like the article's FakeCIFAR."""

    def __init__(self, transform, n=8, size=16):
        self.transform = transform
        rng = np.random.RandomState(0)
        self.data = rng.randint(0, 256, (n, size, size, 3), dtype=np.uint8)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), i


def pipeline(*stages):
    return T.Compose([*stages, T.ToTensor(), T.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))])


def reference(transform, **kw):
    return next(iter(DataLoader(Images(transform), batch_size=8, **kw)))[0]


def test_device_transforms_normalize_is_bitwise_the_host_pipeline(runtime):
    expected = reference(pipeline(T.Resize(24)))
    record = one({"device-transforms": "normalize"}, runtime)
    dataset = Images(pipeline(T.Resize(24)))
    images, labels = next(iter(DataLoader(dataset, batch_size=8)))
    assert type(images).__name__ == "DeferredImages"
    # queried without converting: what the host pipeline's batch would say
    assert images.shape == (8, 3, 24, 24) and images.dtype == torch.float32
    assert images.device.type == "cpu" and images._tp_done is None
    moved = images.to("cpu")  # no other device here: converted where it is, at first use
    assert type(moved) is torch.Tensor and torch.equal(moved, expected)
    assert labels.tolist() == list(range(8))
    assert "host [Resize, uint8], device [float/255, Normalize]" in record.detail
    assert [type(t).__name__ for t in dataset.transform.transforms] == ["Resize", "ToUint8Tensor"]


def test_device_transforms_full_is_close(runtime):
    expected = reference(pipeline(T.Resize(40)))
    record = one({"device-transforms": "full"}, runtime)
    images, _ = next(iter(DataLoader(Images(pipeline(T.Resize(40))), batch_size=8)))
    assert images.shape == (8, 3, 40, 40)  # the shape after the device-side resize
    got = images.to("cpu", dtype=torch.float64)
    assert got.dtype == torch.float64 and got.shape == expected.shape
    # the tensor resize rounds like PIL's to within 1/255 (then normalised by std >= 0.2)
    assert (got - expected.double()).abs().max() <= 1 / 255 / 0.2 + 1e-6
    assert "device [Resize, float/255, Normalize]" in record.detail


def test_device_transforms_in_workers_and_each_dataset_its_own_pipeline(runtime):
    flip = pipeline(T.RandomHorizontalFlip(p=1.0))  # deterministic: always flipped
    plain = pipeline()
    expected_flip, expected_plain = reference(flip), reference(plain)
    one({"device-transforms": "full"}, runtime)
    train = DataLoader(Images(flip), batch_size=8, num_workers=2)
    val = DataLoader(Images(plain), batch_size=8)
    assert torch.equal(next(iter(train))[0].to("cpu"), expected_flip)
    assert torch.equal(next(iter(val))[0].to("cpu"), expected_plain)


def test_deferred_images_convert_at_first_use(runtime):
    one({"device-transforms": "normalize"}, runtime)
    expected = reference(pipeline())
    net = Net()
    images, _ = next(iter(DataLoader(Images(pipeline()), batch_size=8)))
    images.mul_(2)  # an in-place op converts first; later uses see the change
    assert torch.equal(images.to("cpu"), expected * 2)
    images, _ = next(iter(DataLoader(Images(pipeline()), batch_size=8)))
    net(images)  # handed to a plain module without a .to()
    assert net.seen == [(torch.float32, False)]
    images, _ = next(iter(DataLoader(Images(pipeline()), batch_size=8)))
    assert torch.equal(images + 0, expected) and torch.equal(images.float(), expected)


def test_device_transforms_leave_unknown_pipelines(runtime):
    record = one({"device-transforms": "normalize"}, runtime)
    weird = T.Compose([T.Lambda(lambda img: img), T.ToTensor(), T.Normalize((0.5,), (0.5,))])
    dataset = Images(weird)
    images, _ = next(iter(DataLoader(dataset, batch_size=2)))
    assert type(images) is torch.Tensor and images.dtype == torch.float32
    assert dataset.transform is weird
    assert "left alone (Lambda cannot run in 'normalize' mode)" in record.detail


@pytest.mark.cuda
def test_device_transforms_convert_on_cuda(runtime):
    expected = reference(pipeline(T.Resize(24)))
    records = apply_all({"pin-memory": True, "device-transforms": "normalize"}, runtime, _record)
    assert len(records) == 2
    images, _ = next(iter(DataLoader(Images(pipeline(T.Resize(24))), batch_size=8)))
    assert images.is_pinned()
    moved = images.to("cuda")
    assert moved.dtype == torch.float32 and moved.device.type == "cuda"
    assert torch.allclose(moved.cpu(), expected, atol=1e-6)


# --- process settings ---------------------------------------------------------------------
def test_threads(runtime):
    record = one({"threads": 1}, runtime)
    assert torch.get_num_threads() == 1 and "torch.set_num_threads(1)" in record.detail


def test_anomaly_detection_stays_off(runtime):
    one({"anomaly-detection-off": True}, runtime)
    torch.autograd.set_detect_anomaly(True)
    assert not torch.is_anomaly_enabled()
    with pytest.warns(UserWarning), torch.autograd.detect_anomaly():
        assert not torch.is_anomaly_enabled()


def test_cudnn_and_matmul_flags(runtime):
    apply_all({"cudnn-benchmark": True, "matmul-precision": "high"}, runtime, _record)
    assert torch.backends.cudnn.benchmark is True
    assert torch.get_float32_matmul_precision() == "high"


def test_zero_grad_sets_to_none(runtime):
    one({"zero-grad-set-to-none": True}, runtime)
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.ones(1, 2)).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert net.weight.grad is None
    net(torch.ones(1, 2)).sum().backward()
    net.zero_grad(False)
    assert net.weight.grad is None


# --- optimizer ----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["fused", "foreach"])
def test_fused_optimizer(runtime, value):
    record = one({"fused-optimizer": value}, runtime)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)  # a generator of params
    assert opt.defaults[value] is True
    assert len(opt.param_groups[0]["params"]) == 2
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    assert f"SGD at tests/tune/{HERE}" in record.detail and f"{value}=True" in record.detail


def test_fused_optimizer_leaves_what_it_cannot_or_should_not_touch(runtime):
    record = one({"fused-optimizer": "fused"}, runtime)
    net = torch.nn.Linear(4, 2)
    assert torch.optim.SGD(net.parameters(), lr=0.1, fused=False).defaults["fused"] is False
    assert torch.optim.RMSprop(net.parameters()).defaults["foreach"] is None
    groups = [{"params": iter([net.weight])}, {"params": net.bias, "lr": 0.01}]
    opt = torch.optim.Adam(groups)
    assert opt.defaults["fused"] is True and [len(g["params"]) for g in opt.param_groups] == [1, 1]
    assert "the script sets fused/foreach" in record.detail
    assert "RMSprop" in record.detail and "no fused implementation" in record.detail


# --- model knobs --------------------------------------------------------------------------
def test_channels_last(runtime):
    record = one({"channels-last": True}, runtime)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    params = list(net.parameters())
    net(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    assert net.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert net.seen == [(torch.float32, True)]
    assert opt.param_groups[0]["params"] == params  # the optimizer still holds the same ones
    assert "Net at " in record.detail and HERE in record.detail


def amp_step(value, runtime, clip=None):
    torch.manual_seed(0)
    record = one({"amp": value}, runtime)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    inner = []
    net.fc.register_forward_hook(lambda m, i, o: inner.append(o.dtype))
    out = net(torch.randn(2, 3, 8, 8))
    loss = torch.nn.functional.cross_entropy(out, torch.tensor([0, 2]))
    return record, net, opt, out, loss, inner


def test_amp_bf16_autocasts_the_forward_on_the_cpu(runtime):
    record, net, opt, out, loss, inner = amp_step("bf16", runtime)
    assert inner == [torch.bfloat16]  # inside the forward: autocast
    assert out.dtype == torch.float32 and loss.dtype == torch.float32  # the outputs: float32
    loss.backward()
    opt.step()
    assert net.fc.weight.grad.dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")  # only inside the forward
    assert "autocast('cpu', torch.bfloat16)" in record.detail
    # the class is swapped, so that a copy (an EMA model) autocasts too
    assert type(net).__name__ == "Net" and isinstance(net, Net)
    twin = copy.deepcopy(net)
    twin(torch.randn(1, 3, 8, 8))
    assert inner[-1] == torch.bfloat16


def test_amp_fp16_scales_unscales_before_clipping_and_steps(runtime):
    # the reference: the same fp16 forward, the GradScaler's three calls written by hand
    torch.manual_seed(0)
    ref = Net()
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    with torch.autocast("cpu", dtype=torch.float16):
        ref_loss = torch.nn.functional.cross_entropy(ref(x).float(), y)
    ref_loss.backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1e9)

    torch.manual_seed(0)
    record = one({"amp": "fp16"}, runtime)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    before = net.fc.weight.detach().clone()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    assert torch.allclose(loss, ref_loss)  # the loss itself is not scaled
    loss.backward()
    scale = 2.0**16
    assert torch.allclose(net.fc.weight.grad, ref.fc.weight.grad * scale, rtol=2e-2)
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1e9)  # unscaled first
    assert torch.allclose(norm, ref_norm, rtol=2e-2)
    opt.step()
    assert torch.allclose(net.fc.weight, before - 0.1 * ref.fc.weight.grad, atol=1e-3)
    assert "GradScaler" in record.detail


def test_compile_marks_the_model_for_compilation(runtime):
    record = one({"compile": "default"}, runtime)
    net = torch.nn.Linear(2, 1)
    torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.ones(1, 2))  # the first call runs eagerly and finds the model
    assert net._compiled_call_impl is not None
    assert "Linear at " in record.detail and "compiled" in record.detail


@pytest.mark.slow
def test_compile_runs_compiled_on_the_cpu(runtime):
    if cpp_compiler() is None:
        pytest.skip("no C++ compiler: torch.compile cannot run on this CPU")
    one({"compile": "default"}, runtime)
    net = torch.nn.Linear(2, 1)
    torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.ones(1, 2)
    eager = net(x)
    assert torch.allclose(net(x), eager)


def test_amp_leaves_autocast_when_the_first_forward_raises(runtime):
    one({"amp": "bf16"}, runtime)

    class Broken(torch.nn.Linear):
        def forward(self, x):
            raise ValueError("the user's bug")

    net = Broken(2, 1)
    torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="the user's bug"):
        net(torch.ones(1, 2))
    assert not torch.is_autocast_enabled("cpu")


# --- expandable-segments ------------------------------------------------------------------
@pytest.mark.cuda
def test_expandable_segments_on_cuda():
    """In a fresh process: the allocator's setting is process-wide and read at allocation."""
    code = (
        "import torch\n"
        "from torchpace.knobs import get\n"
        "said = get('expandable-segments').apply(True, None)\n"
        "x = torch.empty(64 * 2**20, dtype=torch.uint8, device='cuda')\n"
        "segments = torch.cuda.memory._snapshot()['segments']\n"
        "print(said)\n"
        "print(all(s.get('is_expandable') for s in segments))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    said, expandable = done.stdout.strip().splitlines()[-2:]
    assert "expandable_segments:True" in said and expandable == "True"


# --- several trained models (a GAN) ---------------------------------------------------------
class Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1)

    def forward(self, z):
        return self.up(z).tanh()


def gan_iterations(runtime, n=2):
    """D steps on real and fake, then G: each model found at its own first call."""
    torch.manual_seed(0)
    netD, netG = Net(), Generator()
    teacher = Net().requires_grad_(False)  # a frozen model: called, never trained
    opt_d = torch.optim.SGD(netD.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(netG.parameters(), lr=0.1)
    for _ in range(n):
        real = torch.randn(2, 3, 8, 8)
        teacher(real)
        fake = netG(torch.randn(2, 4, 4, 4))
        d_loss = netD(real).sum() - netD(fake.detach()).sum()
        netD.conv(real)  # a submodule called directly: part of netD, not one more model
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = netD(fake).sum()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
    return netD, netG, teacher


def test_each_trained_model_is_found_once_and_the_finder_goes_after_an_iteration(runtime):
    seen = []
    runtime.on_each_model(seen.append)
    first = []
    runtime.on_model(first.append)
    netD, netG, _teacher = gan_iterations(runtime)
    assert seen == [netG, netD] and first == [netG] and runtime.models == [netG, netD]
    assert runtime.model is netG and HERE in runtime.location_of(netD)
    assert runtime._finder is None  # removed when an optimizer stepped a second time
    late = []
    runtime.on_each_model(late.append)  # added after they were found: given both at once
    assert late == [netG, netD]


def test_model_knobs_act_on_every_trained_model(runtime):
    records = apply_all({"channels-last": True, "amp": "bf16", "compile": "default"},
                        runtime, _record)  # fmt: skip
    netD, netG, teacher = gan_iterations(runtime, n=1)
    for net in (netD, netG):
        assert net._compiled_call_impl is not None
        assert net.up.weight.is_contiguous(memory_format=torch.channels_last) if net is netG \
            else net.conv.weight.is_contiguous(memory_format=torch.channels_last)  # fmt: skip
    assert teacher._compiled_call_impl is None  # not trained: left as written
    assert not teacher.conv.weight.is_contiguous(memory_format=torch.channels_last)
    for record in records:
        assert "Generator at " in record.detail and "Net at " in record.detail


def test_amp_autocasts_every_trained_model_each_at_its_first_call(runtime):
    one({"amp": "bf16"}, runtime)
    dtypes = []
    torch.manual_seed(0)
    netD, netG = Net(), Generator()
    netG.up.register_forward_hook(lambda m, i, o: dtypes.append(("G", o.dtype)))
    netD.fc.register_forward_hook(lambda m, i, o: dtypes.append(("D", o.dtype)))
    torch.optim.SGD(netD.parameters(), lr=0.1)
    torch.optim.SGD(netG.parameters(), lr=0.1)
    fake = netG(torch.randn(2, 4, 4, 4))
    out = netD(fake)
    assert dtypes == [("G", torch.bfloat16), ("D", torch.bfloat16)]
    assert fake.dtype == torch.float32 and out.dtype == torch.float32


# --- host-malloc: in a fresh process (mallopt is the whole process's) ------------------------
_FAULTS_CHILD = """
import resource, sys, torch
from torchpace.capture.runtime import ChildRuntime
from torchpace.facts.run import KnobRecord
from torchpace.knobs import apply_all
if sys.argv[1] == "on":
    record = lambda name, value, detail: KnobRecord(name, value, True, detail)
    (r,) = apply_all({"host-malloc": True}, ChildRuntime(), record)
    print(r.detail, file=sys.stderr)
def step():  # a step's large host buffers: all alive at its peak, then freed
    buffers = [torch.ones(2**20) for _ in range(12)]  # 12 x 4 MiB
    del buffers
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode):
    out = subprocess.run([sys.executable, "-c", _FAULTS_CHILD, mode], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return int(out.stdout), out.stderr


def test_host_malloc_reuses_freed_host_memory_without_page_faults():
    from torchpace.env.process import glibc

    if glibc() is None:
        pytest.skip("glibc only")
    plain, _ = _faults("off")
    tuned, detail = _faults("on")
    # 20 steps of 48 MiB (12,288 pages each). glibc as it starts raises its mmap threshold to
    # 4 MiB after the first free and its trim threshold to twice that, so the 48 MiB freed at
    # the heap's top mostly go back to the kernel: 13,000-245,000 faults measured here (THP
    # and where the blocks land vary it). Tuned: 1,024-3,073, under one step's pages in all.
    assert tuned < 12_288 and plain > 2 * tuned
    assert "mmap threshold 32 MiB, trim threshold 1024 MiB" in detail


_THRESHOLD_CHILD = """
import json, torch
from types import SimpleNamespace
from torchpace.env.process import glibc
from torchpace.knobs.host_malloc import KNOB, _threshold_now
libc = glibc()
read = {}
big = torch.ones(3 * 2**20)  # 12 MiB, mapped: freed, it raises glibc's threshold to its size
del big
keep = [torch.ones(2**20) for _ in range(12)]  # 48 MiB from the heap, then freed below a
pin = torch.ones(2**14)  # small block that stays: free chunks a probe would fit in
del keep
read["free_chunks"] = _threshold_now(libc)
read["again"] = _threshold_now(libc)  # the probe's own mapped request raised it by <= 1%
switched = SimpleNamespace(switched_knobs={"host-malloc"}, batches_ahead=0)
read["not_held_back"] = KNOB.switch(True, switched)  # not applied in this process yet
KNOB.apply(True, SimpleNamespace(switched_knobs=frozenset(), batches_ahead=0))
read["set_at_start"] = KNOB.switch(True, switched)
KNOB.apply(True, switched)
with_workers = SimpleNamespace(switched_knobs={"host-malloc"}, batches_ahead=4)
read["workers"] = KNOB.switch(True, with_workers)
read["after_workers"] = _threshold_now(libc)  # put in force for the whole trial: 32 MiB
print(json.dumps(read))
"""


def test_host_malloc_reads_glibcs_threshold_past_free_heap_chunks_and_says_when_it_cannot_switch():
    from torchpace.env.process import glibc

    if glibc() is None:
        pytest.skip("glibc only")
    out = subprocess.run([sys.executable, "-c", _THRESHOLD_CHILD], capture_output=True,
                         text=True, check=True)  # fmt: skip
    read = json.loads(out.stdout)
    chunk = 3 * 2**22 + 4096  # the 12 MiB block's mapped chunk, a page over its request
    # 48 MiB of free heap chunks serve any request up to 32 MiB without a mapping: a probe
    # that freed each request before the next read 17 MB here, not 12 MiB
    assert chunk * 0.98 < read["free_chunks"] <= chunk * 1.01
    assert read["free_chunks"] <= read["again"] <= read["free_chunks"] * 1.02 + 4096
    assert read["not_held_back"] == "host-malloc was not applied in this process"
    assert "glibc's own state is gone" in read["set_at_start"]
    assert "workers allocate in processes of their own" in read["workers"]
    assert read["after_workers"] is None  # no request up to 32 MiB is mapped any more
