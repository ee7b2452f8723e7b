"""The store thread's memory of the last state read, and restoring it when the store forgot.

A store without persistence restarted, a flush, a deleted key, an eviction or a
failover that lost the last writes would otherwise read as "nothing paused" and resume
the cluster. The worker instead keeps what it had and writes the state it knew back
(:mod:`..model.restoring`), with a ``restore`` entry in the history; if that write
fails it keeps holding and tries again at the next read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import InvalidInput, StoreError
from ..history import HISTORY_LOG, restore_entry
from ..model.restoring import forgotten, restore
from ..model.state import PauseState, Restored
from ..settings import PauseConfig
from ..stores import Snapshot, Store

logger = logging.getLogger(__name__)


class Recall:
    """The last state one worker read, written back when the store forgets it."""

    def __init__(self, *, store: Store, config: PauseConfig, hostname: Callable[[], str]) -> None:
        """Nothing read yet.

        Parameters:
            store: The pause store.
            config: The app's pause settings.
            hostname: The worker's name, asked for only when it restores.
        """
        self.store = store
        self.config = config
        self._hostname = hostname
        self.known = PauseState()
        """The last state read (without the windows), or restored."""

    def check(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot to apply for ``snapshot`` just read: it, or (when the store forgot
        the state known) the state restored, or the one another worker restored.

        Raises:
            StoreError: The restore could not be written: keep the last known state.
        """
        if forgotten(self.known, snapshot.state) is None:
            self.known = snapshot.state
            return snapshot
        by = self._hostname()
        known = self.known
        updated = self.store.update(lambda state, now: restore(state, now, known=known, by=by))
        self.known = updated.snapshot.state
        restored = updated.result
        if updated.changed and restored is not None:
            logger.warning(
                "celery-pause: %s: %s; restored the %d hold(s) this worker knew (generation %d)",
                self.store.display_url,
                restored.lost,
                len(self.known.holds),
                restored.generation,
            )
            self._record(self.known, restored)
        return updated.snapshot

    def _record(self, state: PauseState, restored: Restored) -> None:
        entry = restore_entry(state, restored).to_json()
        try:
            self.store.append_log(HISTORY_LOG, entry, keep=self.config.history_size)
        except (StoreError, InvalidInput) as exc:
            logger.warning("celery-pause: could not record the restore in the history: %s", exc)
