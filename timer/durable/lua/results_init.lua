--[[ results_init: start a shard's results table (format 3), unless it has one.

init runs it on every shard of a new format-3 namespace (with ARGV[2] = 1: its fine
buckets are lists too, see the lazy buckets in _lib), migrate on every shard of an
older one (with ARGV[1], so outcomes retained as P:r:<id> strings are still read until
they have expired; its fine buckets stay sets). Run again, it changes nothing: the
table's state is never reset.

KEYS[1]  P:rx
ARGV[1]  until: epoch ms up to which a P:r:<id> string is still looked for; '' for none
ARGV[2]  1: fine buckets are lists (F); '' : sets

Returns  1 if it started the table, 0 if the shard had one.
Cost     O(1).
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'L', '0', 'S', '0', 'N', '0')
if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'G', ARGV[1]) end
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'F', '1') end
return 1
