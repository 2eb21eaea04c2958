"""Knobs applied by the capture child before an unmodified script runs (capture/child.py):
the run's facts record what each knob did, and the loaders and optimizers it changed."""

import re

import pytest
from conftest import ROOT

from torchpace.capture.runner import capture_script
from torchpace.capture.spec import CaptureSpec, Mode

pytestmark = pytest.mark.slow

TINY = """
import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image

class Images(torch.utils.data.Dataset):
    def __init__(self, transform):
        self.transform = transform
        self.data = np.random.randint(0, 256, (64, 8, 8, 3), dtype=np.uint8)
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), i % 3

transform = T.Compose([T.Resize(12), T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])
loader = torch.utils.data.DataLoader(Images(transform), batch_size=4, shuffle=True)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(400, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to("cpu")), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def line_of(text: str, start: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(start))


def timed(tmp_path, target, args, knobs):
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(target), list(args), out, mode=Mode.TIMING, knobs=knobs,
                       warmup=1, steps=2, record_loss=True, timeout_s=240)  # fmt: skip
    return capture_script(spec).facts


def test_knobs_recorded_and_the_loader_and_optimizer_changed(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TINY)
    knobs = {"num-workers": 2, "persistent-workers": True, "device-transforms": "normalize",
             "fused-optimizer": "fused", "channels-last": True}  # fmt: skip
    facts = timed(tmp_path, script, [], knobs)
    assert facts.status == "complete", facts.error
    assert [r.name for r in facts.knobs] == [
        "num-workers", "persistent-workers", "device-transforms", "fused-optimizer",
        "channels-last",
    ]  # fmt: skip
    details = {r.name: r.detail for r in facts.knobs}
    assert all(r.applied for r in facts.knobs)
    at_loader, at_optimizer = line_of(TINY, "loader ="), line_of(TINY, "optimizer =")
    assert f"train.py:{at_loader}: num_workers 0 -> 2" in details["num-workers"]
    assert f"train.py:{at_loader}: host [Resize, uint8]" in details["device-transforms"]
    # the script's path is shown relative to the working folder when that is short (a
    # checkout in /tmp, the test's script beside it), else absolute: compare its end
    assert re.search(rf"SGD at \S*train\.py:{at_optimizer}: fused=True", details["fused-optimizer"])
    assert re.search(r"Sequential at \S*train\.py:", details["channels-last"])
    (loader,) = facts.loaders
    assert (loader.num_workers, loader.persistent_workers) == (2, True)
    assert loader.transform == ["Resize", "ToUint8Tensor"]
    assert facts.optimizer_details[0].fused is True
    assert len(facts.in_phase("measured")) == 2
    assert all(s.loss is not None and s.loss > 0 for s in facts.in_phase("measured"))


def test_the_article_script_with_amp_bf16_on_the_cpu(tmp_path):
    # what --try-all tries on a CPU: bf16 autocast over the example's resnet18
    args = ["--image-size", "32", "--dataset-size", "64", "--batch-size", "8", "--steps", "6"]
    knobs = {"amp": "bf16", "device-transforms": "full", "zero-grad-set-to-none": True}
    facts = timed(tmp_path, ROOT / "examples" / "fake_cifar_resnet.py", args, knobs)
    assert facts.status == "complete", facts.error
    details = {r.name: r.detail for r in facts.knobs}
    assert "ResNet at " in details["amp"] and "torch.bfloat16" in details["amp"]
    assert "host [uint8], device [Resize, float/255, Normalize]" in details["device-transforms"]
    assert all(s.loss is not None for s in facts.in_phase("measured"))
