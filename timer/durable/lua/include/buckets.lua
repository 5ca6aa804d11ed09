--[[ buckets: the durable buckets (fine P:b:<n>, coarse P:c:<m>) and their
mirrors, and the cascade of coarse buckets into fine ones.
]]
--- @include "util"
--- @include "keys"
--- @include "records"

-- Whether a timer of format `fmt` due at `deadline` waits in a coarse bucket.
local function is_far(fmt, deadline, now)
  return fmt == 2 and math.floor(deadline / COARSE_MS) * COARSE_MS >= now + COARSE_MS
end

-- Add each group of ids (bucket number n -> ids) to its bucket key_of(P, n), and each
-- bucket to its ZSET mirror with score n * width: one SADD per bucket (with lists, an
-- RPUSH, or SADD where the bucket is a set a format-2 namespace made), one ZADD.
local function add_to_buckets(P, key_of, mirror, width, groups, lists)
  local scores = {}
  for n, members in pairs(groups) do
    local key = key_of(P, n)
    local pushed = false
    if lists then
      local r = redis.pcall('RPUSH', key, unpack(members))
      pushed = type(r) ~= 'table'  -- an error table: WRONGTYPE, the bucket is a set
    end
    if not pushed then redis.call('SADD', key, unpack(members)) end
    scores[#scores + 1] = istr(n * width)
    scores[#scores + 1] = istr(n)
  end
  if #scores > 0 then redis.call('ZADD', mirror, unpack(scores)) end
end

-- SREM each group of ids from its bucket, dropping the buckets left empty from their
-- mirror; how many ids were removed.
local function remove_from_buckets(P, key_of, mirror, groups)
  local removed, empty = 0, {}
  for n, members in pairs(groups) do
    local b = key_of(P, n)
    local r = redis.call('SREM', b, unpack(members))
    if r > 0 then
      removed = removed + r
      if redis.call('SCARD', b) == 0 then empty[#empty + 1] = istr(n) end
    end
  end
  if #empty > 0 then redis.call('ZREM', mirror, unpack(empty)) end
  return removed
end

--[[ Lazy buckets (format 3). A set of strings has no compact encoding in Redis 7.0 (7.2
added listpack sets): about 60 bytes an id in a bucket of a thousand; a list is a few
bytes over the id. A list cannot drop an id cheaply (LREM scans), so in a shard with a
results table nothing is taken out of a coarse bucket, nor, where P:rx has F = 1 (a
namespace created in format 3), out of a fine one, which is then a list too: a timer
decided or moved leaves its id behind. Whoever reads a bucket checks each id against
its record: cascade moves an id only if it is still pending and due in that hour, once
(a stale or repeated one is skipped, or lands again in the fine bucket its deadline
names); sweep decides only what is pending and due, and takes every id it read out of
the list; the leader loads only ids due in the buckets it read (ops.read_due). So each
pending timer is in the bucket its deadline names (fine, or coarse if far), and maybe
also, stale, in others. Buckets a format-2 namespace made stay sets after migrate: a
coarse one is still added to (RPUSH answers WRONGTYPE, then SADD) and cascaded, and
its fine ones keep being sets (F is set by init only). ]]
local function add_to_coarse(P, groups, lists)
  add_to_buckets(P, coarse_key, coarse_mirror(P), COARSE_MS, groups, lists)
end

-- Put a pending timer in its durable bucket (coarse if far) and the bucket in its
-- mirror; rs: the shard's results handle, which says which buckets are lists.
local function index_bucket(P, bz, id, deadline, bucket_ms, far, rs)
  if far then
    add_to_coarse(P, {[math.floor(deadline / COARSE_MS)] = {id}}, not rs.legacy)
  else
    add_to_buckets(P, bucket_key, bz, bucket_ms, {[math.floor(deadline / bucket_ms)] = {id}},
      rs.F)
  end
end

-- Take pending timers out of the buckets that are sets, dropping buckets left empty:
-- ids[i] due at ds[i]. Each is in its fine bucket or, if not there, in its coarse
-- one (visited only then, and only before format 3: see the lazy buckets above).
local function unindex_many(P, bz, ids, ds, bucket_ms, rs)
  if rs.F then return end
  local fine = {}
  for i, id in ipairs(ids) do push(fine, math.floor(ds[i] / bucket_ms), id) end
  if remove_from_buckets(P, bucket_key, bz, fine) == #ids or not rs.legacy then return end
  local coarse = {}
  for i, id in ipairs(ids) do push(coarse, math.floor(ds[i] / COARSE_MS), id) end
  remove_from_buckets(P, coarse_key, coarse_mirror(P), coarse)
end

-- Move the coarse buckets starting less than COARSE_MS from now (or already past) into
-- the fine buckets, at most `budget` timers; ids no longer pending are dropped. Returns
-- how many timers it moved and whether coarse buckets that have started remain.
local function cascade(P, tkey, bz, bucket_ms, now, budget, rs)
  local moved, taken = 0, 0
  local ready = redis.call('ZRANGEBYSCORE', coarse_mirror(P), '-inf', now + COARSE_MS - 1,
    'LIMIT', 0, budget)
  for _, m in ipairs(ready) do
    if taken >= budget then break end
    local hour = tonumber(m)
    local b = coarse_key(P, hour)
    local ids
    if redis.call('TYPE', b).ok == 'list' then
      ids = redis.call('LPOP', b, budget - taken) or {}
    else
      ids = redis.call('SPOP', b, budget - taken)
    end
    if #ids > 0 then
      local raws = redis.call('HMGET', tkey, unpack(ids))
      local fine, seen = {}, {}
      for i, id in ipairs(ids) do  -- pending, still due in this hour, once (see add_to_coarse)
        if raws[i] and not seen[id] then
          seen[id] = true
          local d = peek_rec(raws[i])
          if math.floor(d / COARSE_MS) == hour then
            push(fine, math.floor(d / bucket_ms), id)
            moved = moved + 1
          end
        end
      end
      add_to_buckets(P, bucket_key, bz, bucket_ms, fine, rs.F)
      taken = taken + #ids
    end
    if redis.call('EXISTS', b) == 0 then redis.call('ZREM', coarse_mirror(P), m) end
  end
  local started = redis.call('ZRANGEBYSCORE', coarse_mirror(P), '-inf', now, 'LIMIT', 0, 1)
  return moved, #started > 0
end
