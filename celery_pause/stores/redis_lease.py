"""Taking a lease on Redis in one command: a script that does what
:func:`~celery_pause.stores.primitives.acquire` does in a transaction (read, decide at the
server's clock, write), the record as every store keeps it (``{"owner", "expires"}``).

A copy of a parked task takes its task id's claim this way just before it starts: one round
trip on the consumer loop, where the transaction takes three and five more commands.
"""

from __future__ import annotations

ACQUIRE = """
local raw = redis.call('GET', KEYS[1])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
if raw then
  local ok, record = pcall(cjson.decode, raw)
  if not ok or type(record) ~= 'table' or not string.match(raw, '^%s*{') then
    return redis.error_reply('UNREADABLE lease record')
  end
  local expires = record['expires']
  if type(expires) == 'number' and expires > now and expires < math.huge
      and record['owner'] ~= ARGV[1] then
    return 0
  end
end
redis.call('SET', KEYS[1], cjson.encode({owner = ARGV[1], expires = now + tonumber(ARGV[2])}))
return 1
"""
"""KEYS[1]: the lease's record; ARGV: owner, seconds. 1 if taken or extended, 0 if another
owner holds it; an error reply if the record is not JSON."""
