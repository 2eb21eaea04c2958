"""torchpace: make PyTorch training fast by measurement.

The names below are loaded on first use: `torchpace run` starts the user's script in this
process, and every module imported before the script is start-up time the script pays
(tomllib, importlib.metadata); the verbs import what they need themselves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from torchpace.apply import apply  # eager: the submodule of that name must not shadow it

if TYPE_CHECKING:
    from torchpace._version import __version__
    from torchpace.capture.api import step
    from torchpace.knobs.config import ConfigError, EnvironmentMismatch

__all__ = ["ConfigError", "EnvironmentMismatch", "__version__", "apply", "step"]

_LAZY = {
    "__version__": "torchpace._version",
    "step": "torchpace.capture.api",
    "ConfigError": "torchpace.knobs.config",
    "EnvironmentMismatch": "torchpace.knobs.config",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'torchpace' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
