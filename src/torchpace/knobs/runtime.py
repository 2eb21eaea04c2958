"""What a knob's ``apply`` may use in the user's process: the patch points, as a Protocol.

The capture's ``ChildRuntime`` (capture/runtime.py) is the one implementation; knobs are
typed against this small surface so that they sit below the capture, which imports them in
the child, and never import it back. No torch here: the parent reads knob declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class KnobRuntime(Protocol):
    models: list  # the trained models found so far, in the order of their first calls
    optimizers: list
    batch_dataset: Any  # the data set of the loader whose batch the batch filters see
    batches_ahead: int  # the most batches a DataLoader built so far may prefetch
    switched_knobs: frozenset[str]  # the knobs a switched trial switches in this process

    @staticmethod
    def user_location() -> str | None:
        """'train.py:42': the user's line that is running now."""

    def location_of(self, model: Any) -> str | None:
        """'train.py:42': where this model was first called."""

    def on_each_model(self, listener: Callable[[Any], None]) -> None: ...

    def on_optimizer(self, listener: Callable[[Any], None]) -> None: ...

    def filter_model_inputs(self, f: Callable[[tuple], tuple]) -> None: ...

    def filter_optimizer_kwargs(self, f: Callable[[type, dict], dict]) -> None: ...

    def filter_loader_kwargs(self, f: Callable[[dict], dict]) -> None: ...

    def filter_batches(self, f: Callable[[Any], Any]) -> None: ...
