--[[ schedule: create timers once each, or say what already exists under their ids.

One call takes N timers of one shard (schedule is N = 1, schedule_many sends batches):
the existence checks are one HMGET of records and, for the ids not pending, one HMGET
of retained outcomes per results-table hash, the clock is read once, the writes are
one HSET, one RPUSH per durable bucket, one ZADD per bucket mirror and one SADD per
watch key, and one event is published for the whole call. A timer due far enough
ahead goes to a coarse bucket (P:c:<m>, mirrored in P:coarse; see include/buckets.lua).
The shard's head bound is read once (a GET), and the timers due before it join the head
in one ZADD (include/head.lua).

KEYS[1]      P:t         HASH  id -> record
KEYS[2]      P:buckets   ZSET  durable bucket n -> n * bucket_ms
ARGV[1]  P           shard prefix, e.g. {tw:default:3}
ARGV[2]  bucket_ms   width of a durable bucket, ms
ARGV[3]  max_delay_ms  a deadline further than this from now is refused
ARGV[4]  events channel of the shard
ARGV[5]  origin      an opaque token naming who created them (a batch, a Spark job); may be ''
ARGV[6]  timers      msgpack array, four slots a timer, flat: id, mode, value, payload
                     (no table a timer to unpack: most timers are only these four); a
                     timer with more slots is id, then an array of all its slots, then
                     false, false: {id, mode, value, payload, need, rearm, watch,
                     trace, callback, note, max_total_ms, debounce, priority}, cut after
                     the last that is not its default (1, 0, {}, '', '', '', 0, 0, 0).
                     mode 'in' (value is a delay, ms) or 'at' (value is a deadline, epoch
                     ms, Redis time); payload msgpack bytes; need distinct watch keys
                     that complete it (>= 1); rearm 1: an id whose outcome is retained is
                     scheduled again (a new arming with its own outcome), 0: that outcome
                     is returned; watch keys deduplicated and sorted by the client, all
                     routing to this shard; trace a W3C traceparent kept with the timer
                     (not compared: the same timer scheduled again from another trace
                     is the same timer); callback the URL its outcome is POSTed to; note a
                     line of text for people (neither compared either); max_total_ms the
                     timer's cap (0 none): its deadline is never after now + it;
                     debounce 1: an id pending (with the same watch list and need) is
                     moved to this call's deadline (later only, within its cap), takes
                     this call's payload and counts it (k); an id decided starts anew
                     (as rearm); priority -100..100, kept with the timer and its
                     outcome (not compared, as note).

Returns  one reply per timer, in order:
         deadline_ms (an integer)                      this call created the timer
         {'pending', deadline_ms, created_ms, origin}  the same timer was already pending
                                                       (or created earlier in this call)
         {'pending', deadline_ms, created_ms, origin, k}  a debounce call absorbed: the
                                               deadline it now has, the calls absorbed
         {'decided', outcome_record}           the id was decided and its outcome is retained
                                               (not with rearm: then it is created again)
         an error reply, in its slot (the other timers go on); a CONFLICT's ends
         with the fields that differ in parentheses, comma-separated: 'CONFLICT timer
         <id> is pending with other parameters (payload,deadline)'
Errors   CONFLICT  a pending timer with this id has another payload, watch list, need or deadline
         TOOFAR    the deadline is more than max_delay_ms from now
Events   one per call for the timers it created: 'S <deadline> <id>' for one; for more,
         'M' then ' <deadline> <id byte length> <id>' for each; and 'R <deadline> <id>'
         for each pending timer a debounce call moved; then, if any it created has
         a priority, 'Q' and ' <priority> <id byte length> <id>' for each of those
Atomic   one timer per id: creation, bucket and watch indexes are written together.
Cost     O(N + W) for N timers and W watch keys.
]]
--- @include "util"
--- @include "keys"
--- @include "records"
--- @include "results"
--- @include "buckets"
--- @include "decide"
local TIMERS, BUCKETS = KEYS[1], KEYS[2]
local P, bucket_ms, max_delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local channel, origin = ARGV[4], ARGV[5]
local flat = cmsgpack.unpack(ARGV[6])
-- A timer's slots, as timer/durable/model/fields.py declares them (its slot + 1; a test holds
-- the two together). The last nine may be left out: then they are their defaults.
local ID, MODE, VALUE, PAYLOAD, NEED, REARM, WATCH, TRACEPARENT, CALLBACK_URL, NOTE,
  MAX_TOTAL_MS, DEBOUNCE, PRIORITY = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
local n = #flat / 4

-- Timer i as one table of its slots: what the checks of an id seen before read (a
-- timer sent whole, with a false payload slot, is that table already).
local function timer_of(i)
  local b = 4 * i - 4
  if not flat[b + 4] then return flat[b + 2] end
  return {flat[b + 1], flat[b + 2], flat[b + 3], flat[b + 4]}
end

local ids = {}
for i = 1, n do ids[i] = flat[4 * i - 3] end
local existing = redis.call('HMGET', TIMERS, unpack(ids))
-- the retained outcomes of the ids not pending (an id is never both: see rearm below)
local rs = results_of(P)
local retained, absent, at = {}, {}, {}  -- retained[i]: nil or false when there is none
for i = 1, n do
  if not existing[i] then
    local k = #absent + 1
    absent[k] = ids[i]
    at[k] = i
  end
end
local got = result_get_many(rs, absent)
for k = 1, #absent do retained[at[k]] = got[k] end

local now = now_ms()
-- here: id -> its record created earlier in this call, as a table, or as its packed
-- bytes when it was made by the plain path below (read_rec reads them if the id comes
-- again in this call)
local replies, here = {}, {}
local fields, buckets, coarse, watched, gone = {}, {}, {}, {}, {}
local notes, nn = {}, 0  -- id, deadline of each timer given one: for the shard's head
local nf = 0  -- #fields, counted: `#` on a growing list is a search each time
-- The M event's pieces: ' <deadline> ', '<id byte length> ', '<id>' for each created
local events, ne, created = {}, 0, 0
local ranked = {}  -- the Q event: the created timers that have a priority
local at_text, length_text = {}, {}  -- ' <deadline> ' and '<length> ', made once a call
local first  -- {deadline, id} of the first timer created: the event when it is the only one
-- moved: id -> a pending record a debounce call moved (in `moves`, in order), this
-- call's own creations too: written again after the loop, as it stands then (HSET's
-- last value of a field wins; its old bucket entry is lazy, as a reschedule's)
local moved, moves = {}, {}

local function same_keys(rec, t)
  local watch = t[WATCH] or NONE
  if rec.n ~= (t[NEED] or 1) or #rec.w ~= #watch then return false end
  for k = 1, #watch do
    if rec.w[k] ~= watch[k] then return false end
  end
  return true
end

-- A delay is not compared (a retry comes later, so its deadline always differs); a
-- deadline is, as it would be created: within the timer's cap.
local function same_deadline(rec, t)
  if t[MODE] ~= 'at' then return true end
  local at = t[VALUE]
  if rec.cap > 0 and at > rec.c + rec.cap then at = rec.c + rec.cap end
  return rec.d == at
end

local function same_timer(rec, t)
  return rec.p == t[PAYLOAD] and same_keys(rec, t) and same_deadline(rec, t)
end

-- The error for timer t whose id is pending as rec: it names the fields that differ
-- (only the calls that conflict pay for finding them all), in parentheses at its end,
-- comma-separated, so a client reads them whatever the id holds.
local function conflict(rec, t, keys_only)
  local differ = {}
  if not keys_only and rec.p ~= t[PAYLOAD] then differ[#differ + 1] = 'payload' end
  if not keys_only and not same_deadline(rec, t) then differ[#differ + 1] = 'deadline' end
  local watch = t[WATCH] or NONE
  local same_watch = #rec.w == #watch
  for k = 1, #watch do
    if rec.w[k] ~= watch[k] then same_watch = false end
  end
  if not same_watch then differ[#differ + 1] = 'watch' end
  if rec.n ~= (t[NEED] or 1) then differ[#differ + 1] = 'need' end
  return redis.error_reply('CONFLICT timer ' .. t[ID] .. ' is pending with other parameters ('
    .. table.concat(differ, ',') .. ')')
end

-- A debounce call on pending timer `rec`: its deadline moves to this call's (later
-- only, never past its cap), its payload becomes this call's, and it counts the call.
local function absorb(id, rec, t)
  if not same_keys(rec, t) then return conflict(rec, t, true) end
  local deadline, too_far = deadline_of(t[MODE], t[VALUE], now, max_delay)
  if too_far then return too_far end
  if rec.cap > 0 and deadline > rec.c + rec.cap then deadline = rec.c + rec.cap end
  if deadline > rec.d then rec.d = deadline end
  rec.p, rec.k = t[PAYLOAD], rec.k + 1
  if not moved[id] then
    moved[id] = rec
    moves[#moves + 1] = id
  end
  return {'pending', istr(rec.d), istr(rec.c), rec.s or '', rec.k}
end

-- The i-th timer's reply if it exists already (or nil): checked in the order one call per
-- timer would check them, so a batch behaves like its timers scheduled one by one.
local function known(i, t)
  local id = t[ID]
  local rec = moved[id] or here[id]
  if type(rec) == 'string' then  -- made by the plain path: read as a table from now on
    rec = read_rec(rec)
    here[id] = rec
  end
  if not rec then
    if retained[i] and t[REARM] ~= 1 and t[DEBOUNCE] ~= 1 then
      return {'decided', retained[i]}
    end
    if existing[i] then rec = read_rec(existing[i]) end
  end
  if not rec then return nil end
  if t[DEBOUNCE] == 1 then return absorb(id, rec, t) end
  if same_timer(rec, t) then
    return {'pending', istr(rec.d), istr(rec.c), rec.s or ''}
  end
  return conflict(rec, t, false)
end

-- Index a timer created at `deadline` (its bucket, fine or coarse: include/buckets.lua)
-- and add it to the event.
local function created_at(id, deadline)
  local hour = (deadline - deadline % COARSE_MS) / COARSE_MS
  if hour * COARSE_MS >= now + COARSE_MS then  -- is_far: waits in a coarse bucket
    push(coarse, hour, id)
  else
    push(buckets, (deadline - deadline % bucket_ms) / bucket_ms, id)
  end
  notes[nn + 1], notes[nn + 2] = id, deadline
  nn = nn + 2
  local at = at_text[deadline]  -- timers of one call often share a deadline
  if not at then
    at = ' ' .. istr(deadline) .. ' '
    at_text[deadline] = at
  end
  local len = length_text[#id]  -- ... and ids a length
  if not len then
    len = istr(#id) .. ' '
    length_text[#id] = len
  end
  events[ne + 1], events[ne + 2], events[ne + 3] = at, len, id
  ne = ne + 3
  created = created + 1
  if not first then first = {deadline, id} end
  return len
end

-- The plain path's record bytes: what pack_rec makes of [d, p, d - c(, s)], put
-- together here without a table: its head, d, the payload as a msgpack string, d -
-- c and the origin, each written as cmsgpack writes it (a test holds the bytes to it).
local LEAN = origin == '' and '\147' or '\148'  -- an array of 3, or 4 with the origin
local ORIGIN = origin == '' and '' or cmsgpack.pack(origin)
local TWO32 = 4294967296
local str_head, int_bytes = {}, {}  -- payload length -> its header; d - c -> its bytes
local function be4(x)  -- the 4 bytes of 0 <= x < 2^32, big-endian
  local d = x % 256
  x = (x - d) / 256
  local c = x % 256
  x = (x - c) / 256
  local b = x % 256
  return (x - b) / 256, b, c, d
end
local function uint64(d)  -- 0xcf and d's 8 bytes, as cmsgpack writes d >= 2^32
  -- the two halves a byte at a time side by side, no call (be4 twice cost 1.8% a timer)
  local lo = d % TWO32
  local hi = (d - lo) / TWO32
  local h4, l4 = hi % 256, lo % 256
  hi, lo = (hi - h4) / 256, (lo - l4) / 256
  local h3, l3 = hi % 256, lo % 256
  hi, lo = (hi - h3) / 256, (lo - l3) / 256
  local h2, l2 = hi % 256, lo % 256
  hi, lo = (hi - h2) / 256, (lo - l2) / 256
  return schar(207, hi, h2, h3, h4, lo, l2, l3, l4)
end
local function head_of(len)  -- a msgpack string's header (fixstr, str8, str16, str32)
  if len < 32 then return schar(160 + len) end
  if len < 256 then return schar(217, len) end
  if len < 65536 then return schar(218, (len - len % 256) / 256, len % 256) end
  return schar(219, be4(len))
end

for i = 1, n do
  local b = 4 * i - 4
  local id = flat[b + 1]
  if not flat[b + 4] or existing[i] or retained[i] or here[id] or moved[id] then
    -- the full path: a timer with more than an id, a time and a payload, or an id seen
    local t = timer_of(i)
    replies[i] = known(i, t)
    if not replies[i] then
      local deadline, too_far = deadline_of(t[MODE], t[VALUE], now, max_delay)
      local cap = t[MAX_TOTAL_MS] or 0
      if cap > 0 and deadline and deadline > now + cap then deadline = now + cap end
      if too_far then
        replies[i] = too_far
      else
        -- re-armed: the old outcome stays in the stream only
        if retained[i] then gone[#gone + 1] = id end
        local watch = t[WATCH] or NONE
        local rec = {d = deadline, p = t[PAYLOAD], w = watch, n = t[NEED] or 1, g = NONE,
          c = now, s = origin, x = t[TRACEPARENT] or '', u = t[CALLBACK_URL] or '',
          note = t[NOTE] or '', cap = cap, k = 0, pr = t[PRIORITY] or 0}
        here[id] = rec
        fields[nf + 1], fields[nf + 2] = id, pack_rec(rec)
        nf = nf + 2
        for _, k in ipairs(watch) do push(watched, k, id) end
        local len = created_at(id, deadline)
        if rec.pr ~= 0 then ranked[#ranked + 1] = ' ' .. istr(rec.pr) .. ' ' .. len .. id end
        replies[i] = deadline  -- an integer reply: the cheapest Redis converts (most replies)
      end
    end
  else
    -- the plain path (most timers): new, an id, a time and a payload; no table made
    local value, p = flat[b + 3], flat[b + 4]
    local deadline = value
    if flat[b + 2] == 'in' then deadline = now + value end
    if deadline > now + max_delay then
      local _, too_far = deadline_of('at', deadline, now, max_delay)
      replies[i] = too_far
    else
      local ph = str_head[#p]
      if not ph then
        ph = head_of(#p)
        str_head[#p] = ph
      end
      local late = deadline - now
      local lb = int_bytes[late]
      if not lb then
        lb = cmsgpack.pack(late)
        int_bytes[late] = lb
      end
      local d8
      if deadline >= TWO32 then d8 = uint64(deadline) else d8 = cmsgpack.pack(deadline) end
      local rec = LEAN .. d8 .. ph .. p .. lb .. ORIGIN
      here[id] = rec
      fields[nf + 1], fields[nf + 2] = id, rec
      nf = nf + 2
      created_at(id, deadline)
      replies[i] = deadline
    end
  end
end

for _, id in ipairs(moves) do  -- debounce calls absorbed: each record as it now stands
  local rec = moved[id]
  fields[nf + 1], fields[nf + 2] = id, pack_rec(rec)
  nf = nf + 2
  if is_far(rec.d, now) then
    push(coarse, math.floor(rec.d / COARSE_MS), id)
  else
    push(buckets, math.floor(rec.d / bucket_ms), id)
  end
  notes[nn + 1], notes[nn + 2] = id, rec.d
  nn = nn + 2
end

if nf > 0 then
  if #gone > 0 then
    result_del_many(rs, gone)
    rx_save(rs)
  end
  redis.call('HSET', TIMERS, unpack(fields, 1, nf))
  add_to_buckets(P, bucket_key, BUCKETS, bucket_ms, buckets)
  add_to_coarse(P, coarse)
  head_note(P, notes)
  for k, members in pairs(watched) do
    redis.call('SADD', watch_key(P, k), unpack(members))
  end
  if created == 1 then
    redis.call('PUBLISH', channel, 'S ' .. istr(first[1]) .. ' ' .. first[2])
  elseif created > 1 then
    redis.call('PUBLISH', channel, 'M' .. table.concat(events, '', 1, ne))
  end
  if #ranked > 0 then  -- after the S or M event that placed them: a worker's order
    redis.call('PUBLISH', channel, 'Q' .. table.concat(ranked))
  end
  for _, id in ipairs(moves) do  -- after the S or M event of one created in this call
    redis.call('PUBLISH', channel, 'R ' .. istr(moved[id].d) .. ' ' .. id)
  end
end
return replies
