--[[ results_init: start a shard's results table, unless it has one.

init runs it on every shard of a new namespace. Run again, it changes nothing: the
table's state is never reset.

KEYS[1]  P:rx

Returns  1 if it started the table, 0 if the shard had one.
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
local RX = KEYS[1]
if redis.call('EXISTS', RX) == 1 then return 0 end
redis.call('HSET', RX, 'L', '0', 'S', '0', 'N', '0')
return 1
