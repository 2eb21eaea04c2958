"""Bad input (for --step-on optimizer): an inference loop with no optimizer."""

import torch
from _common import parse_steps
from torch.utils.data import DataLoader, TensorDataset

steps = parse_steps()
model = torch.nn.Linear(32, 4).eval()
loader = DataLoader(TensorDataset(torch.randn(64 * steps, 32)), batch_size=64)
with torch.inference_mode():
    for (x,) in loader:
        model(x)
