"""torchpace: make PyTorch training fast by measurement."""

from torchpace._version import __version__
from torchpace.apply import apply
from torchpace.capture.api import step
from torchpace.knobs.config import ConfigError, EnvironmentMismatch

__all__ = ["ConfigError", "EnvironmentMismatch", "__version__", "apply", "step"]
