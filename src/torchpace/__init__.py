"""torchpace: make PyTorch training fast by measurement."""

from torchpace._version import __version__

__all__ = ["__version__"]
