"""GPU idle explained by its cause, syncs in launch-bound loops included (issue 26, item 2).

A small MLP loop whose host is the bottleneck, with five ``.item()`` per step, built as a
synthetic trace: each kernel is launched 15 us after the previous one and runs 8 us, so the
device waits for the host all the time; each ``.item()`` copies a scalar to host memory and
synchronises, which returns at once (the device finished long before: the host waits ~0)
and then costs the idle until the host has launched again. The idle between each sync and
the next kernel is counted here from the events themselves, independently of the doctor.
"""

import sys

import pytest
from conftest import ROOT

from torchpace.doctor.analyze import diagnose
from torchpace.trace import load_trace

sys.path.insert(0, str(ROOT / "tests" / "trace"))
from trace_events import a100, kernel, memcpy, runtime, span, step, write

LAUNCH_US, KERNEL_US, LATENCY_US = 15.0, 8.0, 4.0
# after an .item() returns: Python turns the scalar into a float, formats and logs it,
# builds the next op
AFTER_ITEM_US = 120.0
ITEMS_PER_STEP = 5


class Loop:
    """Writes a host timeline and its device timeline, event by event."""

    def __init__(self):
        self.t = 0.0  # host clock
        self.device_free = 0.0
        self.corr = 0
        self.events = []
        self.sync_idle_us = 0.0  # device idle from each sync's start to the next kernel
        self._pending_sync_start = None

    def _device(self, dur: float) -> tuple[float, float]:
        start = max(self.t + LATENCY_US, self.device_free)
        if self._pending_sync_start is not None:
            self.sync_idle_us += start - self._pending_sync_start
            self._pending_sync_start = None
        self.device_free = start + dur
        return start, dur

    def launch(self, name="void at::native::elementwise_kernel<float>", dur=KERNEL_US):
        self.corr += 1
        self.events.append(runtime("cudaLaunchKernel", self.t, 5.0, correlation=self.corr))
        start, dur = self._device(dur)
        self.events.append(kernel(name, start, dur, correlation=self.corr))
        self.t += LAUNCH_US

    def item(self):
        begin = self.t
        self.events.append(span("aten::item", begin, 0.0))  # its duration set below
        item = self.events[-1]
        self.corr += 1
        self.events.append(runtime("cudaMemcpyAsync", self.t, 8.0, correlation=self.corr))
        idle_from = max(begin, self.device_free)  # the device idle as .item() begins...
        start, dur = self._device(2.0)
        self.sync_idle_us += max(0.0, start - idle_from)  # ...until its copy: the sync's too
        self.events.append(memcpy("DtoH", "Pinned", start, dur, 4, correlation=self.corr))
        self.t += 9.0
        self.corr += 1
        wait_until = max(self.t, self.device_free) + 3.0
        self.events.append(
            runtime("cudaStreamSynchronize", self.t, wait_until - self.t, correlation=self.corr)
        )
        self.t = wait_until
        item["dur"] = self.t - begin
        # the device is idle from the copy's end; the sync began at the copy's call
        self._pending_sync_start = max(begin, self.device_free)
        self.t += AFTER_ITEM_US

    def step(self, n: int):
        begin = self.t
        for _ in range(ITEMS_PER_STEP):  # forward, loss, metrics: a sync after each part
            for _ in range(6):
                self.launch()
            self.item()
        for _ in range(20):  # backward
            self.launch()
        opt = self.t
        for _ in range(50):  # a foreach Adam launching its kernels one by one
            self.launch("void at::native::multi_tensor_apply_kernel<float>", dur=4.0)
        self.events.append(span("Optimizer.step#Adam.step", opt, self.t - opt,
                                cat="user_annotation"))  # fmt: skip
        self.t += 10.0
        self.events.append(step(n, begin, self.t - begin))


def mlp_trace(tmp_path, steps=5):
    loop = Loop()
    for n in range(steps):
        loop.step(n)
    return write(tmp_path / "mlp.json", loop.events, devices=a100()), loop


def test_syncs_in_a_launch_bound_loop_are_priced_by_the_idle_after_them(tmp_path):
    path, loop = mlp_trace(tmp_path)
    d = diagnose(load_trace(path))
    m = d.profile.median
    assert m.syncs == ITEMS_PER_STEP
    assert m.sync_wait_ms < 0.05  # the host hardly waits in them
    assert m.gpu_idle_ms / m.wall_ms > 0.5  # the device idles most of the step
    per_step = loop.sync_idle_us / 5 / 1000
    assert m.idle_sync_ms == pytest.approx(per_step, rel=1e-6)
    first = d.findings[0]
    assert first.code == "TP201", [(f.code, f.saving_ms) for f in d.findings]
    assert first.saving_ms == pytest.approx(per_step, rel=1e-6)
    assert first.evidence["gpu_idle_per_sync_ms"] == pytest.approx(per_step / 5, abs=1e-3)
    assert "empty the GPU's queue" in first.detail
    # the optimizer's launches are a finding too, and second
    assert "TP313" in [f.code for f in d.findings[1:]]


def test_the_largest_cause_of_idle_has_a_finding(tmp_path):
    """Every GPU run whose device idles ≥ 10% of the step gets a finding for the largest
    cause of that idle, with the split in its evidence. Here the launches (3-11 us between
    kernels, the optimizer's foreach kernels most) edge out the syncs: TP313 names it."""
    from torchpace.doctor.checks.gpu_idle import EXPLAINED_BY, idle_causes_ms

    path, _ = mlp_trace(tmp_path)
    d = diagnose(load_trace(path))
    causes = idle_causes_ms(d.profile)
    largest = max(causes, key=causes.get)
    assert largest == "launch" and causes["sync"] > 0.25 * sum(causes.values())
    (named,) = [f for f in d.findings if any("the largest part" in n for n in f.notes)]
    assert named.code in EXPLAINED_BY[largest] and named.code == "TP313"
    keys = [f"gpu_idle_{c}_ms" for c in ("data", "sync", "copy_sync", "launch", "host")]
    split = {k: named.evidence[k] for k in keys}
    assert sum(split.values()) == pytest.approx(d.profile.median.gpu_idle_ms, abs=0.01)


def test_a_host_bound_step_without_other_findings_gets_a_host_work_finding(tmp_path):
    """No syncs, no tiny-kernel storm, no optimizer: the device idles while the host runs
    Python between launches (80 us each): the idle is host work, and it gets a finding."""
    loop = Loop()
    for n in range(5):
        begin = loop.t
        for _ in range(10):
            loop.launch("sm80_xmma_gemm_f32f32_tf32f32")
            loop.t += 80.0
        loop.events.append(step(n, begin, loop.t - begin))
    d = diagnose(load_trace(write(tmp_path / "host.json", loop.events, devices=a100())))
    (f,) = [f for f in d.findings if f.code == "TP310"]
    assert f.saving_ms is None and f.severity == "medium"
    assert "host runs Python" in f.detail
    assert f.evidence["gpu_idle_host_ms"] > 0.5 * d.profile.step_ms


@pytest.mark.parametrize(
    "name",
    ["h100_imagenet_resnet50.json.gz", "h100_article_example_224.json.gz",
     "h100_dcgan.json.gz", "resnet_nccl_rank0.json.gz", "sampled_rank0.json.gz"],
)  # fmt: skip
def test_every_shared_trace_with_idle_names_its_largest_cause(shared_traces, name):
    from torchpace.doctor.checks.gpu_idle import MIN_IDLE_SHARE, idle_causes_ms

    d = diagnose(load_trace(shared_traces / name))
    p = d.profile
    causes = idle_causes_ms(p)
    step = sum(m.wall_ms for m in p.per_step) / p.steps
    if sum(causes.values()) / step < MIN_IDLE_SHARE:
        return
    largest = max(causes, key=causes.get)
    named = [f for f in d.findings if any("the largest part" in n for n in f.notes)]
    if causes[largest] / step >= 0.10 and not (largest == "host" and p.median.gpu_comm_ms):
        assert len(named) == 1, (name, causes, [f.code for f in d.findings])


def test_dcgan_syncs_are_priced_by_their_idle(shared_traces):
    """pytorch/examples dcgan logs five .item() per iteration: the host waits 0.05 ms in
    them, the device idles ~2.1 ms after them; the sync finding is now there, at that cost."""
    d = diagnose(load_trace(shared_traces / "h100_dcgan.json.gz"))
    sync = next(f for f in d.findings if f.code == "TP201")
    assert d.profile.median.sync_wait_ms < 0.1
    assert sync.saving_ms == pytest.approx(sync.evidence["gpu_idle_charged_to_syncs_ms"], abs=0.01)
    assert sync.saving_ms > 1.5
