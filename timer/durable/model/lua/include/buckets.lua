--[[ buckets: the durable buckets (fine P:b:<n>, coarse P:c:<m>) and their
mirrors, and the cascade of coarse buckets into fine ones.

Buckets are lazy lists. A set of strings has no compact encoding in Redis 7.0 (7.2 added
listpack sets): about 60 bytes an id in a bucket of a thousand; a list is a few bytes
over the id. A list cannot drop an id cheaply (LREM scans), so nothing is taken out of
a bucket when its timer is decided or moved: the timer leaves its id behind. Whoever
reads a bucket checks each id against its record: cascade moves an id only if it is
still pending and due in that hour, once (a stale or repeated one is skipped, or lands
again in the fine bucket its deadline names); sweep decides only what is pending and
due, and takes every id it read out of the list; the leader loads only ids due in the
buckets it read (ops.read_due). So each pending timer is in the bucket its deadline
names (fine, or coarse if far), and maybe also, stale, in others.
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "head"

-- Whether a timer due at `deadline` waits in a coarse bucket.
local function is_far(deadline, now)
  return math.floor(deadline / COARSE_MS) * COARSE_MS >= now + COARSE_MS
end

-- Add each group of ids (bucket number n -> ids) to its bucket key_of(P, n), and each
-- bucket to its ZSET mirror with score n * width: one RPUSH per bucket, one ZADD.
local function add_to_buckets(P, key_of, mirror, width, groups)
  local scores = {}
  for n, members in pairs(groups) do
    redis.call('RPUSH', key_of(P, n), unpack(members))
    scores[#scores + 1] = istr(n * width)
    scores[#scores + 1] = istr(n)
  end
  if #scores > 0 then redis.call('ZADD', mirror, unpack(scores)) end
end

local function add_to_coarse(P, groups)
  add_to_buckets(P, coarse_key, coarse_mirror(P), COARSE_MS, groups)
end

-- Put a pending timer in its durable bucket (coarse if far) and the bucket in its mirror,
-- and in the shard's head if it is due before the head's bound (include/head.lua).
local function index_bucket(P, bz, id, deadline, bucket_ms, now)
  if is_far(deadline, now) then
    add_to_coarse(P, {[math.floor(deadline / COARSE_MS)] = {id}})
  else
    add_to_buckets(P, bucket_key, bz, bucket_ms, {[math.floor(deadline / bucket_ms)] = {id}})
  end
  head_note(P, {id, deadline})
end

-- Move the coarse buckets starting less than COARSE_MS from now (or already past) into
-- the fine buckets, at most `budget` timers; ids no longer pending are dropped. Returns
-- how many timers it moved and whether coarse buckets that have started remain.
local function cascade(P, tkey, bz, bucket_ms, now, budget)
  local moved, taken = 0, 0
  local ready = redis.call('ZRANGEBYSCORE', coarse_mirror(P), '-inf', now + COARSE_MS - 1,
    'LIMIT', 0, budget)
  for _, m in ipairs(ready) do
    if taken >= budget then break end
    local hour = tonumber(m)
    local b = coarse_key(P, hour)
    local ids = redis.call('LPOP', b, budget - taken) or {}
    if #ids > 0 then
      local raws = redis.call('HMGET', tkey, unpack(ids))
      local fine, seen = {}, {}
      for i, id in ipairs(ids) do  -- pending, still due in this hour, once (lazy: see above)
        if raws[i] and not seen[id] then
          seen[id] = true
          local d = peek_rec(raws[i])
          if math.floor(d / COARSE_MS) == hour then
            push(fine, math.floor(d / bucket_ms), id)
            moved = moved + 1
          end
        end
      end
      add_to_buckets(P, bucket_key, bz, bucket_ms, fine)
      taken = taken + #ids
    end
    if redis.call('EXISTS', b) == 0 then redis.call('ZREM', coarse_mirror(P), m) end
  end
  local started = redis.call('ZRANGEBYSCORE', coarse_mirror(P), '-inf', now, 'LIMIT', 0, 1)
  return moved, #started > 0
end
