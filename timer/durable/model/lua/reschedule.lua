--[[ reschedule: move a pending timer to a new deadline (its watch list and payload stay),
never past its cap (created + max_total_ms, when it has one);
with mode 'beat', a heartbeat: push it to now + extend_ms, never earlier than it is, and
never past its cap (created + max_total_ms, when it has one); mode 'start', the same but
earlier too (a job that started: its run deadline replaces its queue-wait one).

KEYS[1]  P:t        KEYS[2]  P:buckets
ARGV[1]  P          ARGV[2]  id
ARGV[3]  mode 'in' | 'at' | 'beat' | 'start'   ARGV[4]  delay_ms | deadline_ms (epoch ms,
                                                   Redis time) | extend_ms
ARGV[5]  bucket_ms  ARGV[6]  max_delay_ms ARGV[7]  events channel of the shard

Returns  {'rescheduled', deadline_ms, moved}  the timer now falls due at deadline_ms;
                                        moved 1 if this call changed its deadline, 0 if it
                                        was due there already (a heartbeat's 'later only')
         {'capped', deadline_ms, moved} a heartbeat past the timer's cap: it now falls due
                                        at its cap (deadline_ms), not later
         {'pastcap', cap_ms}            a reschedule past the cap: refused, nothing
                                        written (the cap bounds every move)
         {'decided', outcome_record}    it was already decided: nothing changed
         {'missing'}                    no pending timer and no retained outcome
Errors   TOOFAR    the deadline is more than max_delay_ms from now
Atomic   the bucket move and the record update happen together (the old bucket, a lazy
         list, keeps the id: its record no longer names it).
Cost     O(1).
]]
--- @include "util"
--- @include "records"
--- @include "results"
--- @include "buckets"
--- @include "decide"
local TIMERS, BUCKETS = KEYS[1], KEYS[2]
local P, id, mode = ARGV[1], ARGV[2], ARGV[3]
local value, bucket_ms, max_delay = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local channel = ARGV[7]
local rec, reply = pending_record(P, TIMERS, id)
if not rec then return reply end
local now = now_ms()
local status = 'rescheduled'
local deadline, too_far
if mode == 'beat' or mode == 'start' then  -- a heartbeat: within the cap
  deadline, too_far = deadline_of('in', value, now, max_delay)
  if too_far then return too_far end
  if mode == 'beat' and deadline < rec.d then deadline = rec.d end  -- later only
  local cap = rec.cap > 0 and rec.c + rec.cap or nil
  if cap and deadline > cap then
    deadline, status = mode == 'beat' and math.max(rec.d, cap) or cap, 'capped'
  end
else
  deadline, too_far = deadline_of(mode, value, now, max_delay)
  if too_far then return too_far end
  if rec.cap > 0 and deadline > rec.c + rec.cap then return {'pastcap', istr(rec.c + rec.cap)} end
end
if deadline == rec.d then return {status, istr(deadline), 0} end  -- nothing moves
rec.d = deadline
redis.call('HSET', TIMERS, id, pack_rec(rec))
index_bucket(P, BUCKETS, id, deadline, bucket_ms, now)
redis.call('PUBLISH', channel, 'R ' .. istr(deadline) .. ' ' .. id)
return {status, istr(deadline), 1}
