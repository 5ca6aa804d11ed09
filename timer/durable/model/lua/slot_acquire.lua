--[[ slot_acquire: take (or keep) one of a key's N handler slots (per-key limits).

A handler runner with a limit (`tickwheel handle --limit payload.tenant=2`) holds a slot
of its outcome's key while the handler runs: a member of the key's set, scored with the
time its lease ends. A runner killed mid-handler stops renewing: its slot is free once
the lease ends. Calling again with a member already held renews it. A member is one
attempt: a handler past its timeout still runs and keeps its slot, and its retry (the
same entry, the next attempt) needs a slot of its own.

KEYS[1]  {tw:<ns>}:lim:<group>:<limit>:<value>   ZSET  member -> lease end (Redis ms)
ARGV[1]  member (<consumer>/<shard>/<entry id>/<attempt>)   ARGV[2]  N, the slots of the key
ARGV[3]  lease_ms

Returns  1  the member holds a slot until now + lease_ms
         0  all N slots are held by others: wait and call again
Cost     O(log M) for M slots held, plus the expired ones removed.
]]
--- @include "util"
local SLOTS = KEYS[1]
local member, n, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', SLOTS, '-inf', now)  -- leases that ended: their runner died
if not redis.call('ZSCORE', SLOTS, member) and redis.call('ZCARD', SLOTS) >= n then
  return 0
end
redis.call('ZADD', SLOTS, now + lease, member)
redis.call('PEXPIRE', SLOTS, lease * 2)  -- a key no one holds goes away by itself
return 1
