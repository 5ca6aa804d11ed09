--[[ trim: drop a shard's outcomes older than a retention, but never one a group still owes.

An outcome may go once it is older than the retention (by Redis TIME) and, unless
ARGV[2] says otherwise, every consumer group of the stream has been handed it and has
acknowledged it: for each group the oldest entry it still needs is its oldest pending
(delivered, not acked) entry, or else the first after its last-delivered id. The stream
is cut below the oldest of those bounds and the age bound (XTRIM MINID, exact).

It also drops the retained outcomes (the results table, see include/results.lua) whose
result_ttl has passed, by visiting hashes round robin from the cursor C: a call's share
is a thirtieth of the table's hashes (at least 64, at most ARGV[4]), so at one call a
minute every outcome is looked at within half an hour of its expiry while the table has
at most 30 * ARGV[4] hashes (about 32 outcomes each); and with ARGV[5] = k, at least a
k-th of them, so a table of any size is gone round in k calls (the worker: half a
result_ttl of its trim intervals). More than ARGV[4] hashes are visited in several
calls: the reply says how many are left of the share, and the caller calls again with
them in ARGV[6] (and the stream left as it is).

KEYS[1]  P:out (STREAM)
ARGV[1]  retention_ms: keep every outcome decided less than this long ago (0: none);
         '' leaves the stream as it is (only the results table is trimmed)
ARGV[2]  keep_unread: 1 = never drop an entry a group has not acked; 0 = age only
ARGV[3]  P          ARGV[4]  the most results-table hashes this call visits
ARGV[5]  k: visit at least a k-th of the table's hashes ('' or 0: no such floor)
ARGV[6]  hashes still owed by an earlier call of the same round ('': a new round)

Returns  {removed, minid, held, dropped, left}: entries removed, the MINID used ('' if
         the stream does not exist or was left), held = 1 if entries older than the
         retention are left (a consumer group still owes them), dropped = retained
         outcomes dropped from the results table, left = hashes of this round's share
         not visited yet (call again with them in ARGV[6]).
Atomic   groups cannot read or ack between the bound being computed and the trim.
Cost     O(G) for G groups, plus O(removed) (whole macro nodes are freed at once), plus
         O(32) per results-table hash visited (at most ARGV[4]).
Keys built from P: P:rx, P:R:<b>.
]]
--- @include "util"
--- @include "keys"
--- @include "results"
local OUT = KEYS[1]
local retention, keep_unread, P = ARGV[1], ARGV[2] == '1', ARGV[3]
local most, passes, owed = tonumber(ARGV[4]), tonumber(ARGV[5]) or 0, tonumber(ARGV[6])

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local function less(a_ms, a_seq, b_ms, b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

local now = now_ms()

-- Drop the expired outcomes of the results table's next hashes: how many went, and how
-- many hashes of the round's share are left for another call. `most` caps this call's
-- visit; `passes` (0: none) sets the least share, a passes-th of the table; `owed`
-- (nil: a new round) is what an earlier call of the round left.
local function trim_results(P, most, passes, owed)
  local rs = results_of(P)
  local size = rs.lo + rs.S
  local share = owed
  if not share then
    share = math.min(math.max(64, math.ceil(size / 30)), most)
    if passes > 0 then share = math.max(share, math.ceil(size / passes)) end
  end
  share = math.min(share, size)  -- a round never visits a hash twice
  local visit = math.min(share, most)
  local at = tonumber(redis.call('HGET', rx_state_key(P), 'C') or '0') % size
  local now_s = now / 1000
  local dropped = 0
  for k = 0, visit - 1 do
    local key = rx_key(P, (at + k) % size)
    local all = redis.call('HGETALL', key)
    local gone = {}
    for i = 1, #all, 2 do
      if rx_expiry_s(all[i + 1]) <= now_s then gone[#gone + 1] = all[i] end
    end
    if #gone > 0 then dropped = dropped + redis.call('HDEL', key, unpack(gone)) end
  end
  rs.N = rs.N - dropped
  redis.call('HSET', rx_state_key(P), 'C', istr((at + visit) % size), 'N', istr(rs.N))
  return dropped, share - visit
end

local dropped, left = trim_results(P, most, passes, owed)
if retention == '' or redis.call('EXISTS', OUT) == 0 then
  return {0, '', 0, dropped, left}
end
-- entries decided at or before now - retention go: the bound is exclusive, hence + 1
local age_ms = math.max(now - tonumber(retention) + 1, 0)
local keep_ms, keep_seq = age_ms, 0
if keep_unread then
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', OUT)) do
    local info = {}
    for i = 1, #group, 2 do info[group[i]] = group[i + 1] end
    local need_ms, need_seq
    if tonumber(info['pending']) > 0 then
      local summary = redis.call('XPENDING', OUT, info['name'])
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
local removed = redis.call('XTRIM', OUT, 'MINID', minid)
local held = 0
local first = redis.call('XRANGE', OUT, '-', '+', 'COUNT', 1)[1]
if first then
  local first_ms = parse(first[1])
  if first_ms < age_ms then held = 1 end
end
return {removed, minid, held, dropped, left}
