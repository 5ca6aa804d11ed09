--[[ pending_page: a shard's soonest pending timers in its next buckets, for the Timers
view's page (admin/pending.py); read-only.

KEYS[1]  P:t        KEYS[2]  P:guard (the guard's key: declared as every key a script
                             touches is, read by the guard alone)
KEYS[3..]  the buckets to read, in due order, each whole (P:b:<n>, P:c:<m>)
ARGV[1]  after: a deadline ('' for none: from the first)
ARGV[2]  keep: how many soonest to send back (0: every one)
ARGV[3]  least priority ('' for any)
ARGV[4]  last: no timer due after it is wanted ('' for none): the page's last so far
ARGV[5..]  for each bucket, where the next one starts ('' for none): every timer of the
         shard due before it is in the buckets read up to there

Returns  {ids read, buckets read, deadline, id, record, deadline, id, record, ...}: each
         pending timer of the buckets read once (a decided timer's stale id is skipped;
         a moved one's is taken at its deadline now, wherever that is), due at or after
         `after`, of that priority at least; with `keep`, only those due no later than
         the keep-th soonest due after `after`, ties at it all sent. Every one due at
         `after` itself comes back and none counts towards `keep`: the caller orders
         ids (by bytes, as Python does; Lua's < on strings follows the server's locale)
         and drops those at or before its cursor. The buckets are read in order until
         the next one starts after `last`, or (with `keep`) after the keep-th soonest:
         no timer it holds could be sent back.
Cost     O(ids in the buckets read), and O(log keep) for each one that enters the keep
         soonest: a max-heap of their deadlines turns away, with one comparison, any id
         due after its top, so a bucket costs about a fifth more than its LRANGE and
         HMGET alone (sorting every id, or a table keyed by each, cost three times them).
]]
--- @include "records"
--- @include "heap"
local TIMERS = KEYS[1]
local FIRST_BUCKET = 3
local after_d = tonumber(ARGV[1]) or -1
local keep = tonumber(ARGV[2])
local least = tonumber(ARGV[3])
local last = tonumber(ARGV[4]) or math.huge
local FIRST_NEXT = 5
local CHUNK = 1000  -- ids one HMGET asks for (unpack puts them all on Lua's stack)

local read = 0
local heap, size = {}, 0  -- the deadlines of the keep soonest after `after` so far
local ds, ids, raws, m = {}, {}, {}, 0  -- the candidates: due no later than heap's top
local taken = {}  -- the candidates' ids: a list may hold an id twice
local buckets = 0
for k = FIRST_BUCKET, #KEYS do
  buckets = buckets + 1
  local part = redis.call('LRANGE', KEYS[k], 0, -1)
  read = read + #part
  for i = 1, #part, CHUNK do
    local upto = math.min(i + CHUNK - 1, #part)
    local got = redis.call('HMGET', TIMERS, unpack(part, i, upto))
    for j = 1, upto - i + 1 do
      local raw = got[j]
      if raw then  -- pending (a decided timer's id is stale)
        local h, t, a, b, c, e, f, g, x, y = sbyte(raw, 1, 10)
        local d, rec  -- as peek_rec, its common case inline: a call an id costs ~10%
        if (h == 0x93 or h == 0x94) and t == 0xcf then
          d = ((((((a * 256 + b) * 256 + c) * 256 + e) * 256 + f) * 256 + g) * 256 + x) * 256 + y
          rec = false
        else
          d, rec = peek_rec(raw)
        end
        if d >= after_d and (keep == 0 or size < keep or d <= heap[1] or d == after_d)
          and (not least or (rec and rec.pr or 0) >= least) then
          local id = part[i + j - 1]
          if not taken[id] then
            taken[id] = true
            m = m + 1
            ds[m], ids[m], raws[m] = d, id, raw
            if keep > 0 and d > after_d then
              if size < keep then
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
  end
  local next_start = tonumber(ARGV[FIRST_NEXT + buckets - 1]) or math.huge
  if next_start > last or (keep > 0 and size == keep and heap[1] < next_start) then break end
end

local cut = (keep > 0 and size == keep) and heap[1] or math.huge
local out = {read, buckets}
for i = 1, m do
  if ds[i] <= cut then
    out[#out + 1] = ds[i]
    out[#out + 1] = ids[i]
    out[#out + 1] = raws[i]
  end
end
return out
