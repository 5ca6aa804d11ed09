--[[ lease_acquire: take a free shard lease and a new fencing epoch.

KEYS[1]  P:lease (STRING worker id, PX ttl)   KEYS[2]  P:epoch (INT)
KEYS[3]  P:handed (INT: the last epoch given back by lease_release)
ARGV[1]  worker id                             ARGV[2]  ttl_ms

Returns  {1, epoch, now_ms, handover}  acquired: epoch was INCR'd for this acquisition;
                                       handover = 1 if the epoch before it was given back
                                       (lease_release), 0 if it expired (a takeover) or
                                       this is the first
         {0, holder, pttl, now_ms}     held by another worker (pttl ms left)
Atomic   at most one holder; every acquisition gets a strictly larger epoch, so a script
         carrying an older epoch is refused (FENCED) even if the old holder still runs.
Cost     O(1). now_ms (Redis TIME) lets the worker measure its clock offset.
]]
--- @include "util"
local LEASE, EPOCH, HANDED = KEYS[1], KEYS[2], KEYS[3]
local worker, ttl_ms = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local holder = redis.call('GET', LEASE)
if holder and holder ~= worker then
  return {0, holder, redis.call('PTTL', LEASE), istr(now)}
end
local before = redis.call('GET', EPOCH)
local handover = 0
if before and redis.call('GET', HANDED) == before then handover = 1 end
redis.call('SET', LEASE, worker, 'PX', ttl_ms)
local epoch = redis.call('INCR', EPOCH)
return {1, epoch, istr(now), handover}
