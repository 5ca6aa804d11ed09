--[[ decide: deciding pending timers once each (every index, the stream, the
results table, the event), and reading what deciding needs.
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "results"
--- @include "buckets"

-- The shard a deciding script works on: prefix, the keys every decision writes, the
-- events channel, and the bucket width and outcome retention (ms).
local function shard_ctx(P, tkey, bz, outkey, evchan, bucket_ms, ttl_ms)
  return {P = P, t = tkey, bz = bz, out = outkey, ev = evchan,
    bucket_ms = tonumber(bucket_ms), ttl = tonumber(ttl_ms)}
end

-- Decide pending timers, once each: remove them from every index, append their outcomes
-- to the stream (in the order given), retain each outcome in the results table for
-- get/wait/idempotent retries, tell the leader. Timer i is ids[i], due at ds[i], with
-- pending record recs[i], or recs[i] = false and raws[i] a lean record (see peek_rec):
-- parallel lists, no table per timer. The index writes are coalesced: one HDEL, one
-- SREM per watch key, one HSET per results-table hash; the stream entry is one call per
-- timer. Its ids stay in the lazy buckets (include/buckets.lua).
local function decide_many(ctx, ids, ds, recs, raws, outcome, now)
  if #ids == 0 then return end
  local rs = results(ctx)
  local watched = {}
  for i = 1, #ids do
    local rec = recs[i]
    if rec then
      for _, k in ipairs(rec.w) do push(watched, k, ids[i]) end
    end
  end
  redis.call('HDEL', ctx.t, unpack(ids))
  for k, members in pairs(watched) do
    redis.call('SREM', watch_key(ctx.P, k), unpack(members))
  end
  local code, packed = OUTCOME_CODE[outcome], {}
  local vals = {}
  for i, id in ipairs(ids) do
    local rec = recs[i]
    local val
    if rec then
      val = pack_result(rec, outcome, now)
    else
      val = lean_result(raws[i], ds[i], code, now, packed)
    end
    vals[i] = val
    local eid = redis.call('XADD', ctx.out, '*', 'i', id, 'r', val)
    if ctx.eids then ctx.eids[id] = eid end  -- wanted only for schedules' occurrences
    if ctx.ev then  -- fire and sweep have none: their caller is the leader, which knows
      redis.call('PUBLISH', ctx.ev, 'X ' .. outcome .. ' ' .. id)
    end
  end
  result_put_many(rs, ids, vals, now, ctx.ttl)
end

-- Decide one pending timer (cancel, complete, notify): decide_many of one.
local function decide(ctx, id, rec, outcome, now)
  decide_many(ctx, {id}, {rec.d}, {rec}, nil, outcome, now)
end

-- The pending records raws[i] of ids[i] (nil: not pending) that are due by `now`, each
-- once (an id may come twice), read as deciding them needs (peek_rec): the lists
-- decide_many takes (ids, ds, recs, raws), oldest first as given, and {id, deadline}
-- for each one not yet due.
local function due_records(ids, raws, now)
  local due, ds, recs, lean, later, seen = {}, {}, {}, {}, {}, {}
  for i, id in ipairs(ids) do
    local raw = raws[i]
    if raw and not seen[id] then
      seen[id] = true
      local d, rec = peek_rec(raw)
      if d <= now then
        local k = #due + 1
        due[k], ds[k], recs[k], lean[k] = id, d, rec, raw
      else
        later[#later + 1] = id
        later[#later + 1] = istr(d)
      end
    end
  end
  return due, ds, recs, lean, later
end

-- Append {id, traceparent, decided_ms} to `out` for each decided timer whose record
-- carries a trace context (recs[i] false: a lean record, which never does): what the
-- leader needs to record the fire in that trace (timer/tracing.py).
local function add_traced(out, ids, recs, now)
  for i = 1, #ids do
    local rec = recs[i]
    if rec and rec.x ~= '' then
      out[#out + 1] = ids[i]
      out[#out + 1] = rec.x
      out[#out + 1] = istr(now)
    end
  end
  return out
end

-- The deadline of a schedule or reschedule: `value` is a delay (mode 'in') or a deadline
-- (mode 'at'); nil and an error reply when it is further than max_delay from now.
local function deadline_of(mode, value, now, max_delay)
  local deadline = value
  if mode == 'in' then deadline = now + value end
  if deadline > now + max_delay then
    return nil, redis.error_reply('TOOFAR deadline ' .. istr(deadline) .. ' is more than '
      .. istr(max_delay) .. ' ms from now')
  end
  return deadline, nil
end

-- The pending record of `id`; or nil and the reply for an id already decided (with its
-- retained outcome) or unknown.
local function pending_record(P, tkey, id)
  local raw = redis.call('HGET', tkey, id)
  if raw then return read_rec(raw), nil end
  local retained = result_get(results_of(P), id)
  if retained then return nil, {'decided', retained} end
  return nil, {'missing'}
end

-- cancel and complete: decide timer `id` of shard P (its keys tkey, bz, outkey) with
-- `outcome`, or say why not.
local function decide_by_id(P, id, tkey, bz, outkey, evchan, bucket_ms, ttl_ms, outcome)
  local rec, reply = pending_record(P, tkey, id)
  if not rec then return reply end
  local ctx = shard_ctx(P, tkey, bz, outkey, evchan, bucket_ms, ttl_ms)
  decide(ctx, id, rec, outcome, now_ms())
  return {outcome}
end
