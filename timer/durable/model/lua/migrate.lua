--[[ migrate: convert one shard of a namespace an earlier release made (data formats 1 to
4) to the layout of include/records.lua, a bounded step a call; `tickwheel migrate`
calls it until it answers done. Each call is one script, so an interrupted migration
leaves a consistent shard and its place in P:mig: run again, it goes on from there. Run
it with the workers stopped; no client or worker uses the namespace meanwhile (they
refuse a namespace whose meta names an older format).

The steps, each until it has nothing left, at most ARGV[2] records, ids, keys or entries
a call:
  records  pending records that are maps {d, p, w, n, g, c, s} become arrays (HSCAN)
  fine     fine buckets that are sets become lists (SPOP into a copy, then RENAME)
  coarse   coarse buckets that are sets, likewise
  strings  outcomes retained as strings P:r:<id> move into the results table with what
           is left of their expiry (SCAN MATCH); only where the shard had no table, or
           its table still looked for them (G not yet passed); a map record becomes an
           array on the way
  out      the outcome stream: if any entry has the five fields id, outcome, deadline,
           decided, payload, the stream is copied entry by entry, same ids, with i and r
           instead (r's created is unknown: taken as the deadline), then each consumer
           group is made again on the copy (last-delivered id, consumers, and every
           pending entry with its consumer, idle time and deliveries), and the copy takes
           the stream's place; a stream with none is left as it is
  dead     the dead letters, likewise (they have no groups)
  done     the results table loses the layout flags F, E and G
In the state hash: step, c (the step's cursor), copy (1: the stream is being copied),
g and pc (the group being made again, and its pending cursor), strings (1: look for
strings). The caller deletes P:mig once every shard is done and the meta says so.

KEYS[1]  P:t    KEYS[2]  P:buckets    KEYS[3]  P:out    KEYS[4]  P:dead    KEYS[5]  P:rx
KEYS[6]  P:mig
ARGV[1]  P      ARGV[2]  budget       ARGV[3]  result_ttl_ms (a string with no expiry)

Returns  {done, step, count}: done = 1 when the shard is converted; step = the step this
         call worked on; count = what it converted or visited.
Cost     O(budget) a call, plus O(G) for a stream's G consumer groups.
Keys built from P: P:b:<n>, P:c:<m>, P:coarse, P:r:<id>, P:R:<b>, P:mig:b, P:mig:s.
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "results"
local P, budget, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local T, BZ, OUT, DEAD, RX, MIG = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now = now_ms()

local st = {}
local flat = redis.call('HGETALL', MIG)
for i = 1, #flat, 2 do st[flat[i]] = flat[i + 1] end
if st.step == 'done' then return {1, 'done', 0} end
if not st.step then  -- the first call: what to look for, and a table to move into
  local g = redis.call('HGET', RX, 'G')
  local strings = redis.call('EXISTS', RX) == 0 or (g and tonumber(g) >= now)
  st = {step = 'records', c = '0', strings = strings and '1' or '0'}
  if redis.call('EXISTS', RX) == 0 then redis.call('HSET', RX, 'L', '0', 'S', '0', 'N', '0') end
end

-- A record msgpack wrote as a map (the earlier records), decoded; nil for an array.
local function as_map(raw)
  local h = sbyte(raw, 1)
  if (h >= 0x80 and h <= 0x8f) or h == 0xde or h == 0xdf then return cmsgpack.unpack(raw) end
  return nil
end

local function pending_of(m)
  return {d = m.d, p = m.p, c = m.c or m.d, s = m.s or '', n = m.n or 1, w = m.w or NONE,
    g = m.g or NONE}
end

local function step_records()
  local reply = redis.call('HSCAN', T, st.c, 'COUNT', budget)
  local pairs_, fields = reply[2], {}
  for i = 1, #pairs_, 2 do
    local m = as_map(pairs_[i + 1])
    if m then
      fields[#fields + 1] = pairs_[i]
      fields[#fields + 1] = pack_rec(pending_of(m))
    end
  end
  if #fields > 0 then redis.call('HSET', T, unpack(fields)) end
  st.c = reply[1]
  return reply[1] == '0', #fields / 2
end

-- The buckets mirrored in `mirror` that are sets become lists, in mirror order.
local function step_lists(mirror, key_of)
  local copy, done = migrate_copy_key(P, 'b'), 0
  while done < budget do
    local at = tonumber(st.c)
    local m = redis.call('ZRANGE', mirror, at, at)[1]
    if not m then return true, done end
    local key = key_of(P, tonumber(m))
    if redis.call('TYPE', key).ok == 'set' then
      local ids = redis.call('SPOP', key, budget - done)
      redis.call('RPUSH', copy, unpack(ids))
      done = done + #ids
      if redis.call('EXISTS', key) == 0 then
        redis.call('RENAME', copy, key)
        st.c = istr(at + 1)
      end
    else
      done = done + 1
      st.c = istr(at + 1)
    end
  end
  return false, done
end

local function step_strings()
  if st.strings ~= '1' then return true, 0 end
  local reply = redis.call('SCAN', st.c, 'MATCH', old_result_pattern(P), 'COUNT', budget)
  local rs, moved, head = results_of(P), 0, #P + 4
  for _, key in ipairs(reply[2]) do
    local v = redis.call('GET', key)
    local left = redis.call('PTTL', key)
    if v and left ~= -2 then
      local id = ssub(key, head)
      local m = as_map(v)
      if m then v = pack_result(pending_of(m), m.o, m.t) end
      if not result_get(rs, id) then  -- one the table holds is newer (re-armed since)
        result_put_many(rs, {id}, {v}, now, left > 0 and left or ttl)
      end
      moved = moved + 1
    end
    redis.call('DEL', key)
  end
  st.c = reply[1]
  return reply[1] == '0', moved
end

-- An entry's fields with i and r for the five of the earlier layout; nil if it has none.
local function converted(f)
  local m = {}
  for i = 1, #f, 2 do m[f[i]] = f[i + 1] end
  if m['r'] or not m['outcome'] then return nil end
  local d = tonumber(m['deadline'])
  local rec = {d = d, p = m['payload'], c = d, s = '', g = NONE}
  local out = {}
  for i = 1, #f, 2 do
    local k = f[i]
    if k == 'id' then
      out[#out + 1] = 'i'
      out[#out + 1] = f[i + 1]
      out[#out + 1] = 'r'
      out[#out + 1] = pack_result(rec, m['outcome'], tonumber(m['decided']))
    elseif k ~= 'outcome' and k ~= 'deadline' and k ~= 'decided' and k ~= 'payload' then
      out[#out + 1] = k
      out[#out + 1] = f[i + 1]
    end
  end
  return out
end

local function after(id)
  if id == '0' then return '-' end
  return '(' .. id
end

local function info_of(flat_reply)
  local m = {}
  for i = 1, #flat_reply, 2 do m[flat_reply[i]] = flat_reply[i + 1] end
  return m
end

-- Make group number st.g of `key` again on `copy`, a budget of pending entries a call;
-- true when every group is made.
local function step_groups(key, copy)
  local groups = redis.call('XINFO', 'GROUPS', key)
  local g = tonumber(st.g or '1')
  local spent = 0
  while spent < budget do
    if g > #groups then return true, spent end
    local info = info_of(groups[g])
    local name = info['name']
    if not st.pc then
      redis.pcall('XGROUP', 'CREATE', copy, name, info['last-delivered-id'])  -- BUSYGROUP: made
      for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, name)) do
        redis.call('XGROUP', 'CREATECONSUMER', copy, name, info_of(c)['name'])
      end
      st.pc = '0'
    end
    local want = budget - spent
    local pel = redis.call('XPENDING', key, name, after(st.pc), '+', want)
    for _, p in ipairs(pel) do  -- {id, consumer, idle ms, deliveries}
      redis.call('XCLAIM', copy, name, p[2], 0, p[1], 'IDLE', p[3], 'RETRYCOUNT', p[4],
        'FORCE', 'JUSTID')
      st.pc = p[1]
    end
    spent = spent + #pel + 1
    if #pel < want then  -- fewer than asked: this group is made
      g = g + 1
      st.pc = nil
    end
    st.g = istr(g)
  end
  return false, spent
end

-- The stream `key`: look for an entry of the earlier layout; if one is found, copy the
-- stream converted, make its groups again, and put the copy in its place.
local function step_stream(key)
  local copy = migrate_copy_key(P, 's')
  if st.copy == 'groups' then
    local made, spent = step_groups(key, copy)
    if not made then return false, spent end
    redis.call('DEL', key)
    redis.call('RENAME', copy, key)
    return true, spent
  end
  local entries = redis.call('XRANGE', key, after(st.c), '+', 'COUNT', budget)
  if st.copy ~= '1' then  -- looking
    for _, e in ipairs(entries) do
      if converted(e[2]) then
        st.copy, st.c = '1', '0'
        return false, #entries
      end
      st.c = e[1]
    end
    return #entries < budget, #entries
  end
  for _, e in ipairs(entries) do
    redis.call('XADD', copy, e[1], unpack(converted(e[2]) or e[2]))
    st.c = e[1]
  end
  if #entries < budget then  -- copied: the same last id, then the groups
    redis.call('XSETID', copy, info_of(redis.call('XINFO', 'STREAM', key))['last-generated-id'])
    st.copy = 'groups'
  end
  return false, #entries
end

local STEPS = {'records', 'fine', 'coarse', 'strings', 'out', 'dead', 'done'}
local RUN = {
  records = step_records,
  fine = function() return step_lists(BZ, bucket_key) end,
  coarse = function() return step_lists(coarse_mirror(P), coarse_key) end,
  strings = step_strings,
  out = function() return step_stream(OUT) end,
  dead = function() return step_stream(DEAD) end,
}

local step = st.step
local finished, count = RUN[step]()
if finished then
  for i, name in ipairs(STEPS) do
    if name == step then st.step = STEPS[i + 1] end
  end
  st.c, st.copy, st.g, st.pc = '0', nil, nil, nil
end
redis.call('DEL', MIG)
if st.step == 'done' then
  redis.call('HDEL', RX, 'F', 'E', 'G')
  redis.call('HSET', MIG, 'step', 'done')
  return {1, step, count}
end
local save = {}
for k, v in pairs(st) do
  save[#save + 1] = k
  save[#save + 1] = v
end
redis.call('HSET', MIG, unpack(save))
return {0, step, count}
