--[[ keys: every key a script builds itself, always from the shard's hash-tagged
prefix P (so it stays in the shard's slot). timer/durable/model/keys.py owns the same
format (ShardKeys; a contract test pins the two); any other key arrives in KEYS.
]]
--- @include "util"

local function bucket_key(P, n)
  return P .. ':b:' .. istr(n)
end

local function watch_key(P, key)
  return P .. ':w:' .. key
end

-- Far timers wait in coarse buckets: a timer created (or rescheduled)
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

-- A shard's head (include/head.lua): its soonest pending timers, and their bound.
local function head_key(P)
  return P .. ':h'
end

local function head_bound_key(P)
  return P .. ':hs'
end

-- The results table: its state (L, S, N, C) and its hash b.
local function rx_state_key(P)
  return P .. ':rx'
end

local function rx_key(P, b)
  return P .. ':R:' .. istr(b)
end

-- A shard's recurring schedules (HASH) and those waiting for their leader to arm their
-- next occurrence (SET), for the scripts that do not take them in KEYS.
local function sched_key(P)
  return P .. ':S'
end

local function sched_queue_key(P)
  return P .. ':Sq'
end

-- migrate.lua's keys: its state (a HASH) and its copies (a list bucket, a stream) while
-- it converts a shard an earlier release made; and the pattern of the retained outcomes
-- that release kept as strings of their own (P:r:<id>), which it moves into the table.
local function migrate_state_key(P)
  return P .. ':mig'
end

local function migrate_copy_key(P, kind)
  return P .. ':mig:' .. kind
end

local function old_result_pattern(P)
  return P .. ':r:*'
end
