--[[ sweep: the leader expires what is left in durable buckets whose end has passed.

Pub/sub only makes firing fast; sweep makes it certain. Every timer of a bucket whose end
(n+1) * bucket_ms is not after now is due, so it is expired here, oldest bucket first:
each id read is checked against its record (pending and due by Redis TIME), and the
bucket (a lazy list, see include/buckets.lua) gives up every id read, stale ones
included, so it empties as it is swept.
First it moves the coarse buckets that start within the next hour (or have started) into
the fine ones, at most `limit` timers (cascade in include/buckets.lua), so far timers reach the buckets
the leader loads an hour ahead, and overdue ones are expired in this same call.

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:out (STREAM)
KEYS[4]  P:lease    KEYS[5]  P:epoch      KEYS[6]  P:S (schedules)  KEYS[7]  P:Sq
ARGV[1]  P          ARGV[2]  worker id    ARGV[3]  epoch
ARGV[4]  bucket_ms  ARGV[5]  result_ttl_ms
ARGV[6]  ahead: as for fire (the results table grows for timers expected soon)
ARGV[7]  limit: the most timers expired by this call

Returns  {fired, more, moved, queued, held, traced}: fired = {id, deadline_ms, ...} expired by this
         call; more = 1 if ended buckets (or started coarse ones) still hold timers (call
         again); moved = timers moved from coarse buckets to fine ones; queued =
         schedules whose armed occurrence this expired, left in P:Sq for the leader to
         plan their next (sweep has no plans: include/schedules.lua); held = {id,
         deadline, ...}: occurrences waiting for their previous one to be handled
         (overlap 'buffer-one'), moved a little later; traced = {id, traceparent,
         decided_ms, ...}: fired timers scheduled with a trace context (as fire's).
Errors   FENCED
Atomic   as fire: never early by Redis TIME, never twice.
Cost     O(limit * W) plus O(log B) per bucket visited; one HMGET per bucket, the
         index writes coalesced (see decide_many).
Keys built from P: P:b:<n>, P:c:<m>, P:coarse, P:w:<key>, P:rx, P:R:<b>.
]]
--- @include "util"
--- @include "keys"
--- @include "results"
--- @include "buckets"
--- @include "decide"
--- @include "fence"
--- @include "schedules"
local TIMERS, BUCKETS, OUT, LEASE, EPOCH, SCHEDULES, SCHEDULE_QUEUE = unpack(KEYS, 1, 7)
local P, worker, epoch, bucket_ms, result_ttl_ms = unpack(ARGV, 1, 5)
local ahead, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local fenced = check_fence(LEASE, EPOCH, worker, epoch)
if fenced then return fenced end
refuse_when_out_of_memory(BUCKETS)
local ctx = shard_ctx(P, TIMERS, BUCKETS, OUT, nil, bucket_ms, result_ttl_ms)
-- (no echo event: the leader calling this knows what it decides)
bucket_ms = ctx.bucket_ms  -- a number
local now = now_ms()
results(ctx).ahead = ahead
local moved, started = cascade(P, TIMERS, BUCKETS, bucket_ms, now, limit)
local fired = {}
local queued = 0
local held = {}  -- buffered occurrences moved a little later: {id, deadline, ...}
local traced = {}  -- {id, traceparent, decided_ms, ...}: fired timers with a trace context
local budget = limit
local ended = redis.call('ZRANGEBYSCORE', BUCKETS, '-inf', now - bucket_ms, 'LIMIT', 0, limit)
for _, n in ipairs(ended) do
  if budget <= 0 then break end
  local b = bucket_key(P, tonumber(n))
  local ids = redis.call('LPOP', b, budget) or {}  -- every id read is taken out
  if #ids > 0 then
    local raws = redis.call('HMGET', TIMERS, unpack(ids))
    -- each pending id once; one not yet due was moved to a later bucket, and stays there
    local due, ds, recs, lean = due_records(ids, raws, now)
    local h, _, q0, maybe
    due, ds, recs, lean, h, _, q0, maybe = sched_overlap(P, TIMERS, BUCKETS, SCHEDULES,
      SCHEDULE_QUEUE, OUT, bucket_ms, {due, ds, recs, lean}, nil, now)
    for _, x in ipairs(h) do held[#held + 1] = x end
    for k, id in ipairs(due) do
      fired[#fired + 1] = id
      fired[#fired + 1] = istr(ds[k])
    end
    budget = budget - #ids
    ctx.eids = maybe and {} or nil
    decide_many(ctx, due, ds, recs, lean, 'expired', now)
    add_traced(traced, due, recs, now)
    local _, q = sched_decided(P, TIMERS, BUCKETS, SCHEDULES, SCHEDULE_QUEUE, bucket_ms, due, nil,
      ctx.eids, now)
    queued = queued + q + q0
  end
  if redis.call('EXISTS', b) == 0 then
    redis.call('ZREM', BUCKETS, n)
  end
end
local more = 0
if started or (budget <= 0 and
    #redis.call('ZRANGEBYSCORE', BUCKETS, '-inf', now - bucket_ms, 'LIMIT', 0, 1) > 0) then
  more = 1
end
return {fired, more, moved, queued, held, traced}
