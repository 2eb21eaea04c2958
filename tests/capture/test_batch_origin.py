"""The evidence TP106 needs: did a loader's float batches come from 8-bit data?"""

import pytest
import torch

from torchpace.capture import batch_origin
from torchpace.capture.runner import CaptureSpec, capture_script


def pixels(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


def test_k_over_255_is_seen_through_normalize():
    x = pixels(16, 3, 32, 32).float() / 255
    assert batch_origin.from_batch((x, torch.zeros(16))) is not None
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    assert batch_origin.from_batch([(x - mean) / std]) is not None
    assert batch_origin.from_batch({"image": x * 2 - 1, "label": torch.ones(16)}) is not None


def test_float_data_by_nature_is_not_claimed():
    g = torch.Generator().manual_seed(0)
    assert batch_origin.from_batch(torch.randn(16, 3, 32, 32, generator=g)) is None
    # 12-bit data (a medical scan, say) has more than 256 levels
    assert batch_origin.from_batch(torch.randint(0, 4096, (16, 1, 64, 64)).float() / 4095) is None
    # not image-shaped, not float, constant: nothing to say
    assert batch_origin.from_batch(pixels(16, 7, 8, 8).float() / 255) is None
    assert batch_origin.from_batch(pixels(16, 3, 8, 8)) is None
    assert batch_origin.from_batch(torch.zeros(4, 3, 8, 8)) is None
    assert batch_origin.from_batch(None) is None


class Divides(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return pixels(3, 4, 4).float() / 255.0


class Plain(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return torch.randn(3, 4, 4)


def test_dataset_evidence_from_transform_or_source():
    assert batch_origin.from_dataset(Plain(), ["Resize", "ToTensor", "Normalize"]) == (
        "transform ToTensor"
    )
    assert batch_origin.from_dataset(Divides(), None) == "/255 in Divides.__getitem__"
    assert batch_origin.from_dataset(Plain(), ["Normalize"]) is None
    assert batch_origin.from_dataset(Plain(), None) is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "evidence"),
    [
        ("features", None),
        ("divided", "/255 in Divided.__getitem__"),
        ("grid", "first batch: at most 256 evenly spaced levels per channel (k/255)"),
    ],
)
def test_the_capture_records_the_origin(tmp_path, kind, evidence):
    from conftest import ROOT

    script = ROOT / "tests" / "planted" / "float_batches.py"
    spec = CaptureSpec(str(script), ["--kind", kind, "--steps", "6"], tmp_path, warmup=1,
                       steps=2, measure_s=0.0)  # fmt: skip
    (loader,) = capture_script(spec).facts.loaders
    assert loader.uint8_evidence == evidence
