--[[ retry: a handler failed; hand the entry back after a delay (any consumer may take it).

KEYS[1]  P:out (STREAM)    KEYS[2]  P:retry:<group> (ZSET: entry id -> retry time, ms)
ARGV[1]  group             ARGV[2]  entry id        ARGV[3]  delay_ms

Returns  the retry time (Redis clock, ms); 0 when the entry is no longer pending in the
         group (acknowledged elsewhere, or the group was deleted): nothing was written
Atomic   the entry stays pending (so trim keeps it) and claim skips it until its time.
Cost     O(log R).
]]
--- @include "util"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)[1]
if not p then return 0 end
local due = now_ms() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], due, ARGV[2])
return due
