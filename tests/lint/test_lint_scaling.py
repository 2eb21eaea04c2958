"""Work that grows with a file: counted, not timed (timings are benchmarks' job)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.index import build_index
from torchpace.lint.rules import _loader_batches

BLOCK = """
def make_{i}(ds):
    return DataLoader(ds, num_workers=2)


def train_{i}(model, ds):
    loader = make_{i}(ds)
    for x, y in loader:
        model(x.cuda()).sum().backward()
"""


def _flow_work(blocks: int, monkeypatch) -> int:
    """How many expressions the loader flow search tests in a file of ``blocks`` builders
    and loops."""
    source = "from torch.utils.data import DataLoader\n" + "".join(
        BLOCK.format(i=i) for i in range(blocks)
    )
    module = cst.parse_module(source)
    index = build_index(source, module)
    tested = 0
    paths_in = _loader_batches._paths_in

    def counting(expr, matches, path):
        nonlocal tested
        tested += 1
        return paths_in(expr, matches, path)

    monkeypatch.setattr(_loader_batches, "_paths_in", counting)
    found = _loader_batches.loaders(index)
    assert len(found) == blocks  # every loader reaches its own loop
    return tested


def test_following_loaders_is_linear_in_the_file(monkeypatch):
    """Each loader used to test every assignment, return and call of the file: 60 loaders
    cost four times what 30 did (issue 23: a 5 MB file took minutes)."""
    small = _flow_work(30, monkeypatch)
    large = _flow_work(60, monkeypatch)
    assert large <= 2.2 * small, (small, large)
