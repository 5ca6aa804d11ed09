--[[ results_init: start a shard's results table (format 3), unless it has one.

init runs it on every shard of a new format-3 namespace, migrate on every shard of an
older one (with ARGV[1], so outcomes retained as P:r:<id> strings are still read until
they have expired). Run again, it changes nothing: the table's state is never reset.

KEYS[1]  P:rx
ARGV[1]  until: epoch ms up to which a P:r:<id> string is still looked for; '' for none

Returns  1 if it started the table, 0 if the shard had one.
Cost     O(1).
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'L', '0', 'S', '0', 'N', '0', 'G', ARGV[1])
else
  redis.call('HSET', KEYS[1], 'L', '0', 'S', '0', 'N', '0')
end
return 1
