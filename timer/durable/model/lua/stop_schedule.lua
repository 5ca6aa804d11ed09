--[[ stop_schedule: pause a recurring schedule, or delete it.

KEYS[1]  P:t        KEYS[2]  P:S          KEYS[3]  P:Sq (SET: schedules to re-plan)
ARGV[1]  P          ARGV[2]  events channel of the shard    ARGV[3]  name
ARGV[4]  mode: 'pause', 'delete' (and its armed occurrence) or 'delete-keep' (its
         armed occurrence stays, an ordinary timer that fires once)

Returns  1, or 0 when there is no such schedule. A pause of a paused one writes nothing.
Events   'X cancelled <id>' for the armed occurrence taken out
Atomic   the armed occurrence is taken out in the same call, unless it is due already
         (or the mode is 'delete-keep'): then it stays and fires once, as update leaves
         one (put_schedule). A paused schedule arms nothing more; its version moves on,
         so a plan a leader made before is refused.
Cost     O(W) for W watch keys.
]]
--- @include "util"
--- @include "schedules"
local TIMERS, SCHEDULES, SCHEDULE_QUEUE = KEYS[1], KEYS[2], KEYS[3]
local P, evchan, name, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local s = sched_read(SCHEDULES, name)
if not s then return 0 end
if mode == 'pause' and s[S_ON] == 0 then return 1 end  -- paused already: nothing written
if mode ~= 'delete-keep' then  -- one already due stays: its leader fires it, once
  sched_unarm_unless_due(P, TIMERS, evchan, name, s, now_ms())
end
redis.call('SREM', SCHEDULE_QUEUE, name)
if mode == 'pause' then
  s[S_VERSION], s[S_ON] = s[S_VERSION] + 1, 0
  sched_write(SCHEDULES, name, s)
else
  redis.call('HDEL', SCHEDULES, name)
end
return 1
