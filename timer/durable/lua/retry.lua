--[[ retry: a handler failed; hand the entry back after a delay (any consumer may take it).

KEYS[1]  P:out (STREAM)    KEYS[2]  P:retry:<group> (ZSET: entry id -> retry time, ms)
ARGV[1]  group             ARGV[2]  entry id        ARGV[3]  delay_ms

Returns  the retry time (Redis clock, ms); 0 when the entry is no longer pending in the
         group (acknowledged elsewhere, or the group was deleted): nothing was written
Atomic   the entry stays pending (so trim keeps it) and claim skips it until its time.
Cost     O(log R).
]]
--- @include "util"
local OUT, RETRY = KEYS[1], KEYS[2]
local group, id, delay_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local p = redis.call('XPENDING', OUT, group, id, id, 1)[1]
if not p then return 0 end
local due = now_ms() + delay_ms
redis.call('ZADD', RETRY, due, id)
return due
