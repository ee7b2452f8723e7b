"""Who acts: the operator recorded of a pause, a limit or a resume (``by``)."""

from __future__ import annotations

import getpass
import socket
import warnings

from ..model.validation import check_operator


def operator(by: str | None, **earlier: str | None) -> str:
    """``by`` checked, else whoever runs this process. ``earlier``: the spelling of earlier
    releases (``paused_by=``, ``resumed_by=``), still taken with a :class:`DeprecationWarning`."""
    for name, value in earlier.items():
        if value is not None:
            warnings.warn(f"{name}= is spelled by= now", DeprecationWarning, stacklevel=3)
            by = value if by is None else by
    return check_operator(by) or default_operator()


def default_operator() -> str:
    """``user@host`` of whoever runs this process."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
