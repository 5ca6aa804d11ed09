--[[ cancel: decide a pending timer as cancelled.

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:out (STREAM)
ARGV[1]  P          ARGV[2]  id           ARGV[3]  bucket_ms          ARGV[4]  result_ttl_ms
ARGV[5]  events channel of the shard

Returns  {'cancelled'}                  this call decided it
         {'decided', outcome_record}    it was already decided (expired, completed or cancelled)
         {'missing'}                    no pending timer and no retained outcome
Atomic   the timer leaves its record and watch indexes (its bucket, a lazy list, keeps
         the id: readers skip it) and its outcome is written, in one step: a concurrent
         fire, notify or complete sees either the pending timer or the outcome, never both.
         An occurrence of a recurring schedule leaves its schedule waiting for its
         leader to arm the next (include/schedules.lua, sched_ended).
Cost     O(W) for the timer's W watch keys.
]]
--- @include "decide"
--- @include "schedules"
local TIMERS, BUCKETS, OUT = KEYS[1], KEYS[2], KEYS[3]
local P, id, bucket_ms, ttl_ms, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local reply = decide_by_id(P, id, TIMERS, BUCKETS, OUT, channel, bucket_ms, ttl_ms, 'cancelled')
if reply[1] == 'cancelled' then sched_ended(P, id) end  -- a series goes on
return reply
