"""What celery-pause reads of a task message: untrusted input, read once, never raising.

A message's headers, arguments and label values may be of any type and size: a producer in
any language can send a lone surrogate (the JSON text ``"\\ud800"``), a NUL, a megabyte, a
nested container, bytes, or (with pickle accepted) an object whose ``__str__`` raises. The
gate reads each value through :func:`label_value`, which returns text an operator could have
typed, or :data:`UNREADABLE`: the value every unreadable label reads as. Such a task is
neither lost nor looped: it is outside every hold of a label value but the patterns that
match ``<unreadable>`` (``tenant=*``), and a limit per label counts all of them as one value.
"""

from __future__ import annotations

import math
from typing import Any

MAX_VALUE = 200
"""Longest label value read as itself (the longest name an operator may give)."""
UNREADABLE = "<unreadable>"
"""The value of a label whose value in the message is not text of at most
:data:`MAX_VALUE` printable characters (nor a number or a boolean)."""
MAX_SHOWN = 64
"""Longest task id (or name) a log line shows of a message."""


def label_value(value: Any) -> str | None:
    """The text of a label value from a message: ``None`` when it is absent (``None``),
    else itself, its string form (a number or a boolean), or :data:`UNREADABLE`."""
    if value is None:
        return None
    kind = type(value)
    if kind is str:
        text: str = value
    elif kind in (int, float, bool):
        try:
            text = str(value)
        except ValueError:  # an int past sys.get_int_max_str_digits()
            return UNREADABLE
    else:
        return UNREADABLE
    if len(text) > MAX_VALUE or not text or not text.isprintable() or not _encodes(text):
        return UNREADABLE
    return text


def units(value: Any) -> float | None:
    """A cost from a message: a finite number of at least 0 (an ``int``, a ``float`` or
    their text, not a boolean), else ``None``."""
    if type(value) not in (int, float) and not (type(value) is str and len(value) <= 32):
        return None
    try:
        cost = float(value)
    except (OverflowError, ValueError):  # an int too large for a float; not a number
        return None
    return cost if 0 <= cost < math.inf else None


def _encodes(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogates): store keys and JSON need it."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def shown(value: Any) -> str:
    """A message's task id or name as a log line shows it: printable ASCII, at most
    :data:`MAX_SHOWN` characters, whatever ``value`` is (never raises)."""
    text = value if type(value) is str else f"<{type(value).__name__}>"
    pieces: list[str] = []
    size = 0
    for char in text:
        piece = ascii(char)[1:-1]  # an escape is up to 10 characters: count what is shown
        if size + len(piece) > MAX_SHOWN:
            return "".join(pieces) + "…"
        pieces.append(piece)
        size += len(piece)
    return "".join(pieces)


def text_of(value: Any) -> str:
    """A message's task id or name as a report or status holds it: itself if it is text of
    at most :data:`MAX_VALUE` characters, else its shown form (:func:`shown`)."""
    if type(value) is str and len(value) <= MAX_VALUE and _encodes(value):
        return value
    return shown(value)
