--[[ schedules: a recurring schedule's record, and arming its occurrences.

Schedule (HASH P:S, field = name): a msgpack array
  [v, on, a, f, m, l, spec, p, w, c]
  v = version: +1 at every change; a plan made from another version is refused
  on = 1 active, 0 paused         a = nominal time (epoch ms) of its one armed
                                   occurrence, 0 if none (its id is occ_id(name, a))
  f = occurrences fired            m = occurrences missed (passed over by its policy)
  l = nominal time (epoch ms) of the last one fired, 0 if none
  spec = the client's msgpack array of its recurrence and policies (opaque here)
  p = payload (msgpack bytes)      w = watch keys      c = created_ms
  [o, g, e, k] (absent: 0, '', '', 0): o = overlap, 0 allow, 1 skip, 2 buffer-one;
  g = the consumer group whose handling of the previous occurrence it waits for;
  e = the stream entry id of the last occurrence's outcome; k = occurrences skipped
An occurrence is an ordinary timer with id '{<name>}@<nominal ms>' and origin
'schedule'. A schedule has at most one armed at a time, and arms the next only when it
decides the one armed (so never twice) and only after it (so never early). A schedule
whose armed occurrence was decided without a plan for its next (by sweep, or with a
plan of another version, or by cancel, complete or notify: sched_ended) waits in SET
P:Sq until its leader arms the next (arm.lua).
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "buckets"

local SCHED_ORIGIN = 'schedule'
-- A schedule record's places by name (the layout above), as s[S_ARMED].
local S_VERSION, S_ON, S_ARMED, S_FIRED, S_MISSED, S_LAST, S_SPEC = 1, 2, 3, 4, 5, 6, 7
local S_PAYLOAD, S_WATCH, S_CREATED, S_OVERLAP, S_GROUP, S_ENTRY, S_SKIPPED =
  8, 9, 10, 11, 12, 13, 14

local function sched_read(skey, name)
  local raw = redis.call('HGET', skey, name)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

local function sched_write(skey, name, s)
  redis.call('HSET', skey, name, cmsgpack.pack(s))
end

-- The schedule name and nominal time (ms) an occurrence id names; nil for another id.
local function occurrence_of(id)
  if string.byte(id, 1) ~= 123 then return nil end  -- '{': most ids stop here
  local name, at = string.match(id, '^{(.+)}@(%d+)$')
  if not name then return nil end
  return name, tonumber(at)
end

-- The id of the occurrence of schedule `name` at nominal time `at`.
local function occ_id(name, at)
  return '{' .. name .. '}@' .. istr(at)
end

-- The nominal time of `nid` if it may follow occurrence `at` of schedule `name`, due
-- at `nd`: an occurrence of the same schedule, after it, never due before its time.
local function follows(name, at, nid, nd)
  local nname, nat = occurrence_of(nid)
  if nname == name and nat > at and nd ~= nil and nd >= nat then return nat end
  return nil
end

-- Arm occurrence `id` of schedule `s`, due at `deadline`, unless it is pending already.
local function sched_arm(P, tkey, bz, bucket_ms, id, deadline, s, now)
  if redis.call('HEXISTS', tkey, id) == 1 then return false end
  local watch = s[S_WATCH] or NONE
  local rec = {d = deadline, p = s[S_PAYLOAD], w = watch, n = 1, g = NONE, c = now, s = SCHED_ORIGIN}
  redis.call('HSET', tkey, id, pack_rec(rec))
  index_bucket(P, bz, id, deadline, bucket_ms, now)
  for _, k in ipairs(watch) do redis.call('SADD', watch_key(P, k), id) end
  return true
end

-- Take schedule `name`'s armed occurrence (record `s`) out with no outcome, as its
-- schedule changed, paused or went, unless its time has come (at `now`): then it stays
-- and fires once (its leader may hold it in a fire batch already). Its leader hears
-- one taken out as decided and drops it from the wheel. Returns true if it stayed.
local function sched_unarm_unless_due(P, tkey, evchan, name, s, now)
  if s[S_ARMED] == 0 then return false end
  local id = occ_id(name, s[S_ARMED])
  local raw = redis.call('HGET', tkey, id)
  if raw then
    local rec = read_rec(raw)
    if rec.d <= now then return true end
    redis.call('HDEL', tkey, id)
    for _, k in ipairs(rec.w) do redis.call('SREM', watch_key(P, k), id) end
    redis.call('PUBLISH', evchan, 'X cancelled ' .. id)
  end
  s[S_ARMED] = 0
  return false
end

-- Occurrence `id` (at `at`) of schedule `name` (record `s`) is behind it: arm the next
-- from `plans[id]` = {id, version, next id ('' the schedule ended), next deadline,
-- missed} when the plan is of the schedule's version and follows it (adding it to
-- `armed`); else leave the schedule in P:Sq for one. A paused schedule (its due
-- occurrence kept by stop_schedule) arms nothing. Returns 1 when it was queued.
local function sched_chain(P, tkey, bz, qkey, bucket_ms, name, at, s, plans, id, now, armed)
  s[S_LAST] = at
  if s[S_ON] == 0 then
    s[S_ARMED] = 0
    return 0
  end
  local p = plans and plans[id]
  local nat = p and p[2] == s[S_VERSION] and (p[3] == '' and 0 or follows(name, at, p[3],
    tonumber(p[4])))
  if nat then  -- a plan of this version that follows (0: the schedule has ended)
    s[S_MISSED] = s[S_MISSED] + (tonumber(p[5]) or 0)
    s[S_ARMED] = nat
    if nat ~= 0 then
      sched_arm(P, tkey, bz, bucket_ms, p[3], tonumber(p[4]), s, now)
      armed[#armed + 1] = p[3]
      armed[#armed + 1] = istr(tonumber(p[4]))
    end
    return 0
  end
  s[S_ARMED] = 0
  redis.call('SADD', qkey, name)
  return 1
end

-- After ids were decided (fired or swept): each that was its schedule's armed
-- occurrence is counted and chained (sched_chain), and its outcome's stream entry id
-- (eids[id], from decide_many) kept for the overlap check of the next.
-- Returns the occurrences armed {id, deadline, ...} and how many schedules wait.
local function sched_decided(P, tkey, bz, skey, qkey, bucket_ms, ids, plans, eids, now)
  local armed, queued = {}, 0
  for _, id in ipairs(ids) do
    local name, at = occurrence_of(id)
    local s = name and sched_read(skey, name)
    if s and s[S_ARMED] == at then
      s[S_FIRED] = s[S_FIRED] + 1
      s[S_ENTRY] = eids and eids[id] or s[S_ENTRY] or ''
      queued = queued + sched_chain(P, tkey, bz, qkey, bucket_ms, name, at, s, plans, id,
        now, armed)
      sched_write(skey, name, s)
    end
  end
  return armed, queued
end

-- Occurrence `id` was decided by cancel, complete or notify (it did not fire): if it
-- was its schedule's armed one, the series goes on: the schedule is left in P:Sq, where
-- its leader arms the next after it (arm.lua; the decision's event tells the leader).
-- Not counted as fired; `l` moves to it, so it is never armed again.
local function sched_ended(P, id)
  local name, at = occurrence_of(id)
  if not name then return end
  local skey = sched_key(P)
  local s = sched_read(skey, name)
  if s and s[S_ARMED] == at then
    s[S_ARMED] = 0
    s[S_LAST] = at
    sched_write(skey, name, s)
    redis.call('SADD', sched_queue_key(P), name)
  end
end

local HOLD_MS = 250  -- how long a buffered occurrence waits before it looks again

local function entry_before(a, b)  -- stream ids 'ms-seq'
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end

-- Whether outcome entry `eid` of stream `out` is still unhandled by consumer group
-- `group`: not yet delivered to it, or delivered and not acknowledged (a retry waiting
-- included). A group that does not exist waits for nothing.
local function unhandled(out, group, eid)
  if not eid or eid == '' or not group or group == '' then return false end
  local pending = redis.pcall('XPENDING', out, group, eid, eid, 1)
  if type(pending) ~= 'table' or pending.err then return false end
  if #pending > 0 then return true end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', out)) do
    local name, last
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then
        last = g[i + 1]
      end
    end
    if name == group then return entry_before(last, eid) end
  end
  return false
end

-- Before deciding the due timers (the parallel lists of due_records): an armed
-- occurrence whose schedule waits for its previous outcome (overlap 1 or 2) while that
-- is unhandled by its group is not decided. 'skip': it is taken out with no outcome,
-- counted in k, and the next armed as after a fire; 'buffer-one': its deadline moves
-- HOLD_MS on (later, never earlier) and it stays armed, so what falls due meanwhile
-- follows the catch-up policy once it fires. Returns the lists without those, then
-- the held {id, deadline, ...}, the occurrences armed, how many schedules wait, and
-- whether the batch may hold occurrences at all (then decide_many keeps entry ids).
local function sched_overlap(P, tkey, bz, skey, qkey, out, bucket_ms, lists, plans, now)
  local due, ds, recs, raws = lists[1], lists[2], lists[3], lists[4]
  -- maybe one if an id starts with '{': found in the ids joined by '\n' (two calls a
  -- batch, not one an id; an id holding "\n{" only takes the longer path below)
  if #due == 0 or (sbyte(due[1], 1) ~= 123
      and not string.find(table.concat(due, '\n'), '\n{', 1, true)) then
    return due, ds, recs, raws, NONE, NONE, 0, false
  end
  local held, armed, queued = {}, {}, 0
  local fdue, fds, frecs, fraws = {}, {}, {}, {}
  for i = 1, #due do
    local id = due[i]
    local name, at = occurrence_of(id)
    local s = name and sched_read(skey, name)
    local wait = s and s[S_ARMED] == at and (s[S_OVERLAP] or 0) ~= 0 and unhandled(out, s[S_GROUP], s[S_ENTRY])
    if wait then
      local rec = recs[i] or read_rec(raws[i])
      if s[S_OVERLAP] == 1 then  -- skip
        redis.call('HDEL', tkey, id)
        for _, k in ipairs(rec.w) do redis.call('SREM', watch_key(P, k), id) end
        s[S_SKIPPED] = (s[S_SKIPPED] or 0) + 1
        queued = queued + sched_chain(P, tkey, bz, qkey, bucket_ms, name, at, s, plans, id,
          now, armed)
        sched_write(skey, name, s)
      else  -- buffer-one
        rec.d = now + HOLD_MS
        redis.call('HSET', tkey, id, pack_rec(rec))
        index_bucket(P, bz, id, rec.d, bucket_ms, now)
        held[#held + 1] = id
        held[#held + 1] = istr(rec.d)
      end
    else
      local k = #fdue + 1
      fdue[k], fds[k], frecs[k], fraws[k] = id, ds[i], recs[i], raws[i]
    end
  end
  return fdue, fds, frecs, fraws, held, armed, queued, true
end
