--[[ results: the results table of retained outcomes (P:rx, P:R:<b>).
]]
--- @include "util"
--- @include "keys"

--[[ The results table: retained outcomes in small hashes, not a key each.

A retained outcome as a key of its own (a string with PX) costs Redis 108 bytes on
Valkey 9 and 157 on Redis 7.0, most of it the key's own overhead and its expiry entry.
The table keeps them in hashes P:R:<b> of about RX_LOAD entries each, small enough that
Redis stores each as one listpack (an id and its value, a few bytes of overhead), and
short enough that finding a field in one (a scan) stays cheap. Which hash holds an id is
linear hashing (Litwin): h = rx_hash(id), a 32-bit hash, b = h mod 2^L, or h mod 2^(L+1)
when that is below the split pointer S. When the table
averages more than RX_LOAD results a hash, hash S is split (its ids whose b under L + 1
differs move to S + 2^L) and S advances; once S reaches 2^L, L grows and S restarts. So
a lookup is one HGET whatever the size, and no step rehashes more than one small hash.
P:rx (HASH) holds L, S and N (results held), and trim's cursor C; init writes it (and
migrate.lua, for a namespace an earlier release made). The table does not shrink: after
a peak its hashes hold fewer results each (an empty one is gone).

A value is 4 bytes (the time the outcome may be dropped, epoch seconds, big-endian)
then the outcome record. Expired outcomes are dropped by trim (a visit of some hashes
per call, round robin from the cursor C), not by Redis: an outcome is kept at least
result_ttl, and read as retained until trim drops it.
]]
local RX_LOAD = 32

local function results_of(P)
  local v = redis.call('HMGET', rx_state_key(P), 'L', 'S', 'N')
  local L = tonumber(v[1]) or 0
  return {P = P, L = L, S = tonumber(v[2]) or 0, N = tonumber(v[3]) or 0, lo = 2 ^ L,
    hi = 2 ^ (L + 1)}
end

-- The results handle of a deciding script's shard, read once per call.
local function results(ctx)
  if not ctx.rs then ctx.rs = results_of(ctx.P) end
  return ctx.rs
end

-- h(id): h = (31 * h + byte) mod 2^32 over its bytes (Java's string hash), four bytes a
-- step (h * 31^4 stays below 2^53: exact in Lua's doubles), eight read a call: a call
-- of string.byte costs as much here as the arithmetic of four steps, and SHA-1
-- (redis.sha1hex) or reading four bytes a call cost more an id than this.
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
  if rs.N == 0 then  -- an empty table: nothing to look up
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
-- each of the burst's results about once (a split of a full hash is costly: in a burst
-- into an empty table, about a fifth of what firing it costs); grown before the burst
-- arrives, it moves only what it held, little if small.
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

-- Save L, S and N after a change.
local function rx_save(rs)
  redis.call('HSET', rx_state_key(rs.P), 'L', istr(rs.L), 'S', istr(rs.S), 'N', istr(rs.N))
end

-- Retain outcome vals[i] of ids[i] for ttl ms from now.
local function result_put_many(rs, ids, vals, now, ttl)
  if #ids == 0 then return end
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
-- saves the table's state (rx_save).
local function result_del_many(rs, ids)
  if #ids == 0 then return end
  local groups = rx_group(rs, ids)
  for b, names in pairs(groups) do
    rs.N = rs.N - redis.call('HDEL', rx_key(rs.P, b), unpack(names))
  end
end
