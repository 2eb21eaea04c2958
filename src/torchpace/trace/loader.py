"""Read a torch.profiler Chrome trace file (``.json`` or ``.json.gz``) into its raw dict.

Only reading and validation live here; ``model.py`` gives the events meaning. Every way a
file can fail to be a trace gets a ``TraceError`` that names the file and says what to do.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
HOW_TO_MAKE_ONE = (
    "pass a trace written by torch.profiler's export_chrome_trace() or "
    "tensorboard_trace_handler (.json or .json.gz), or run `torchpace doctor train.py` "
    "to capture one"
)


class TraceError(Exception):
    """A file that cannot be read as a torch.profiler trace; the message says why."""


def read_trace_file(path: Path) -> dict:
    """The trace's top-level JSON object; a ``TraceError`` for anything that is not one."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"trace file {path} does not exist; check the path")
    if path.is_dir():
        raise TraceError(f"{path} is a folder, not a trace file; {HOW_TO_MAKE_ONE}")
    raw = path.read_bytes()
    if not raw.strip():
        raise TraceError(f"trace file {path} is empty; {HOW_TO_MAKE_ONE}")
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(
                f"trace file {path} looks gzip-compressed but cannot be decompressed ({e}); "
                "the file is probably truncated: copy it again from where it was written"
            ) from None
    elif path.suffix == ".gz":
        raise TraceError(f"trace file {path} ends in .gz but is not gzip data; {HOW_TO_MAKE_ONE}")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"trace file {path} is not JSON ({e}); {HOW_TO_MAKE_ONE}") from None
    except RecursionError:  # a value nested deeper than the parser's stack (no trace is)
        raise TraceError(
            f"trace file {path} nests its JSON values deeper than any trace does (the "
            f"parser gave up); {HOW_TO_MAKE_ONE}"
        ) from None
    if not isinstance(data, dict) or "traceEvents" not in data:
        raise TraceError(
            f"{path} is JSON but not a Chrome trace: it has no 'traceEvents' list; "
            f"{HOW_TO_MAKE_ONE}"
        )
    if not isinstance(data["traceEvents"], list):
        raise TraceError(f"{path}: 'traceEvents' is not a list; {HOW_TO_MAKE_ONE}")
    return data
