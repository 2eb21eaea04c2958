"""Bad input: the script fails before its first optimizer step."""

import torch

model = torch.nn.Linear(4, 2)
raise ValueError("planted failure before the first step: bad config value 'lr=abc'")
