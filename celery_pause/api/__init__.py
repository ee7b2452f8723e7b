"""The Python API: pause, throttle, resume and status of the whole cluster, and waiting for quiet.

Each operation checks its input (:mod:`celery_pause.model.validation`), applies a pure rule to
the state (:mod:`celery_pause.model`), writes it through the store, tells the workers, records
the history, and waits when asked.
"""

from __future__ import annotations

from ..model.lifting import lifted_scope
from .operator import default_operator
from .pause import pause
from .resume import resume
from .spend import spend
from .status import status
from .throttle import throttle
from .waiting import wait_until_quiet

__all__ = (
    "default_operator",
    "lifted_scope",
    "pause",
    "resume",
    "spend",
    "status",
    "throttle",
    "wait_until_quiet",
)
