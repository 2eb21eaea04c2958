"""torchpace: make PyTorch training fast by measurement."""

from torchpace._version import __version__
from torchpace.apply import apply
from torchpace.capture.api import step

__all__ = ["__version__", "apply", "step"]
