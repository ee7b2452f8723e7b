"""When a recurring maintenance window starts: the run times of a Celery schedule.

Every process of the app computes a window's occurrences from its configuration, so
they must not depend on when a process started or last ran:

- a ``crontab`` is asked for its next run after a given time (in the app's timezone);
- a plain ``schedule(run_every=...)`` counts whole periods from the Unix epoch:
  ``schedule(run_every=600)`` starts at :00, :10, :20, … of every hour (UTC);
- any other schedule object (``solar``, a custom one) is asked, through
  ``remaining_estimate(last_run_at)``, how long after now its next run after a given time is.

Times are store times in seconds since the epoch, rounded to the whole second so that
every process names an occurrence alike.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule

from ..errors import InvalidWindow

HORIZON = 5 * 366 * 86400.0
"""A schedule with no run within this many seconds counts as never firing."""


def as_schedule(value: Any, app: Celery, name: str) -> Any:
    """A Celery schedule object: ``value`` itself (bound to ``app`` as beat binds its entries),
    or ``schedule(run_every=value)`` for a number of seconds or a ``timedelta``."""
    if isinstance(value, bool):
        raise InvalidWindow(f"window {name!r}: schedule must be a Celery schedule")
    if isinstance(value, (int, float, timedelta)):
        value = schedule(run_every=value, app=app)
    if not callable(getattr(value, "remaining_estimate", None)) or not callable(
        getattr(value, "is_due", None)
    ):
        raise InvalidWindow(
            f"window {name!r}: schedule must be a Celery schedule (crontab(...), "
            f"schedule(run_every=...) or any object with remaining_estimate and is_due), "
            f"got {type(value).__name__}"
        )
    if getattr(value, "_app", app) is None:
        value.app = app
    if isinstance(value, schedule) and not value.run_every.total_seconds() >= 1:
        raise InvalidWindow(f"window {name!r}: a schedule's period must be at least 1s")
    return value


def next_start(recurrence: Any, after: float) -> float | None:
    """The first run of ``recurrence`` strictly after store time ``after``, whole seconds;
    ``None`` if there is none within :data:`HORIZON`."""
    if isinstance(recurrence, schedule):
        period = recurrence.run_every.total_seconds()
        start = float((math.floor(after / period) + 1) * period)
    elif isinstance(recurrence, crontab):
        last, delta, _ = recurrence.remaining_delta(_moment(after))
        start = float(math.ceil((last + delta).timestamp()))
    else:
        # remaining_estimate counts from the schedule's own "now": shift to ``after``'s frame.
        remaining = recurrence.remaining_estimate(_moment(after)).total_seconds()
        start = float(math.ceil(time.time() + remaining))
    if not math.isfinite(start) or start <= after or start - after > HORIZON:
        return None
    return start


def starts(recurrence: Any, after: float, count: int) -> list[float]:
    """The first ``count`` runs after ``after`` (fewer if it stops firing)."""
    found: list[float] = []
    moment: float | None = after
    while moment is not None and len(found) < count:
        moment = next_start(recurrence, moment)
        if moment is not None:
            found.append(moment)
    return found


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)
