"""The doctor on traces that torch.profiler writes here, in this process, for tiny CPU loops:
the real format of this torch version, end to end from file to findings."""

import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from torchpace.doctor.analyze import diagnose
from torchpace.trace import load_trace

ACTIVE_STEPS = 5
SPIN_S = 0.0005  # per sample: a dataset doing real work in __getitem__


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        t = time.perf_counter()
        while time.perf_counter() - t < SPIN_S:
            pass
        return torch.randn(64), i % 10


def profiled_loop(path, dataset, keep_outputs=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32)
    kept, total = [], 0.0
    sched = schedule(wait=0, warmup=1, active=ACTIVE_STEPS, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=sched) as prof:
        for i, (x, y) in enumerate(loader):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if keep_outputs:
                kept.append(out)  # the leak: each step's logits stay alive
            total += loss.item()
            prof.step()
            if i >= ACTIVE_STEPS + 1:
                break
    prof.export_chrome_trace(str(path))
    return diagnose(load_trace(path))


@pytest.fixture(scope="module")
def tiny_data():
    return torch.utils.data.TensorDataset(torch.randn(512, 64), torch.randint(0, 10, (512,)))


def test_clean_loop_has_no_findings(tmp_path, tiny_data):
    d = profiled_loop(tmp_path / "clean.json", tiny_data)
    assert d.profile.steps == ACTIVE_STEPS
    assert d.findings == []
    assert d.profile.median.backward_ms > 0 and d.profile.median.optimizer_ms > 0
    (growth,) = d.profile.growth
    assert growth.source == "trace cpu" and growth.bytes_per_step == 0


def test_outputs_kept_across_steps_are_a_leak(tmp_path, tiny_data):
    d = profiled_loop(tmp_path / "leak.json", tiny_data, keep_outputs=True)
    (f,) = d.findings
    assert f.code == "TP401"
    # 32 x 10 float32 logits kept per step
    assert f.evidence["growth_kib_per_step"] == pytest.approx(32 * 10 * 4 / 1024, rel=0.05)


def test_loading_in_the_main_process_is_tp101_from_the_trace_alone(tmp_path):
    d = profiled_loop(tmp_path / "slow.json", SlowDataset())
    assert d.findings[0].code == "TP101"
    wait = d.profile.median.data_wait_ms
    assert wait >= 32 * SPIN_S * 1000  # at least the dataset's own spin per batch
    assert d.findings[0].saving_ms == pytest.approx(wait)
    assert d.profile.loader_iter == "_SingleProcessDataLoaderIter"
