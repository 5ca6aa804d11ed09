--[[ arm: the leader arms the next occurrence of schedules waiting in P:Sq (their armed
occurrence was decided without a plan), fenced by its lease and epoch.

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:lease    KEYS[4]  P:epoch
KEYS[5]  P:S        KEYS[6]  P:Sq
ARGV[1]  P          ARGV[2]  worker id    ARGV[3]  epoch      ARGV[4]  bucket_ms
ARGV[5]  plans: msgpack array of {name, version, next id ('' ended), next deadline,
         missed}

Returns  {armed}: {id, deadline, ...} of the occurrences armed.
Errors   FENCED
Atomic   a schedule leaves P:Sq once it has its next occurrence, has ended, is paused
         or gone; a plan of another version leaves it there (planned again). Never
         armed twice (only a schedule with none armed is armed), never early.
Cost     O(N * W) for N plans.
]]
--- @include "util"
--- @include "schedules"
--- @include "fence"
local TIMERS, BUCKETS, LEASE, EPOCH, SCHEDULES, SCHEDULE_QUEUE =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local P, worker, epoch, bucket_ms, plans = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local fenced = check_fence(LEASE, EPOCH, worker, epoch)
if fenced then return fenced end
local now = now_ms()
local armed = {}
for _, p in ipairs(cmsgpack.unpack(plans)) do
  local name, nid, nd = p[1], p[3], tonumber(p[4])
  local s = sched_read(SCHEDULES, name)
  local nat = s and p[2] == s[S_VERSION] and (nid == '' and 0 or follows(name, s[S_LAST], nid, nd))
  if not s or s[S_ON] == 0 or s[S_ARMED] ~= 0 then
    redis.call('SREM', SCHEDULE_QUEUE, name)  -- gone, paused, or armed already
  elseif nat then
    s[S_MISSED] = s[S_MISSED] + (tonumber(p[5]) or 0)
    s[S_ARMED] = nat
    if nat ~= 0 then
      sched_arm(P, TIMERS, BUCKETS, bucket_ms, nid, nd, s, now)
      armed[#armed + 1] = nid
      armed[#armed + 1] = istr(nd)
    end
    sched_write(SCHEDULES, name, s)
    redis.call('SREM', SCHEDULE_QUEUE, name)
  end
end
return {armed}
