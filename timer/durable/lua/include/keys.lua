--[[ keys: every key a script builds itself, always from the shard's hash-tagged
prefix P (so it stays in the shard's slot). timer/durable/keys.py owns the same
format (ShardKeys; a contract test pins the two); any other key arrives in KEYS.
]]
--- @include "util"

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

-- The results table: its state (L, S, N, C, F, E, G) and its hash b.
local function rx_state_key(P)
  return P .. ':rx'
end

local function rx_key(P, b)
  return P .. ':R:' .. istr(b)
end
