--[[ fire: the leader expires a batch of due timers, fenced by its lease and epoch.

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:out (STREAM)
KEYS[4]  P:lease    KEYS[5]  P:epoch      KEYS[6]  P:S (schedules)  KEYS[7]  P:Sq
ARGV[1]  P          ARGV[2]  worker id    ARGV[3]  epoch (fencing token)
ARGV[4]  bucket_ms  ARGV[5]  result_ttl_ms
ARGV[6]  ahead: how many more timers of the shard the caller expects to decide soon (those
         in its wheel); the results table grows for them while that is cheap (rx_grow)
ARGV[7]  plans ('' none): msgpack array of {id, version, next id, next deadline, missed},
         the next occurrence of each id that is its schedule's armed occurrence
ARGV[8]  hand: how many new outcome entries to hand the caller's own consumer (0: none),
         ARGV[9] its group and ARGV[10] its name (a worker that runs handlers itself)
ARGV[10+i] id_i     (oldest deadline first: outcomes are appended in this order)

Returns  {fired, early, armed, queued, traced, now, handed}: fired = ids expired by this
         call; early = {id, deadline_ms, ...} for ids whose deadline is still ahead by
         Redis time (the caller re-inserts them). Ids already decided are neither
         (someone else decided them first). armed = {id, deadline_ms, ...}: next occurrences armed (include/
         schedules.lua); queued = schedules left for the leader to plan (no valid plan).
         An occurrence whose schedule waits for its previous outcome to be handled
         (overlap) is not fired: skipped (its next armed), or held a little later, in
         early with its new deadline. traced = {id, traceparent, decided_ms, ...} for
         the fired timers scheduled with a trace context (see timer/tracing.py). now =
         Redis time (ms) of the call: a caller told "early" learns how early it was.
         handed = {{entry id, {field, value, ...}}, ...}: when this call fired any and
         ARGV[8] > 0, up to that many entries the group had not delivered, oldest first,
         read for the caller's consumer in this same step (XREADGROUP: in its pending
         list, so its crash leaves them to the group's claims as any reader's); none if
         the group does not exist on this stream.
Errors   FENCED    the caller does not hold the lease at this epoch: it must drop the shard
Atomic   a timer is never fired before its deadline by Redis TIME and never decided twice;
         a schedule's next occurrence is armed with the decision of the one before.
Cost     O(N * W) for N ids: one HMGET, the index writes coalesced (see decide_many);
         a lean record (see peek_rec) is decided without unpacking it.
]]
--- @include "util"
--- @include "results"
--- @include "decide"
--- @include "fence"
--- @include "schedules"
local TIMERS, BUCKETS, OUT, LEASE, EPOCH, SCHEDULES, SCHEDULE_QUEUE = unpack(KEYS, 1, 7)
local P, worker, epoch, bucket_ms, result_ttl_ms, ahead, packed_plans = unpack(ARGV, 1, 7)
local hand, hand_group, hand_consumer = tonumber(ARGV[8]), ARGV[9], ARGV[10]
local FIRST_ID = 11  -- ARGV[11..]: the ids
local fenced = check_fence(LEASE, EPOCH, worker, epoch)
if fenced then return fenced end
refuse_when_out_of_memory(BUCKETS)
local ctx = shard_ctx(P, TIMERS, BUCKETS, OUT, nil, bucket_ms, result_ttl_ms)
-- (no echo event: the leader calling this knows what it decides)
results(ctx).ahead = tonumber(ahead)
local now = now_ms()
local due  -- set below: what this call fires
-- The entries for the caller's own consumer, read in this step (ARGV[8..10]).
local function hand_over()
  if hand == 0 or #due == 0 then return NONE end
  local got = redis.pcall('XREADGROUP', 'GROUP', hand_group, hand_consumer, 'COUNT', hand,
    'STREAMS', OUT, '>')
  if type(got) ~= 'table' or got.err or not got[1] then return NONE end  -- NOGROUP: none
  return got[1][2]
end
local ids = {}
for i = FIRST_ID, #ARGV do ids[#ids + 1] = ARGV[i] end
local ds, recs, raws, early
due, ds, recs, raws, early = due_records(ids, redis.call('HMGET', TIMERS, unpack(ids)),
  now)
local plans
if packed_plans ~= '' then
  plans = {}
  for _, p in ipairs(cmsgpack.unpack(packed_plans)) do plans[p[1]] = p end
end
local held, skip_armed, skip_queued, maybe
due, ds, recs, raws, held, skip_armed, skip_queued, maybe = sched_overlap(P, TIMERS,
  BUCKETS, SCHEDULES, SCHEDULE_QUEUE, OUT, ctx.bucket_ms, {due, ds, recs, raws}, plans, now)
if not maybe then  -- no id of the batch can be a schedule's occurrence: the plain path
  decide_many(ctx, due, ds, recs, raws, 'expired', now)
  return {due, early, NONE, 0, add_traced({}, due, recs, now), now, hand_over()}
end
for _, x in ipairs(held) do early[#early + 1] = x end
ctx.eids = {}
decide_many(ctx, due, ds, recs, raws, 'expired', now)
local armed, queued = sched_decided(P, TIMERS, BUCKETS, SCHEDULES, SCHEDULE_QUEUE, ctx.bucket_ms,
  due, plans, ctx.eids, now)
for _, x in ipairs(skip_armed) do armed[#armed + 1] = x end
return {due, early, armed, queued + skip_queued, add_traced({}, due, recs, now), now,
  hand_over()}
