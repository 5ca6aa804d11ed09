--[[ trim: drop a shard's outcomes older than a retention, but never one a group still owes.

An outcome may go once it is older than the retention (by Redis TIME) and, unless
ARGV[2] says otherwise, every consumer group of the stream has been handed it and has
acknowledged it: for each group the oldest entry it still needs is its oldest pending
(delivered, not acked) entry, or else the first after its last-delivered id. The stream
is cut below the oldest of those bounds and the age bound (XTRIM MINID, exact).

KEYS[1]  P:out (STREAM)
ARGV[1]  retention_ms: keep every outcome decided less than this long ago (0: none)
ARGV[2]  keep_unread: 1 = never drop an entry a group has not acked; 0 = age only

Returns  {removed, minid, held}: entries removed, the MINID used ('' if the stream does
         not exist), held = 1 if entries older than the retention are left (a consumer
         group still owes them).
Atomic   groups cannot read or ack between the bound being computed and the trim.
Cost     O(G) for G groups, plus O(removed) (whole macro nodes are freed at once).
]]
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function less(a_ms, a_seq, b_ms, b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

if redis.call('EXISTS', KEYS[1]) == 0 then return {0, '', 0} end
-- entries decided at or before now - retention go: the bound is exclusive, hence + 1
local age_ms = math.max(now_ms() - tonumber(ARGV[1]) + 1, 0)
local keep_ms, keep_seq = age_ms, 0
if ARGV[2] == '1' then
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local info = {}
    for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
    local need_ms, need_seq
    if tonumber(info['pending']) > 0 then
      local summary = redis.call('XPENDING', KEYS[1], info['name'])
      need_ms, need_seq = parse(summary[2])
    else
      need_ms, need_seq = parse(info['last-delivered-id'])
      need_seq = need_seq + 1
    end
    if less(need_ms, need_seq, keep_ms, keep_seq) then
      keep_ms, keep_seq = need_ms, need_seq
    end
  end
end
local minid = istr(keep_ms) .. '-' .. istr(keep_seq)
local removed = redis.call('XTRIM', KEYS[1], 'MINID', minid)
local held = 0
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if first then
  local first_ms = parse(first[1])
  if first_ms < age_ms then held = 1 end
end
return {removed, minid, held}
