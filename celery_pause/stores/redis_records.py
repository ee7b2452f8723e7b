"""Updating a record on Redis with one script that writes the new record only if the key
still holds the value it was computed from (compare and set).

The change itself is computed here, by the same pure function every store runs
(:meth:`~celery_pause.stores.base.Store.update_record`); only the check and the write are on
the server. A watched transaction took six commands (``WATCH``, ``GET``, ``TIME``, ``MULTI``,
the write, ``EXEC``); this takes ``EVAL`` with its own ``GET`` and write, computed from the
value this process last wrote (:class:`SwappedRecords`). A change computed from a missing
record creates it with ``SET NX GET`` alone: the same comparison in one command, which
answers what the key holds if it was there after all. The time is the store's, as
:class:`~celery_pause.stores.base.ClockOffset` keeps it, as for the leases.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import cast

import redis

from .base import ClockOffset, RecordUpdated, Store, decode_record, encode_record
from .primitives import R, RecordChange

SWAP = """
local raw = redis.call('GET', KEYS[1])
local expected = false
if ARGV[1] == '1' then expected = ARGV[2] end
if raw ~= expected then
  if raw then return {0, raw} end
  return {0}
end
if ARGV[3] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[3]) end
return {1}
"""
"""KEYS[1]: the record; ARGV: ``1`` if it was read (else it was missing), the value read, the
new value (empty: delete it). ``{1}`` if written, else ``{0}`` and what the key holds now."""
CHANGED = object()
"""What a process remembers of a record another changed: read it before the next change."""
REMEMBERED = 4096
"""The most records whose last written value a process keeps (all are forgotten past it)."""


class SwappedRecords(Store):
    """Records updated with :data:`SWAP` (a base of the Redis stores, which set the state).

    Each process remembers the last value it wrote of a record (or last read of it with
    :meth:`~celery_pause.stores.base.Store.read_each`) and computes the next change from it,
    unread; a record it does not remember is guessed missing (as a limit's partition mostly
    is). A record mostly changed by one worker (its limit's slots, a tenant's partition) then
    costs the script alone, three commands; one created, one (``SET NX GET``, which answers
    what the key holds where the guess was wrong). One found changed by another (the script
    answers what it holds) is read before its next change: four commands. A guess that
    changes nothing is read to be sure."""

    client: redis.Redis
    _clock: ClockOffset
    _failing: Callable[[], AbstractContextManager[None]]
    _migrate: Callable[[], None]
    record_key: Callable[[str], str]
    _written: dict[str, bytes | object | None]
    _create_reads = True
    """Whether the server takes ``SET NX GET`` (Redis 7.0 and later)."""

    def update_record(self, key: str, change: RecordChange[R]) -> RecordUpdated[R]:
        """Change the record as last written here (else as read), and write it only if the
        key still holds that; else again from what it holds then (the script says)."""
        name = self.record_key(key)
        with self._failing():
            self._migrate()
            last = self._written.get(name)
            guessed = last is not CHANGED
            raw = last if guessed else self.client.get(name)
            while True:  # a value remembered is one this process encoded: it decodes
                current = decode_record(key, raw)  # type: ignore[arg-type]
                outcome = change(current, self._clock.now())
                if outcome.value is None:
                    if guessed:
                        fresh, guessed = self.client.get(name), False
                        if fresh != raw:
                            raw = fresh
                            self._remember(name, CHANGED if fresh is not None else None)
                            continue
                    return RecordUpdated.of(current, outcome)
                new = encode_record(outcome.value) if outcome.value else b""
                if raw is None and new:  # computed from a missing record: create it
                    created, raw = self._create(name, new)
                    if created:
                        self._remember(name, new)
                        return RecordUpdated.of(current, outcome)
                    guessed = False
                    self._remember(name, CHANGED if raw is not None else None)
                    continue
                read = b"1" if raw is not None else b"0"
                reply = self.client.execute_command(  # type: ignore[no-untyped-call]
                    "EVAL", SWAP, 1, name, read, raw or b"", new
                )
                if reply[0] == 1:
                    self._remember(name, new or None)
                    return RecordUpdated.of(current, outcome)
                raw, guessed = (reply[1] if len(reply) > 1 else None), False
                self._remember(name, CHANGED if raw is not None else None)

    def _create(self, name: str, new: bytes) -> tuple[bool, bytes | str | None]:
        """Create ``name`` as ``new`` unless it exists: whether it was, and else what it
        holds. One ``SET NX GET``; a server older than Redis 7.0 refuses ``NX`` with
        ``GET``, and is then asked with ``SET NX`` and, if that fails, a ``GET``."""
        if self._create_reads:
            try:
                held = self.client.set(name, new, nx=True, get=True)
            except redis.ResponseError as exc:
                if "syntax" not in str(exc).lower():
                    raise
                self._create_reads = False
            else:
                return held is None, cast(bytes | None, held)
        if self.client.set(name, new, nx=True):
            return True, None
        return False, self.client.get(name)

    def _remember(self, name: str, last: bytes | object | None) -> None:
        """What to compute the next change of ``name`` from: a value, ``None`` (missing) or
        :data:`CHANGED` (read it first)."""
        if len(self._written) >= REMEMBERED:
            self._written.clear()
        self._written[name] = last
