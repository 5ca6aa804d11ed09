--[[ notify: count one notification of a watch key for the timers watching it now.

A timer completes when `need` distinct keys of its watch list have been notified; a key
notified twice counts once (each timer leaves the key's watch set once counted).

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:out (STREAM)
ARGV[1]  P          ARGV[2]  key          ARGV[3]  bucket_ms     ARGV[4]  result_ttl_ms
ARGV[5]  events channel of the shard      ARGV[6]  key channel (published once per call with more = 0)
ARGV[7]  limit: the most timers handled by this call

Returns  {completed, remaining}  timers completed by this call, and how many still watch the
         key unprocessed (call again while remaining > 0: every call is idempotent)
Atomic   each timer's count and completion are decided inside this one script; a
         completed occurrence of a recurring schedule leaves its schedule waiting for
         its leader to arm the next (include/schedules.lua, sched_ended).
Cost     O(min(limit, watchers) * W).
Keys built from P: P:w:<key> (watch index), P:rx and P:R:<b> (outcomes).
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "decide"
--- @include "schedules"
local TIMERS, BUCKETS, OUT = KEYS[1], KEYS[2], KEYS[3]
local P, key, bucket_ms, ttl_ms, channel, key_channel, limit =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
local ctx = shard_ctx(P, TIMERS, BUCKETS, OUT, channel, bucket_ms, ttl_ms)
local wkey = watch_key(P, key)
local ids = redis.call('SRANDMEMBER', wkey, limit)
local now = nil
local completed = 0
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', TIMERS, id)
  if not raw then
    redis.call('SREM', wkey, id)  -- stale: decided without cleaning up (never expected)
  else
    local rec = read_rec(raw)
    local seen = false
    for _, k in ipairs(rec.g) do
      if k == key then seen = true end
    end
    if not seen then  -- a list of its own: rec.g may be the shared NONE (see include/records.lua)
      local g = {unpack(rec.g)}
      g[#g + 1] = key
      rec.g = g
    end
    if #rec.g >= rec.n then
      now = now or now_ms()
      decide(ctx, id, rec, 'completed', now)
      if rec.s == SCHED_ORIGIN then sched_ended(P, id) end  -- its series goes on
      completed = completed + 1
    else
      redis.call('HSET', TIMERS, id, pack_rec(rec))
      redis.call('SREM', wkey, id)
    end
  end
end
local remaining = redis.call('SCARD', wkey)
if remaining == 0 then
  redis.call('PUBLISH', key_channel, istr(completed))
end
return {completed, remaining}
