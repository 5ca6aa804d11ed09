--[[ claim: hand a consumer the entries of its group it should (re)handle now.

KEYS[1]  P:out (STREAM)    KEYS[2]  P:retry:<group> (ZSET: entry id -> retry time, ms)
ARGV[1]  group             ARGV[2]  consumer        ARGV[3]  count: at most this many
ARGV[4]  min_idle_ms: a pending entry is taken once it went this long without a delivery
         or a touch (its consumer is presumed dead)
ARGV[5]  owner: '' the entries of every other consumer; else only this one's (a restart
         takes back its own)
ARGV[6]  cursor: where the scan of pending entries starts ('-' first; '' no scan)
ARGV[7]  1 = first take the entries whose retry time has come; 0 = do not

Returns  {cursor, entry, ...}: the cursor for the next scan ('' when the scan is done),
         then per entry taken {id, fields, deliveries}: it is now pending for `consumer`,
         deliveries its delivery count with this one. An entry gone from the stream (a
         trim with drop-unread) is acknowledged and not returned.
Atomic   an entry waiting for its retry time is never taken by the scan, so a retry
         backoff survives the death of the consumer that scheduled it.
Cost     O(count) for the scan plus O(log R) per retry taken.
]]
--- @include "util"
local OUT, RETRY = KEYS[1], KEYS[2]
local group, me, count, min_idle_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local owner, cursor, due_first = ARGV[5], ARGV[6], ARGV[7] == '1'
local taken = {}

local function take(id, delivered)
  local got = redis.call('XCLAIM', OUT, group, me, 0, id)
  local entry = got[1]
  if entry and entry[2] then
    taken[#taken + 1] = {entry[1], entry[2], delivered + 1}
  else
    redis.call('XACK', OUT, group, id)  -- deleted from the stream: nothing to handle
  end
end

if due_first then
  local due = redis.call('ZRANGEBYSCORE', RETRY, '-inf', now_ms(), 'LIMIT', 0, count)
  for _, id in ipairs(due) do
    redis.call('ZREM', RETRY, id)
    local p = redis.call('XPENDING', OUT, group, id, id, 1)[1]
    if p then take(id, tonumber(p[4])) end  -- else it was acknowledged meanwhile
  end
end

if cursor ~= '' and #taken < count then
  local args = {'XPENDING', OUT, group, 'IDLE', min_idle_ms, cursor, '+', count}
  if owner ~= '' then args[#args + 1] = owner end
  local page = redis.call(unpack(args))
  for _, p in ipairs(page) do
    if #taken >= count then break end
    cursor = '(' .. p[1]
    local theirs = owner ~= '' or p[2] ~= me  -- our own are in hand already
    if theirs and not redis.call('ZSCORE', RETRY, p[1]) then take(p[1], tonumber(p[4])) end
  end
  if #page < count and #taken < count then cursor = '' end
end
return {cursor, unpack(taken)}
