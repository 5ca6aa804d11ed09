--[[ put_schedule: create, update or resume a recurring schedule, and arm its next
occurrence (the client computed it on Redis time).

KEYS[1]  P:t        KEYS[2]  P:buckets    KEYS[3]  P:S (HASH name -> schedule)
ARGV[1]  P          ARGV[2]  bucket_ms    ARGV[3]  events channel of the shard
ARGV[4]  name       ARGV[5]  mode: 'create' (refused if it exists), 'update' (create
         or change it) or 'resume' (its spec unchanged)
ARGV[6]  spec (msgpack bytes)   ARGV[7]  payload (msgpack bytes)
ARGV[8]  watch keys (msgpack array)
ARGV[9]  first occurrence id ('' none: the schedule has ended)   ARGV[10] its deadline
ARGV[11] overlap: 0 allow, 1 skip, 2 buffer-one    ARGV[12] the group it waits for ('')

Returns  {version, armed id ('' none)}, or {'missing'} when updating or resuming a
         schedule that does not exist. A resume of an active schedule with an occurrence
         armed writes nothing (one with none, ended or lost, is armed again).
Errors   CONFLICT  create: a schedule of this name exists
         TOOFAR    the first occurrence is not after the last one fired
Events   'S <deadline> <id>' for the occurrence armed; 'X cancelled <id>' for one taken out
Atomic   the armed occurrence is replaced in the same call that changes the schedule,
         unless it is due already: then it stays, and its leader plans its next from
         the new version (the old plan is refused as stale).
Cost     O(W) for W watch keys.
]]
--- @include "util"
--- @include "schedules"
local TIMERS, BUCKETS, SCHEDULES = KEYS[1], KEYS[2], KEYS[3]
local P, bucket_ms, evchan, name, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local spec, payload, watch = ARGV[6], ARGV[7], cmsgpack.unpack(ARGV[8])
local first, deadline = ARGV[9], tonumber(ARGV[10])
local overlap, group = tonumber(ARGV[11]), ARGV[12]
local s = sched_read(SCHEDULES, name)
if mode == 'create' and s then
  return redis.error_reply('CONFLICT schedule ' .. name .. ' exists: update it, or delete it first')
end
if mode ~= 'create' and not s then return {'missing'} end
if mode == 'resume' and s[S_ON] == 1 and s[S_ARMED] ~= 0 then  -- running: nothing written
  return {s[S_VERSION], occ_id(name, s[S_ARMED])}
end
local now = now_ms()
if not s then
  s = {0, 1, 0, 0, 0, 0, spec, payload, watch, now, 0, '', '', 0}
end
if mode ~= 'resume' then
  s[S_SPEC], s[S_PAYLOAD], s[S_WATCH] = spec, payload, watch
  s[S_OVERLAP], s[S_GROUP] = overlap, group
end
s[S_ON] = 1
-- one already due stays: its leader fires it, then plans the next from this version
local keep = sched_unarm_unless_due(P, TIMERS, evchan, name, s, now)
s[S_VERSION] = s[S_VERSION] + 1
if not keep and first ~= '' then
  local fname, at = occurrence_of(first)
  if fname ~= name or at <= s[S_LAST] or deadline < at then
    return redis.error_reply('TOOFAR occurrence ' .. first .. ' is not after the last one fired')
  end
  sched_arm(P, TIMERS, BUCKETS, bucket_ms, first, deadline, s, now)
  s[S_ARMED] = at
  redis.call('PUBLISH', evchan, 'S ' .. istr(deadline) .. ' ' .. first)
end
sched_write(SCHEDULES, name, s)
return {s[S_VERSION], s[S_ARMED] ~= 0 and occ_id(name, s[S_ARMED]) or ''}
