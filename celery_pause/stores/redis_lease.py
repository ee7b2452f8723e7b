"""Taking a lease on Redis in one command: a script that does what
:func:`~celery_pause.stores.primitives.acquire` does in a transaction (read, decide, write),
the record as every store keeps it (``{"owner", "expires"}``).

A task's claim is such a lease, taken for each copy of a parked task: a free one costs the
script and one ``SET``, where the transaction takes eight commands. The time is the store's,
as :class:`~celery_pause.stores.base.ClockOffset` keeps it (the server's clock read once a
minute), passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

import redis

from ..errors import StoreError
from .base import ClockOffset, Store
from .primitives import lease_key

ACQUIRE = """
local now = tonumber(ARGV[3])
local taken = cjson.encode({owner = ARGV[1], expires = now + tonumber(ARGV[2])})
if redis.call('SET', KEYS[1], taken, 'NX') then
  return 1
end
local raw = redis.call('GET', KEYS[1])
local ok, record = pcall(cjson.decode, raw)
if not ok or type(record) ~= 'table' or not string.match(raw, '^%s*{') then
  return redis.error_reply('UNREADABLE lease record')
end
local expires = record['expires']
if type(expires) == 'number' and expires > now and expires < math.huge
    and record['owner'] ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], taken)
return 1
"""
"""KEYS[1]: the lease's record; ARGV: owner, seconds, store time now. 1 if taken or extended,
0 if another owner holds it; an error reply if the record is not a JSON object."""


class ScriptedLeases(Store):
    """Leases taken with :data:`ACQUIRE` (a base of the Redis stores, which set the state)."""

    client: redis.Redis
    _clock: ClockOffset
    _failing: Callable[[], AbstractContextManager[None]]
    _migrate: Callable[[], None]
    record_key: Callable[[str], str]

    def acquire_lease(self, key: str, owner: str, ttl: float) -> bool:
        """One script (:data:`ACQUIRE`), not a transaction."""
        name = self.record_key(lease_key(key))
        try:
            with self._failing():
                self._migrate()
                now = self._clock.now()
                taken = self.client.execute_command("EVAL", ACQUIRE, 1, name, owner, ttl, now)  # type: ignore[no-untyped-call]
                return bool(taken)
        except StoreError as exc:
            if "UNREADABLE" not in str(exc):
                raise
        return super().acquire_lease(key, owner, ttl)  # says what is wrong with the record

    def acquire_leases(self, owners: Mapping[str, str], ttl: float) -> dict[str, bool]:
        """One pipeline of :data:`ACQUIRE` scripts."""
        keys = list(owners)
        with self._failing():
            self._migrate()
            now = self._clock.now()
            with self.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    name = self.record_key(lease_key(key))
                    pipe.execute_command("EVAL", ACQUIRE, 1, name, owners[key], ttl, now)  # type: ignore[no-untyped-call]
                replies = pipe.execute(raise_on_error=False)
        return {
            key: self.acquire_lease(key, owners[key], ttl)  # says what is wrong with it
            if isinstance(reply, Exception)
            else bool(reply)
            for key, reply in zip(keys, replies, strict=True)
        }
