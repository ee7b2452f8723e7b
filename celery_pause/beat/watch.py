"""Beat's view of the pause state: a thread that reads the store and a cached answer.

The thread reads every ``pause_poll_interval`` seconds and again exactly when a hold
starts or ends; between reads, holds are judged active against the store's clock
extrapolated from the last read, so a scheduled start lands on time. Asking costs no
store round-trip. While the store cannot be read, the last state read stays in force;
before any read succeeded nothing is skipped (beat sends; the workers still hold paused
tasks, so nothing runs early and nothing is lost).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..errors import StoreError
from ..logs import ThrottledLog
from ..model.scope import Target
from ..model.state import BEAT_SKIP, Hold, PauseState
from ..model.windows import with_windows
from ..settings import PauseConfig
from ..stores import Store

logger = logging.getLogger(__name__)

Reader = Callable[[PauseState, float], None]
"""Called on the watch thread with every state read (windows added) and its store time."""


class BeatWatch(threading.Thread):
    """Keeps beat's copy of the pause state fresh."""

    def __init__(
        self, *, store: Store, config: PauseConfig, on_read: Reader, who: str = "beat"
    ) -> None:
        super().__init__(name=f"celery-pause-{who}", daemon=True)
        self.who = who
        self.store = store
        self.config = config
        self._on_read = on_read
        self._read: tuple[PauseState, float, float] | None = None
        """The state, the store time of the read and the local monotonic time of the read."""
        self._stopping = threading.Event()
        self._errors = ThrottledLog(logger)
        self.store_ok = False

    def stop(self) -> None:
        self._stopping.set()

    def now(self) -> float | None:
        """The store's clock, extrapolated from the last read (``None`` before one)."""
        read = self._read
        return None if read is None else read[1] + (time.monotonic() - read[2])

    def active_holds(self) -> tuple[Hold, ...]:
        """The holds of the last state read that are active now, on the store's clock as
        extrapolated from that read (none before a read)."""
        read = self._read
        if read is None:
            return ()
        state, at, local = read
        return state.active_holds(at + (time.monotonic() - local))

    def skipping(self, queue: str, task: str) -> Hold | None:
        """The active ``skip`` hold that covers ``task`` of ``queue`` on every worker, if any."""
        for hold in self.active_holds():
            skips = hold.beat == BEAT_SKIP and hold.pauses  # a limit never skips
            if skips and hold.scope.covers(Target(queue=queue, task=task)):
                return hold
        return None

    def read_now(self) -> None:
        """One read of the store (on the caller's thread)."""
        try:
            snapshot = self.store.read()
        except StoreError as exc:
            self.store_ok = False
            self._errors.error(
                "celery-pause: %s cannot read the pause state: %s; keeping the last state "
                "read (or sending every entry if none was read yet), retrying",
                self.who,
                exc,
            )
            return
        if not self.store_ok and self._read is not None:
            logger.warning("celery-pause: %s reads the pause state again", self.who)
        self.store_ok = True
        state = with_windows(snapshot.state, self.config.windows, snapshot.now)
        self._read = (state, snapshot.now, time.monotonic())
        self._on_read(state, snapshot.now)

    def run(self) -> None:
        while not self._stopping.is_set():
            wait = self.config.poll_interval
            try:
                self.read_now()
                read = self._read
                if read is not None:
                    state, at, local = read
                    change = state.next_change(at)
                    if change is not None:
                        due = local + (change - at) - time.monotonic()
                        wait = min(wait, max(due, 0.0) + 0.001)
            except Exception:
                # A bug must not end the thread: beat would stop following the store.
                logger.exception("celery-pause: %s's pause watch failed; retrying", self.who)
            self._stopping.wait(wait)
