--[[ pending_head: a shard's soonest pending timers from its head (include/head.lua), for
the Timers view's page (admin/pending.py): a few records read, not every id of the
buckets the page reaches. With no cursor, a head that holds fewer than `want` of them
is filled first, from the buckets, in this same call.

KEYS[1]  P:t        KEYS[2]  P:guard (read by the guard alone)
KEYS[3]  P:h        KEYS[4]  P:hs    KEYS[5]  P:buckets    KEYS[6]  P:coarse
ARGV[1]  P (the shard's prefix: the buckets a fill reads are built from it)
ARGV[2]  after: a deadline ('' for none: from the first, and a fill is allowed)
ARGV[3]  after's id: those due at `after` itself come after it by bytes ('' for all)
ARGV[4]  want: how many to send back at most

Returns  {bound, read, more, deadline, id, record, deadline, id, record, ...}: the
         head's first `want` pending timers after (after, after's id), in the head's
         order (deadline, then id by bytes, as Python orders them). `bound`: every
         pending timer of the shard due before it is in the head ('inf': every one;
         '-inf': the head promises nothing yet, as with a cursor before any fill); `more`:
         1 if the head may hold more after the last sent; `read`: the ids a fill read
         from the buckets (0: no fill).
Writes   the head only: stale entries met are dropped (a timer decided or moved since);
         a fill puts the HEAD_KEEP soonest in it and sets the bound.
Cost     O(want + stale met) entries: a ZRANGE and an HMGET a few of them at a time. A
         fill reads the shard's buckets in due order until the HEAD_KEEP soonest are
         known: O(ids in those buckets), as pending_page.lua.
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "heap"
--- @include "head"
local TIMERS, HEAD, BOUND, FINE, FAR = KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local P = ARGV[1]
local after_d = tonumber(ARGV[2])
local after_id = ARGV[3]
local want = tonumber(ARGV[4])
local CHUNK = 1000  -- ids one HMGET asks for (unpack puts them all on Lua's stack)
local BATCH = 16  -- buckets a mirror is asked for at a time

-- The shard's buckets in due order, fine and coarse by start: next() -> key, start.
local function buckets_in_order()
  local lists = {{mirror = FINE, key = bucket_key}, {mirror = FAR, key = coarse_key}}
  for _, l in ipairs(lists) do l.got, l.at, l.from = {}, 1, 0 end
  local function head_of(l)
    if l.at > #l.got then
      l.got = redis.call('ZRANGEBYSCORE', l.mirror, '-inf', '+inf', 'WITHSCORES',
        'LIMIT', l.from, BATCH)
      l.from, l.at = l.from + #l.got / 2, 1
      if #l.got == 0 then return nil end
    end
    return tonumber(l.got[l.at + 1])
  end
  return function()
    local best, start
    for _, l in ipairs(lists) do
      local s = head_of(l)
      if s and (not start or s < start) then best, start = l, s end
    end
    if not best then return nil end
    local key = best.key(P, best.got[best.at])
    best.at = best.at + 2
    return key, start
  end
end

-- Fill the head: the HEAD_KEEP soonest pending timers of the shard, read from its
-- buckets in due order (each id once, at its deadline now: a stale one is skipped, a
-- moved one taken where first found), and the bound: the HEAD_KEEP-th soonest's
-- deadline, or the start of the first bucket not read, whichever is first.
local read = 0
local function fill()
  local heap, size = {}, 0
  local ds, ids, m, taken = {}, {}, 0, {}
  local next_start = math.huge
  local nxt = buckets_in_order()
  while true do
    local key, start = nxt()
    if not key then break end
    if size == HEAD_KEEP and heap[1] < start then
      next_start = start
      break
    end
    local part = redis.call('LRANGE', key, 0, -1)
    read = read + #part
    for i = 1, #part, CHUNK do
      local upto = math.min(i + CHUNK - 1, #part)
      local got = redis.call('HMGET', TIMERS, unpack(part, i, upto))
      for j = 1, upto - i + 1 do
        local id = part[i + j - 1]
        if got[j] and not taken[id] then
          local d = peek_rec(got[j])
          if size < HEAD_KEEP or d <= heap[1] then
            taken[id] = true
            m = m + 1
            ds[m], ids[m] = d, id
            if size < HEAD_KEEP then
              size = size + 1
              heap[size] = d
              sift_up(heap, size)
            elseif d < heap[1] then
              heap[1] = d
              sift_down(heap, size)
            end
          end
        end
      end
    end
  end
  local cut = size == HEAD_KEEP and heap[1] or math.huge
  redis.call('DEL', HEAD)
  local args, k = {}, 0
  for i = 1, m do
    if ds[i] <= cut then
      args[k + 1], args[k + 2] = istr(ds[i]), ids[i]
      k = k + 2
    end
  end
  for i = 1, k, 1000 do redis.call('ZADD', HEAD, unpack(args, i, math.min(i + 999, k))) end
  local bound = math.min(cut, next_start)
  redis.call('SET', BOUND, bound == math.huge and 'inf' or istr(bound), 'PX', HEAD_TTL_MS)
  return bound
end

-- Whether id `a` comes after id `b` by their bytes (Lua's < on strings follows the
-- server's locale; the head and Python order ids by bytes).
local function bytes_after(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = sbyte(a, i), sbyte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end

-- The head's first `want` entries after the cursor that are pending at that deadline
-- ({deadline, id, record, ...}, in order), and whether it may hold more; the stale ones
-- met are dropped from the head.
local function read_head()
  local live, n, offset, stale = {}, 0, 0, {}
  local from = after_d and istr(after_d) or '-inf'
  while n < want do
    local ask = want - n + 8
    local got = redis.call('ZRANGEBYSCORE', HEAD, from, '+inf', 'WITHSCORES', 'LIMIT', offset, ask)
    offset = offset + #got / 2
    local names = {}
    for j = 1, #got, 2 do names[#names + 1] = got[j] end
    local raws = #names > 0 and redis.call('HMGET', TIMERS, unpack(names)) or {}
    for j = 1, #names do
      local d, id, raw = tonumber(got[2 * j]), names[j], raws[j]
      if not raw or peek_rec(raw) ~= d then
        stale[#stale + 1] = id
      elseif n < want and not (d == after_d and not bytes_after(id, after_id)) then
        live[3 * n + 1], live[3 * n + 2], live[3 * n + 3] = d, id, raw
        n = n + 1
      end
    end
    if #names < ask then break end  -- the head's end
  end
  for i = 1, #stale, 1000 do
    redis.call('ZREM', HEAD, unpack(stale, i, math.min(i + 999, #stale)))
  end
  return live, n, n == want  -- `want` sent: there may be more
end

local S = head_bound(P)
if not after_d and not S then S = fill() end  -- a head with no bound is not read first
local live, n, more = read_head()
if not after_d and S ~= math.huge and n < want then  -- too few left: filled again
  S = fill()
  live, n, more = read_head()
end
local out = {S == nil and '-inf' or (S == math.huge and 'inf' or istr(S)), read, more and 1 or 0}
for i = 1, 3 * n do out[3 + i] = live[i] end
return out
