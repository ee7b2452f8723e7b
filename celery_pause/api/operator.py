"""Who runs this process, recorded as the operator of a pause or resume."""

from __future__ import annotations

import getpass
import socket


def default_operator() -> str:
    """``user@host`` of whoever runs this process."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
