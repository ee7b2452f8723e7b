"""Taking a lease on Redis in one command: a script that does what
:func:`~celery_pause.stores.primitives.acquire` does in a transaction (read, decide, write),
the record as every store keeps it (``{"owner", "expires"}``).

A task's claim is such a lease, taken for each copy of a parked task: a free one costs the
script and one ``SET``, where the transaction takes eight commands. The time is the store's,
as :class:`~celery_pause.stores.base.ClockOffset` keeps it (the server's clock read once a
minute), passed in.
"""

from __future__ import annotations

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
