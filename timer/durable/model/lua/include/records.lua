--[[ records: the pending and outcome records, how they are read, packed and
decided from their bytes; the outcome stream entry and the shard's events.

The layout is the one this release writes (data format 5, docs/data-model.md); a
namespace an earlier release made is converted by migrate.lua before any other script
runs on it. Records are arrays with their trailing defaults left out: no field
names, no empty values.

Pending timer (HASH P:t, field = id):
  [d, p, d - c, s = '', n = 1, w = {}, g = {}, x = '', u = '', note = '', cap = 0, k = 0,
   pr = 0]
  d = deadline_ms (Redis time, epoch ms)   p = payload (msgpack bytes, opaque here)
  c = created_ms (Redis time)              s = origin token given at schedule ('' if none)
  n = need (distinct keys to complete)     w = watch keys (array)
  g = keys notified so far (array)
  x = the W3C traceparent given at schedule ('' if none): the trace the timer continues
  u = the URL its outcome is POSTed to ('' if none: see timer/webhook.py)
  note = a line of text for people ('' if none)
  cap = max_total_ms: never due after c + cap, however heartbeaten (0: no cap)
  k = the later calls a debounce window absorbed (schedule.lua: debounce)
  pr = the priority given at schedule (-100..100): the order under a backlog
Retained outcome (a value of the results table, see include/results.lua, after its 4
bytes of expiry):
  [o, d, t - d, p, d - c, s = '', g = {}, x = '', u = '', note = '', k = 0, pr = 0] with
  o a code:
  1 expired, 2 cancelled, 3 completed (times as differences: a few bytes, not nine)
  t = decided_ms; g = the watch keys notified before it was decided (which completed it).
The places of the fields a timer is given (n, w, x, u, note) are declared in
timer/durable/model/fields.py (Field.pending, Field.outcome); a test holds the names below to it.
Outcome stream entry (STREAM P:out, one a decided timer): i = id, r = the retained
  outcome record above (the same bytes the results table holds after its expiry): the
  record made once for both; a dead letter put back adds only, from and died (see
  redeliver.lua).
Events on the shard channel: "S <deadline> <id>" scheduled ("M" and a list for a schedule
call that created several: see schedule.lua), "R <deadline> <id>" rescheduled,
"Q" then ' <priority> <id byte length> <id>' for each timer a schedule call created
with a priority, published after its S or M event (a worker of a release before
priorities cannot parse it and drops it: the S or M before it placed the timers),
"X <outcome> <id>" decided by cancel, complete or notify (fire and sweep publish nothing:
the leader that called them already knows what they decided).
]]
--- @include "util"

local OUTCOME_CODE = {expired = 1, cancelled = 2, completed = 3}

-- The one empty list every record read or created here shares when it has no watch keys
-- or no notified keys (most have neither): a fresh {} each is two allocations a timer on
-- the hot paths, and allocation is most of what a script costs per timer. Never
-- append to it: a script that adds to rec.g gives the record its own list first.
local NONE = {}

-- The places of a pending record and of a retained outcome.
-- (named as timer/durable/model/codec.py reads them; a test holds the two together)
local R_DEADLINE_MS, R_PAYLOAD, R_CREATED_MS, R_ORIGIN, R_NEED, R_WATCH, R_GOT,
  R_TRACEPARENT, R_CALLBACK_URL, R_NOTE, R_MAX_TOTAL_MS, R_ABSORBED, R_PRIORITY =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
local O_OUTCOME, O_DEADLINE_MS, O_DECIDED_MS, O_PAYLOAD, O_CREATED_MS, O_ORIGIN, O_GOT,
  O_TRACEPARENT, O_CALLBACK_URL, O_NOTE, O_ABSORBED, O_PRIORITY =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12

-- A pending record as a table with named fields.
local function read_rec(raw)
  local r = cmsgpack.unpack(raw)
  return {d = r[R_DEADLINE_MS], p = r[R_PAYLOAD], c = r[R_DEADLINE_MS] - r[R_CREATED_MS],
    s = r[R_ORIGIN] or '', n = r[R_NEED] or 1, w = r[R_WATCH] or NONE, g = r[R_GOT] or NONE,
    x = r[R_TRACEPARENT] or '', u = r[R_CALLBACK_URL] or '', note = r[R_NOTE] or '',
    cap = r[R_MAX_TOTAL_MS] or 0, k = r[R_ABSORBED] or 0, pr = r[R_PRIORITY] or 0}
end

-- A pending record packed, up to the last field that is not its default.
local function pack_rec(rec)
  local last = R_CREATED_MS
  if (rec.pr or 0) ~= 0 then last = R_PRIORITY
  elseif (rec.k or 0) ~= 0 then last = R_ABSORBED
  elseif (rec.cap or 0) ~= 0 then last = R_MAX_TOTAL_MS
  elseif (rec.note or '') ~= '' then last = R_NOTE
  elseif (rec.u or '') ~= '' then last = R_CALLBACK_URL
  elseif (rec.x or '') ~= '' then last = R_TRACEPARENT
  elseif #rec.g > 0 then last = R_GOT
  elseif #rec.w > 0 then last = R_WATCH
  elseif rec.n ~= 1 then last = R_NEED
  elseif rec.s ~= '' then last = R_ORIGIN end
  local a = {rec.d, rec.p, rec.d - rec.c}
  if last >= R_ORIGIN then a[R_ORIGIN] = rec.s end
  if last >= R_NEED then a[R_NEED] = rec.n end
  if last >= R_WATCH then a[R_WATCH] = rec.w end
  if last >= R_GOT then a[R_GOT] = rec.g end
  if last >= R_TRACEPARENT then a[R_TRACEPARENT] = rec.x or '' end
  if last >= R_CALLBACK_URL then a[R_CALLBACK_URL] = rec.u or '' end
  if last >= R_NOTE then a[R_NOTE] = rec.note or '' end
  if last >= R_MAX_TOTAL_MS then a[R_MAX_TOTAL_MS] = rec.cap or 0 end
  if last >= R_ABSORBED then a[R_ABSORBED] = rec.k or 0 end
  if last >= R_PRIORITY then a[R_PRIORITY] = rec.pr end
  return cmsgpack.pack(a)
end

-- The retained outcome of pending record `rec`, decided as `outcome` at `now`.
local function pack_result(rec, outcome, now)
  local a = {OUTCOME_CODE[outcome], rec.d, now - rec.d, rec.p, rec.d - rec.c}
  local last = O_CREATED_MS
  if (rec.pr or 0) ~= 0 then last = O_PRIORITY
  elseif (rec.k or 0) ~= 0 then last = O_ABSORBED
  elseif (rec.note or '') ~= '' then last = O_NOTE
  elseif (rec.u or '') ~= '' then last = O_CALLBACK_URL
  elseif (rec.x or '') ~= '' then last = O_TRACEPARENT
  elseif #rec.g > 0 then last = O_GOT
  elseif rec.s ~= '' then last = O_ORIGIN end
  if last >= O_ORIGIN then a[O_ORIGIN] = rec.s end
  if last >= O_GOT then a[O_GOT] = rec.g end
  if last >= O_TRACEPARENT then a[O_TRACEPARENT] = rec.x or '' end
  if last >= O_CALLBACK_URL then a[O_CALLBACK_URL] = rec.u or '' end
  if last >= O_NOTE then a[O_NOTE] = rec.note or '' end
  if last >= O_ABSORBED then a[O_ABSORBED] = rec.k or 0 end
  if last >= O_PRIORITY then a[O_PRIORITY] = rec.pr end
  return cmsgpack.pack(a)
end

-- A pending record read only as far as deciding it needs: its deadline, and its record
-- (read_rec) unless it is lean. A lean record is an array of three or four
-- fields [d, p, d - c, s] (no need, watch keys or notified keys: most timers) whose d is
-- a uint64, as cmsgpack writes any deadline after 1970-02: its deadline comes from its
-- bytes and its outcome record from lean_result, with no msgpack pass and no table
-- (read_rec and pack_result cost ~18k instructions a timer, a fired one ~100k).
local function peek_rec(raw)
  -- one call for the header and the deadline's bytes: a call costs ~800 instructions
  local h, t, a, b, c, d, e, f, g, k = sbyte(raw, 1, 10)
  if (h == 0x93 or h == 0x94) and t == 0xcf then
    return ((((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f) * 256 + g) * 256 + k,
      false
  end
  local rec = read_rec(raw)
  return rec.d, rec
end

-- The first two bytes of a lean record's outcome, by the record's first byte (an array
-- of 3 or 4: 0x93, 0x94) and the outcome code: an array of 5 or 6 (0x95 = 149, 0x96 =
-- 150), then the code. Literals, not made with string.char: this runs at every call of
-- every script that includes records, and the loop that made them cost ~22k server
-- instructions a call (callgrind), more than a trivial script call.
local LEAN_HEAD = {
  [0x93] = {'\149\1', '\149\2', '\149\3'},
  [0x94] = {'\150\1', '\150\2', '\150\3'},
}

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
  return LEAN_HEAD[sbyte(raw, 1)][code] .. ssub(raw, 2, 10) .. l .. ssub(raw, 11)
end
