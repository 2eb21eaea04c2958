"""Text that came from the user's program (file names, argv, class names, error messages, its
source lines) made safe to print: its control characters shown, never obeyed.

A file named ``x\\x1b]0;pwned\\x07.py`` or a module class named ``Net\\x1b[2J`` would otherwise
retitle the window or clear the screen from inside torchpace's own lines. Every C0 control
character (but a newline and a tab where the text is a block of lines), DEL, the C1 controls
and ESC become their ``\\xNN`` spelling, as ``repr`` writes them.
"""

from __future__ import annotations

import dataclasses
import re

# C0 (0x00-0x1f) less \t and \n, DEL, C1 (0x80-0x9f); a single line escapes \t and \n too.
_CONTROL_IN_BLOCK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _spelled(match: re.Match) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str, lines: bool = False) -> str:
    """``text`` with its control characters spelled out; ``lines``: a block whose newlines
    and tabs are kept (a traceback, a message of several lines)."""
    pattern = _CONTROL_IN_BLOCK if lines else _CONTROL_IN_LINE
    return pattern.sub(_spelled, text)


def printable_fields(value):
    """``value`` (a dataclass, list, tuple or dict, nested) with every plain str in it made
    printable (newlines kept): a report built from what the script did, ready to draw.
    Enums and other str subclasses are torchpace's own names and stay as they are."""
    if type(value) is str:
        return printable(value, lines=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            f.name: printable_fields(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.init
        }
        return dataclasses.replace(value, **changed)
    if type(value) in (list, tuple):
        return type(value)(printable_fields(v) for v in value)
    if type(value) is dict:
        return {printable_fields(k): printable_fields(v) for k, v in value.items()}
    return value
