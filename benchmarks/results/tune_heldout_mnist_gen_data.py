"""A generated stand-in for MNIST (no download) for pytorch/examples' mnist scripts: the raw
idx files torchvision's datasets.MNIST reads, 60,000 training and 10,000 test images of
random strokes, each label a faint dotted column band. Run in the example's folder:
python THIS_FILE (writes ../data/MNIST/raw, where the scripts look)."""

import struct
from pathlib import Path

import numpy as np

rng = np.random.default_rng(7)
raw = Path("../data/MNIST/raw")
raw.mkdir(parents=True, exist_ok=True)
for prefix, count in (("train", 60_000), ("t10k", 10_000)):
    labels = rng.integers(0, 10, count, dtype=np.uint8)
    images = (rng.random((count, 28, 28)) < 0.08).astype(np.uint8) * 255
    for i, label in enumerate(labels):  # a faint learnable signal: a dotted band per label
        band = images[i, 4:24, 2 + 2 * label : 4 + 2 * label]
        band[rng.random(band.shape) < 0.15] = 255
    with open(raw / f"{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
    with open(raw / f"{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 2049, count) + labels.tobytes())
