--[[ _lib: helpers prepended to every tickwheel script when it is loaded (not a script).

Records come in two formats (a namespace's format 3 is format 2's records with its
retained outcomes in the results table); every script reads both (read_rec) and a pending timer keeps
its format through its life, its retained outcome included (the format of a new timer is
the namespace's, given to schedule). Format 2 is the compact one (#14): an array with
its trailing defaults left out, which saves the field names and the empty values.

Pending timer (HASH P:t, field = id):
  format 1  map {d, p, w, n, g, c, s}
  format 2  array [d, p, d - c, s = '', n = 1, w = {}, g = {}]
  d = deadline_ms (Redis time, epoch ms)   p = payload (msgpack bytes, opaque here)
  c = created_ms (Redis time)              s = origin token given at schedule ('' if none)
  n = need (distinct keys to complete)     w = watch keys (array)
  g = keys notified so far (array)
Retained outcome (STRING P:r:<id> with PX in formats 1 and 2; in format 3 a value in the
results table, see below, the record after 4 bytes of expiry):
  format 1  map {o, d, t, p, c, s, g} with o the outcome's name
  format 2  array [o, d, t - d, p, d - c, s = '', g = {}] with o a code: 1 expired,
            2 cancelled, 3 completed (times as differences: a few bytes, not nine)
  t = decided_ms; g = the watch keys notified before it was decided (which completed it).
Outcome stream entry (STREAM P:out, one a decided timer):
  formats 1 to 3  fields id, outcome (its name), deadline, decided (epoch ms), payload
  format 4        fields i = id, r = the retained outcome record above (the same bytes
                  the results table holds after its 4 bytes of expiry): two fields, not
                  five, and the record made once for both (#14)
  The layout follows the shard's results table (E in P:rx, see below), so a stream may
  hold both after a migration; readers (calls.outcome_from_entry) take either.
Events on the shard channel: "S <deadline> <id>" scheduled ("M" and a list for a schedule
call that created several: see schedule.lua), "R <deadline> <id>" rescheduled,
"X <outcome> <id>" decided by cancel, complete or notify (fire and sweep publish nothing:
the leader that called them already knows what they decided).
]]

local OUTCOME_CODE = {expired = 1, cancelled = 2, completed = 3}

-- The one empty list every record read or created here shares when it has no watch keys
-- or no notified keys (most have neither): a fresh {} each is two allocations a timer on
-- the hot paths, and allocation is most of what a script costs per timer (#14). Never
-- append to it: a script that adds to rec.g gives the record its own list first.
local NONE = {}

-- A pending record (either format) as a table with named fields; fmt says which it was.
local function read_rec(raw)
  local r = cmsgpack.unpack(raw)
  if r.d then
    r.fmt = 1
    if not r.s then r.s = '' end
    return r
  end
  return {d = r[1], p = r[2], c = r[1] - r[3], s = r[4] or '', n = r[5] or 1, w = r[6] or NONE,
    g = r[7] or NONE, fmt = 2}
end

-- A pending record in its own format (rec.fmt).
local function pack_rec(rec)
  if rec.fmt == 2 then  -- up to the last field that is not its default
    local last = 3
    if #rec.g > 0 then last = 7
    elseif #rec.w > 0 then last = 6
    elseif rec.n ~= 1 then last = 5
    elseif rec.s ~= '' then last = 4 end
    local a = {rec.d, rec.p, rec.d - rec.c}
    if last >= 4 then a[4] = rec.s end
    if last >= 5 then a[5] = rec.n end
    if last >= 6 then a[6] = rec.w end
    if last >= 7 then a[7] = rec.g end
    return cmsgpack.pack(a)
  end
  return cmsgpack.pack({d = rec.d, p = rec.p, w = rec.w, n = rec.n, g = rec.g, c = rec.c, s = rec.s})
end

-- The retained outcome of pending record `rec`, decided as `outcome` at `now`, in rec's format.
local function pack_result(rec, outcome, now)
  if rec.fmt == 2 then
    local a = {OUTCOME_CODE[outcome], rec.d, now - rec.d, rec.p, rec.d - rec.c}
    if #rec.g > 0 then
      a[6] = rec.s
      a[7] = rec.g
    elseif rec.s ~= '' then
      a[6] = rec.s
    end
    return cmsgpack.pack(a)
  end
  return cmsgpack.pack({o = outcome, d = rec.d, t = now, p = rec.p, c = rec.c, s = rec.s, g = rec.g})
end

-- A pending record read only as far as deciding it needs: its deadline, and its record
-- (read_rec) unless it is lean. A lean record is a format-2 array of three or four
-- fields [d, p, d - c, s] (no need, watch keys or notified keys: most timers) whose d is
-- a uint64, as cmsgpack writes any deadline after 1970-02: its deadline comes from its
-- bytes and its outcome record from lean_result, with no msgpack pass and no table
-- (read_rec and pack_result cost ~18k instructions a timer, a fired one ~100k; #14).
local sbyte, ssub, schar = string.byte, string.sub, string.char
local function peek_rec(raw)
  local h, t = sbyte(raw, 1, 2)
  if (h == 0x93 or h == 0x94) and t == 0xcf then
    local a, b, c, d, e, f, g, k = sbyte(raw, 3, 10)
    return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g) * 256 + k,
      false
  end
  local rec = read_rec(raw)
  return rec.d, rec
end

-- pack_result of a lean record: [o, d, t - d] then its own p, d - c (and s) as they are,
-- so the same bytes. `code`: the outcome's code; t - d is packed once a call per value
-- (in `packed`): a batch decided together shares few lateness values.
local function lean_result(raw, d, code, now, packed)
  local late = now - d
  local l = packed[late]
  if not l then
    l = cmsgpack.pack(late)
    packed[late] = l
  end
  return schar(sbyte(raw, 1) + 2, code) .. ssub(raw, 2, 10) .. l .. ssub(raw, 11)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function istr(x)
  return string.format('%d', x)
end

-- The three keys a script may build itself, always from the shard's hash-tagged prefix P
-- (so they stay in its slot); timer/durable/keys.py owns the same format (ShardKeys).
local function bucket_key(P, n)
  return P .. ':b:' .. istr(n)
end

local function watch_key(P, key)
  return P .. ':w:' .. key
end

local function result_key(P, id)
  return P .. ':r:' .. id
end


-- Far timers wait in coarse buckets (format 2, #14): a timer created (or rescheduled)
-- whose coarse bucket P:c:<m> (m = floor(d / COARSE_MS)) starts COARSE_MS or more from
-- now goes there, mirrored in the ZSET P:coarse (m -> m * COARSE_MS); the sweep moves a
-- coarse bucket into the fine ones (P:b:<n>) once its start is less than COARSE_MS away
-- (cascade), so a timer is never put in a coarse bucket only to be moved at once. A
-- week of deadlines costs a bucket per hour, not one per timer, and the leader still
-- loads and sweeps only fine buckets. A timer is in exactly one bucket.
local COARSE_MS = 3600000

local function coarse_key(P, m)
  return P .. ':c:' .. istr(m)
end

local function coarse_mirror(P)
  return P .. ':coarse'
end

-- Whether a timer of format `fmt` due at `deadline` waits in a coarse bucket.
local function is_far(fmt, deadline, now)
  return fmt == 2 and math.floor(deadline / COARSE_MS) * COARSE_MS >= now + COARSE_MS
end

-- Append `id` to the list groups[k] (ids grouped by bucket number or watch key); the list.
local function push(groups, k, id)
  local g = groups[k]
  if not g then
    g = {}
    groups[k] = g
  end
  g[#g + 1] = id
  return g
end

--[[ The results table (format 3, #14): retained outcomes in small hashes, not a key each.

A retained outcome as a key of its own (P:r:<id>, with PX) costs Redis 108 bytes on
Valkey 9 and 157 on Redis 7.0, most of it the key's own overhead and its expiry entry.
Format 3 keeps them in hashes P:R:<b> of about RX_LOAD entries each, small enough that
Redis stores each as one listpack (an id and its value, a few bytes of overhead), and
short enough that finding a field in one (a scan) stays cheap. Which hash holds an id is
linear hashing (Litwin): h = rx_hash(id), a 32-bit hash, b = h mod 2^L, or h mod 2^(L+1)
when that is below the split pointer S. When the table
averages more than RX_LOAD results a hash, hash S is split (its ids whose b under L + 1
differs move to S + 2^L) and S advances; once S reaches 2^L, L grows and S restarts. So
a lookup is one HGET whatever the size, and no step rehashes more than one small hash.
P:rx (HASH) holds L, S and N (results held); its existence is what says a shard uses
the table (init writes it in format 3; migrate writes it with G, a time in epoch ms:
until then a result the table lacks is looked for as a P:r:<id> string, which formats
1 and 2 wrote with a PX of result_ttl, so none is missed while they last). The table
does not shrink: after a peak its hashes hold fewer results each (an empty one is gone).

A value is 4 bytes (the time the outcome may be dropped, epoch seconds, big-endian)
then the outcome record. Expired outcomes are dropped by trim (a visit of some hashes
per call, round robin from the cursor C), not by Redis: an outcome is kept at least
result_ttl, and read as retained until trim drops it.
]]
local RX_LOAD = 32

local function results_of(P)
  local v = redis.call('HMGET', P .. ':rx', 'L', 'S', 'N', 'G', 'F', 'E')
  if not v[1] then return {P = P, legacy = true} end
  local L = tonumber(v[1])
  return {P = P, L = L, S = tonumber(v[2]), N = tonumber(v[3]) or 0, lo = 2 ^ L,
    hi = 2 ^ (L + 1), G = v[4] and tonumber(v[4]) >= now_ms(), F = v[5] == '1',
    E = v[6] == '1'}
end

-- The results handle of a deciding script's shard, read once per call.
local function results(ctx)
  if not ctx.rs then ctx.rs = results_of(ctx.P) end
  return ctx.rs
end

-- h(id): h = (31 * h + byte) mod 2^32 over its bytes (Java's string hash), four bytes a
-- step (h * 31^4 stays below 2^53: exact in Lua's doubles), eight read a call: a call
-- of string.byte costs ~800 instructions here, as much as the arithmetic of four steps
-- (#14). SHA-1 (redis.sha1hex) cost ~4k instructions an id; reading four bytes a call
-- ~4.4k for a 7-byte id, this ~2.9k.
local H32 = 4294967296
local function rx_hash(id)
  local h, i, n = 0, 1, #id
  while i + 7 <= n do
    local a, b, c, d, e, f, g, k = sbyte(id, i, i + 7)
    h = (h * 923521 + a * 29791 + b * 961 + c * 31 + d) % H32
    h = (h * 923521 + e * 29791 + f * 961 + g * 31 + k) % H32
    i = i + 8
  end
  if i + 3 <= n then
    local a, b, c, d = sbyte(id, i, i + 3)
    h = (h * 923521 + a * 29791 + b * 961 + c * 31 + d) % H32
    i = i + 4
  end
  if i <= n then  -- the last one to three bytes, one call
    local a, b, c = sbyte(id, i, n)
    h = (h * 31 + a) % H32
    if b then h = (h * 31 + b) % H32 end
    if c then h = (h * 31 + c) % H32 end
  end
  return h
end

-- The hash of the table (rs: L, S and lo = 2^L, hi = 2^(L+1)) that holds id.
local function rx_part(rs, id)
  local h = rx_hash(id)
  local b = h % rs.lo
  if b < rs.S then b = h % rs.hi end
  return b
end

-- ids grouped by the hash that holds them: {b -> names}, {b -> their indexes in ids}.
local function rx_group(rs, ids)
  local names, where = {}, {}
  for i = 1, #ids do
    local id = ids[i]
    local b = rx_part(rs, id)
    local these = names[b]
    if these then
      local k = #these + 1
      these[k] = id
      where[b][k] = i
    else
      names[b] = {id}
      where[b] = {i}
    end
  end
  return names, where
end

local function rx_key(P, b)
  return P .. ':R:' .. istr(b)
end

local function be32(x)
  return string.char(math.floor(x / 16777216) % 256, math.floor(x / 65536) % 256,
    math.floor(x / 256) % 256, x % 256)
end

local function rx_expiry_s(v)
  local a, b, c, d = string.byte(v, 1, 4)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The retained outcomes of ids (a list: the record, or false), in order.
local function result_get_many(rs, ids)
  local out = {}
  if #ids == 0 then return out end
  if rs.legacy then
    local keys = {}
    for i, id in ipairs(ids) do keys[i] = result_key(rs.P, id) end
    return redis.call('MGET', unpack(keys))
  end
  if rs.N == 0 and not rs.G then  -- an empty table: nothing to look up
    for i = 1, #ids do out[i] = false end
    return out
  end
  local names, where = rx_group(rs, ids)
  for b, these in pairs(names) do
    local vals = redis.call('HMGET', rx_key(rs.P, b), unpack(these))
    local idx = where[b]
    for k = 1, #these do
      local v = vals[k]
      if v then out[idx[k]] = string.sub(v, 5) else out[idx[k]] = false end
    end
  end
  if rs.G then  -- migrating: what the table lacks may still be a P:r:<id> string
    local keys, at = {}, {}
    for i, id in ipairs(ids) do
      if not out[i] then
        keys[#keys + 1] = result_key(rs.P, id)
        at[#keys] = i
      end
    end
    if #keys > 0 then
      for k, v in ipairs(redis.call('MGET', unpack(keys))) do out[at[k]] = v end
    end
  end
  return out
end

local function result_get(rs, id)
  return result_get_many(rs, {id})[1]
end

-- Move the ids of hash S that belong to S + 2^L there, and advance the split pointer;
-- how many moved.
local function rx_split(rs)
  local from = rx_key(rs.P, rs.S)
  local to = rs.S + rs.lo
  local all = redis.call('HGETALL', from)
  local move, names = {}, {}
  for i = 1, #all, 2 do
    if rx_hash(all[i]) % rs.hi == to then
      move[#move + 1] = all[i]
      move[#move + 1] = all[i + 1]
      names[#names + 1] = all[i]
    end
  end
  if #names > 0 then
    redis.call('HSET', rx_key(rs.P, to), unpack(move))
    redis.call('HDEL', from, unpack(names))
  end
  rs.S = rs.S + 1
  if rs.S == rs.lo then
    rs.L = rs.L + 1
    rs.S = 0
    rs.lo = rs.hi
    rs.hi = rs.hi * 2
  end
  return #names
end

-- Split for `n` more results, and for rs.ahead more expected soon (the leader's hint: the
-- timers of the shard in its wheel, see fire.lua) while that is cheap: at most
-- RX_AHEAD_SPLITS a call, and moving in all no more results than the n being inserted.
-- A split moves half of what its hash holds, so a table grown as a burst lands moves
-- each of the burst's results about once (a split of a full hash costs ~690k
-- instructions: in a burst into an empty table, about a fifth of what firing it cost;
-- #14); grown before the burst arrives, it moves only what it held, little if small.
local RX_AHEAD_SPLITS = 256
local function rx_grow(rs, n)
  while rs.N + n > RX_LOAD * (rs.lo + rs.S) do rx_split(rs) end
  local ahead, moved, splits = rs.ahead or 0, 0, 0
  while ahead > 0 and splits < RX_AHEAD_SPLITS and moved <= n
      and rs.N + n + ahead > RX_LOAD * (rs.lo + rs.S) do
    moved = moved + rx_split(rs)
    splits = splits + 1
  end
end

-- Save L, S and N after a change (a shard without a table has none to save).
local function rx_save(rs)
  if rs.legacy then return end
  redis.call('HSET', rs.P .. ':rx', 'L', istr(rs.L), 'S', istr(rs.S), 'N', istr(rs.N))
end

-- Retain outcome vals[i] of ids[i] for ttl ms from now.
local function result_put_many(rs, ids, vals, now, ttl)
  if #ids == 0 then return end
  if rs.legacy then
    for i, id in ipairs(ids) do
      redis.call('SET', result_key(rs.P, id), vals[i], 'PX', ttl)
    end
    return
  end
  -- split first, for room for them all: the new results go straight to their hashes,
  -- and a split moves only what was there (a batch into an empty table moves nothing)
  rx_grow(rs, #ids)
  local expiry = be32(math.ceil((now + ttl) / 1000))
  local groups = {}
  for i = 1, #ids do  -- each hash's fields: id, value, id, value...
    local fields = push(groups, rx_part(rs, ids[i]), ids[i])
    fields[#fields + 1] = expiry .. vals[i]
  end
  for b, fields in pairs(groups) do
    rs.N = rs.N + redis.call('HSET', rx_key(rs.P, b), unpack(fields))
  end
  rx_save(rs)
end

-- Drop the retained outcomes of ids (a re-armed id), wherever they are; the caller
-- saves the table's state (rx_save) unless it is legacy.
local function result_del_many(rs, ids)
  if #ids == 0 then return end
  if rs.legacy or rs.G then
    local keys = {}
    for i, id in ipairs(ids) do keys[i] = result_key(rs.P, id) end
    redis.call('DEL', unpack(keys))
    if rs.legacy then return end
  end
  local groups = rx_group(rs, ids)
  for b, names in pairs(groups) do
    rs.N = rs.N - redis.call('HDEL', rx_key(rs.P, b), unpack(names))
  end
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

-- The shard a deciding script works on: prefix, the keys every decision writes, the
-- events channel, and the bucket width and outcome retention (ms).
local function shard_ctx(P, tkey, bz, outkey, evchan, bucket_ms, ttl_ms)
  return {P = P, t = tkey, bz = bz, out = outkey, ev = evchan,
    bucket_ms = tonumber(bucket_ms), ttl = tonumber(ttl_ms)}
end

-- Decide pending timers, once each: remove them from every index, append their outcomes
-- to the stream (in the order given), retain each outcome (in the results table, or at
-- its result key before format 3) for get/wait/idempotent retries, tell the leader.
-- Timer i is ids[i], due at ds[i], with pending record recs[i], or recs[i] = false and
-- raws[i] a lean record (see peek_rec; only where the stream takes format-4 entries):
-- parallel lists, no table per timer. The index writes are coalesced: one HDEL, one
-- SREM per durable bucket and watch key, one ZREM for the buckets left empty, one HSET
-- per results-table hash (format 3); the stream entry is one call per timer.
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
  unindex_many(ctx.P, ctx.bz, ids, ds, ctx.bucket_ms, rs)
  for k, members in pairs(watched) do
    redis.call('SREM', watch_key(ctx.P, k), unpack(members))
  end
  local at, code, packed = istr(now), OUTCOME_CODE[outcome], {}
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
    if rs.E then
      redis.call('XADD', ctx.out, '*', 'i', id, 'r', val)
    else
      redis.call('XADD', ctx.out, '*', 'id', id, 'outcome', outcome, 'deadline', istr(ds[i]),
        'decided', at, 'payload', rec.p)
    end
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
-- once (an id may come twice), read as deciding them needs (peek_rec, where the stream
-- takes format-4 entries, else read_rec): the lists decide_many takes (ids, ds, recs,
-- raws), oldest first as given, and {id, deadline} for each one not yet due.
local function due_records(ids, raws, now, rs)
  local due, ds, recs, lean, later, seen = {}, {}, {}, {}, {}, {}
  for i, id in ipairs(ids) do
    local raw = raws[i]
    if raw and not seen[id] then
      seen[id] = true
      local d, rec
      if rs.E then
        d, rec = peek_rec(raw)
      else
        rec = read_rec(raw)
        d = rec.d
      end
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

-- Fail with FENCED unless `worker` holds the shard's lease at `epoch`.
local function check_fence(lease_key, epoch_key, worker, epoch)
  if redis.call('GET', lease_key) ~= worker or redis.call('GET', epoch_key) ~= epoch then
    return redis.error_reply('FENCED worker ' .. worker .. ' does not hold this shard at epoch ' .. epoch)
  end
  return nil
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

-- cancel and complete: decide one timer by id with `outcome`, or say why not.
-- KEYS: t, buckets, out; ARGV: P, id, bucket_ms, result_ttl_ms, events channel.
local function decide_by_id(outcome)
  local P, id = ARGV[1], ARGV[2]
  local rec, reply = pending_record(P, KEYS[1], id)
  if not rec then return reply end
  local ctx = shard_ctx(P, KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[3], ARGV[4])
  decide(ctx, id, rec, outcome, now_ms())
  return {outcome}
end
