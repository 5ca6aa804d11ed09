--[[ head: each shard's soonest pending timers, kept for the Timers view's pages
(admin/pending.py), so that a page reads a few records a shard, not every id of the
buckets it reaches.

P:h   ZSET  id -> deadline ms
P:hs  STRING  the bound S ('inf': no bound)

The promise: every pending timer of the shard due before S is in P:h, at its deadline.
P:h may hold more: stale entries (a timer decided since, or moved to S or later), which a
reader checks against the timer's record and drops. So a script that gives a pending
timer a deadline (creates, reschedules, arms, or holds it) adds it when that deadline is
before S, and nothing else touches the head: a decided timer's entry goes stale by itself,
and so does a moved one's. With no S (a shard before the head, or one never read since)
nothing is promised and nothing is added: pending_head.lua fills the head the first time
a page asks. Past HEAD_MOST entries the latest go and S falls to the soonest of them.
S lasts HEAD_TTL_MS from its fill (or its last trim): a process of a release before the
head (a rolling upgrade, a rollback) gives timers deadlines without adding them, and
what it left out is found again at the next fill, at most that long after.
]]
--- @include "util"
--- @include "keys"

local HEAD_MOST = 256  -- entries before a trim
local HEAD_KEEP = 128  -- entries a trim keeps, and a fill reads up to
local HEAD_TTL_MS = 60000  -- how long a bound lasts

-- The bound S (nil: no promise; math.huge: every pending timer is in the head).
local function head_bound(P)
  local s = redis.call('GET', head_bound_key(P))
  if not s then return nil end
  if s == 'inf' then return math.huge end
  return tonumber(s)
end

-- Pending timers given deadlines: `notes` is {id, deadline, id, deadline, ...}; those due
-- before S join the head (at their deadline, an entry they had moved), and a head past
-- HEAD_MOST is cut back to HEAD_KEEP, S falling to the soonest deadline cut.
local function head_note(P, notes)
  if #notes == 0 then return end
  local S = head_bound(P)
  if not S then return end
  local args, k = {}, 0
  for i = 1, #notes, 2 do
    if notes[i + 1] < S then
      args[k + 1], args[k + 2] = istr(notes[i + 1]), notes[i]
      k = k + 2
    end
  end
  if k == 0 then return end
  local hk = head_key(P)
  for i = 1, k, 1000 do redis.call('ZADD', hk, unpack(args, i, math.min(i + 999, k))) end
  local n = redis.call('ZCARD', hk)
  if n > HEAD_MOST then
    local cut = redis.call('ZPOPMAX', hk, n - HEAD_KEEP)  -- latest first: the last is soonest
    redis.call('SET', head_bound_key(P), cut[#cut], 'PX', HEAD_TTL_MS)
  end
end
