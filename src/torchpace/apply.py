"""``torchpace.apply()``: a tuned configuration applied from inside the user's own script.

``torchpace run train.py`` applies ``torchpace.toml`` without touching the script; this is the
same, for jobs started some other way (a launcher, a notebook, a cluster's own wrapper)::

    import torchpace
    torchpace.apply()          # first: before the DataLoader, the model and the optimizer

    loader = DataLoader(...)   # built with the tuned settings

The knobs work by patching what the script builds next (a DataLoader's keyword arguments,
an optimizer's, the model's first call), so objects built before the call keep their old
settings. Call it at the top of the script, or at least before the first of them is built.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchpace.knobs.config import ConfigError, EnvironmentMismatch

# knobs/config.py's DEFAULT_PATH, written out: importing torchpace must not load the config
# reader (tomllib) before a script that `torchpace run` starts in this process
DEFAULT_PATH = "torchpace.toml"

__all__ = ["ConfigError", "EnvironmentMismatch", "apply"]


def apply(path: str | Path = DEFAULT_PATH, force: bool = False) -> list:
    """Applies the knobs of ``path`` (``torchpace.toml`` in the current folder by default) to
    this process and returns what each did (``KnobRecord``s).

    Raises ``ConfigError`` when the file is missing or invalid, and ``EnvironmentMismatch``
    (a ConfigError) naming each difference when it was measured on another device, torch
    minor version or number of usable cores, unless ``force``. Must be called before the
    DataLoader, model and optimizer are built.
    """
    from torchpace.capture.runtime import runtime
    from torchpace.facts.knob_record import KnobRecord
    from torchpace.knobs.config import check_environment, idle_without_cuda, load_config

    # What has been applied in this process, and from where: a second call (or a call
    # inside a script that `torchpace run` started) applies nothing twice.
    if runtime().applied_by is not None:
        source, records = runtime().applied_by
        print(
            f"torchpace.apply: knobs are already applied in this process (by {source}); "
            "nothing applied again",
            file=sys.stderr,
        )
        return list(records)
    config = load_config(path)
    differences = check_environment(config, force=force, force_hint="force=True")
    for difference in differences:  # forced: say what may not hold
        print(f"torchpace.apply: applied anyway (force): {difference}", file=sys.stderr)
    idle = idle_without_cuda(config.knobs)
    if idle:
        print(f"torchpace.apply: {idle}", file=sys.stderr)
    from torchpace.knobs import apply_all

    records = apply_all(config.knobs, runtime(), lambda n, v, d: KnobRecord(n, v, True, d))
    runtime().applied_by = (str(path), records)
    return records


def __getattr__(name: str):
    # the exceptions, re-exported without importing the config reader at import time
    if name in ("ConfigError", "EnvironmentMismatch"):
        from torchpace.knobs import config

        return getattr(config, name)
    raise AttributeError(f"module 'torchpace.apply' has no attribute {name!r}")
