"""The scheduler's side: check each due entry, skip it or send it, count what was skipped.

:class:`BeatGuard` wraps one live scheduler instance's ``apply_entry`` (Celery's
``Scheduler.tick`` calls it for each due entry, after advancing the entry) and
``apply_async`` (what ``apply_entry`` calls, and what schedulers such as redbeat call
directly, advancing the entry themselves with ``advance=True``). A skipped entry is
advanced as if sent, so the schedule simply continues after a resume. Each skip is
logged; the count per entry goes to the history as one ``skip`` entry per hold, once
the hold no longer applies (or beat stops).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery import Celery

from ..history import record, skip_entry
from ..model.state import Hold, PauseState
from ..settings import config_for
from ..stores import store_for
from .watch import BeatWatch

logger = logging.getLogger(__name__)


class SkippedRun:
    """What a wrapped ``apply_async`` returns for a run it did not send (no task id)."""

    id = None

    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    def __repr__(self) -> str:
        return f"<SkippedRun: paused by hold {self.hold.id}>"


class BeatGuard:
    """Keeps one beat scheduler from sending periodic tasks that a ``skip`` hold pauses."""

    def __init__(self, app: Celery, scheduler: Any) -> None:
        self.app = app
        self.scheduler = scheduler
        self.watch = BeatWatch(
            store=store_for(app), config=config_for(app), on_read=self._flush_ended
        )
        self._lock = threading.Lock()
        self._skipped: dict[str, tuple[Hold, dict[str, int]]] = {}
        """Per hold id: the hold and the runs skipped per entry name, not yet recorded."""

    def install(self) -> None:
        """Wrap the scheduler instance's methods and start following the pause state."""
        scheduler = self.scheduler
        send_entry = scheduler.apply_entry
        send = scheduler.apply_async
        close = scheduler.close

        @functools.wraps(send_entry)
        def apply_entry(entry: Any, producer: Any = None, **kwargs: Any) -> Any:
            if self.skip(entry) is not None:
                return None
            return send_entry(entry, producer=producer, **kwargs)

        @functools.wraps(send)
        def apply_async(
            entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
        ) -> Any:
            hold = self.skip(entry)
            if hold is None:
                return send(entry, producer=producer, advance=advance, **kwargs)
            if advance:
                scheduler.reserve(entry)  # as sending would have: the run is done
            return SkippedRun(hold)

        @functools.wraps(close)
        def close_and_record(*args: Any, **kwargs: Any) -> Any:
            self.watch.stop()
            self.flush_all()
            return close(*args, **kwargs)

        self.watch.read_now()  # the first read before the first tick, when the store answers
        scheduler.apply_entry = apply_entry
        scheduler.apply_async = apply_async
        scheduler.close = close_and_record
        self.watch.start()

    def skip(self, entry: Any) -> Hold | None:
        """The hold that skips ``entry`` now (counted and logged), or ``None`` to send it."""
        try:
            queue = entry_queue(self.app, entry)
            hold = self.watch.skipping(queue, entry.task)
            if hold is None:
                return None
            with self._lock:
                counts = self._skipped.setdefault(hold.id, (hold, {}))[1]
                counts[entry.name] = counts.get(entry.name, 0) + 1
            logger.info(
                "celery-pause: beat skipped %s (%s to %s): paused by the %s",
                entry.name,
                entry.task,
                queue,
                hold.describe(),
            )
            return hold
        except Exception:
            logger.exception(
                "celery-pause: could not check %r against the pause; sending it", entry
            )
            return None

    # -- the history ----------------------------------------------------------------------
    def _flush_ended(self, state: PauseState, now: float) -> None:
        """On the watch thread: record the skips of holds that no longer apply."""
        active = {hold.id for hold in state.active_holds(now)}
        with self._lock:
            ended = [key for key in self._skipped if key not in active]
            done = [self._skipped.pop(key) for key in ended]
        for hold, counts in done:
            ends = hold.resume_at if hold.resume_at is not None and hold.resume_at <= now else now
            record(self.watch.store, self.watch.config, skip_entry(hold, ends, counts))

    def flush_all(self) -> None:
        """Record every count not yet recorded (beat is stopping)."""
        with self._lock:
            done = list(self._skipped.values())
            self._skipped.clear()
        now = self.watch.now()
        for hold, counts in done:
            record(
                self.watch.store,
                self.watch.config,
                skip_entry(hold, now if now is not None else hold.began, counts),
            )


def entry_queue(app: Celery, entry: Any) -> str:
    """The queue a beat entry's task goes to: its ``queue`` option or the app's routing."""
    options = dict(entry.options or {})
    queue = options.get("queue")
    if queue is None:
        queue = app.amqp.router.route(options, entry.task, entry.args, entry.kwargs).get("queue")
    if queue is None:
        return str(app.conf.task_default_queue)
    return str(getattr(queue, "name", queue))
