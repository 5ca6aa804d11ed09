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
local now = now_ms()
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, holder, redis.call('PTTL', KEYS[1]), istr(now)}
end
local before = redis.call('GET', KEYS[2])
local handover = 0
if before and redis.call('GET', KEYS[3]) == before then handover = 1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
local epoch = redis.call('INCR', KEYS[2])
return {1, epoch, istr(now), handover}
