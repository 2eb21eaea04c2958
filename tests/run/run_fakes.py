"""A tune knob that exists only in tests, usable in this process and across an exec.

The real knob modules are written separately; these tests must not depend on them. In this
process the fake is registered by monkeypatching the registry. A process that `torchpace
run` execs cannot see a monkeypatch, so ``sitecustomize_dir`` writes a ``sitecustomize.py``
that registers the same knob when any Python started with that folder on PYTHONPATH starts:
the `torchpace run` parent (which validates the configuration) and the child it execs
(which applies it).
"""

from __future__ import annotations

import sys
import textwrap
import types
from pathlib import Path

NAME = "fake-workers"
MODULE = "torchpace.knobs.fake_workers"

KNOB_SOURCE = textwrap.dedent(
    '''
    from torchpace.knobs.base import Knob


    class FakeWorkers(Knob):
        """Sets every DataLoader's num_workers, as the real num-workers knob does."""

        name = "fake-workers"
        title = "DataLoader workers (a test's fake knob)"
        value_type = int

        def apply(self, value, runtime):
            runtime.filter_loader_kwargs(lambda kwargs: {**kwargs, "num_workers": value})
            return f"num_workers={value}"


    KNOB = FakeWorkers()
    '''
)

SITECUSTOMIZE = (
    "import sys, types\n"
    "import torchpace.knobs as _registry\n"
    f"_module = types.ModuleType({MODULE!r})\n"
    f"exec({KNOB_SOURCE!r}, _module.__dict__)\n"
    f"sys.modules[{MODULE!r}] = _module\n"
    f"_registry._MODULES[{NAME!r}] = {MODULE.rsplit('.', 1)[1]!r}\n"
    f"_registry.NAMES = (*_registry.NAMES, {NAME!r})\n"
)


def register(monkeypatch):
    """The fake knob in this process's registry, undone at the end of the test."""
    import torchpace.knobs as registry

    module = types.ModuleType(MODULE)
    exec(KNOB_SOURCE, module.__dict__)
    monkeypatch.setitem(sys.modules, MODULE, module)
    monkeypatch.setitem(registry._MODULES, NAME, MODULE.rsplit(".", 1)[1])
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, NAME))
    return module.KNOB


def sitecustomize_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def write_config(path: Path, knobs: dict, fingerprint=None) -> Path:
    """A torchpace.toml for ``knobs``, measured (by default) in this very environment."""
    from torchpace.knobs.config import TuneConfig, write_config
    from torchpace.knobs.fingerprint import current

    write_config(path, TuneConfig(dict(knobs), fingerprint or current()))
    return path


LOADER_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(4, 1)), batch_size=2)
    print(f"num_workers={loader.num_workers} pid={os.getpid()} argv={sys.argv[1:]}")
    """
)
