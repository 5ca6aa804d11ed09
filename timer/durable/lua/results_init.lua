--[[ results_init: start a shard's results table (format 3), unless it has one; say
which outcome stream entries the shard writes (format 4).

init runs it on every shard of a new namespace (with ARGV[2] = 1: its fine buckets are
lists too, see the lazy buckets in include/buckets.lua), migrate on every shard of an older one (with
ARGV[1] from format 1 or 2, so outcomes retained as P:r:<id> strings are still read
until they have expired; its fine buckets stay sets). Run again, it changes nothing but
E: the table's state is never reset, and E, once set, stays.

KEYS[1]  P:rx
ARGV[1]  until: epoch ms up to which a P:r:<id> string is still looked for; '' for none
ARGV[2]  1: fine buckets are lists (F); '' : sets
ARGV[3]  1: outcome stream entries are format 4's (E: id and outcome record, see include/records.lua);
         '' : leave E as it is

Returns  1 if it started the table, 0 if the shard had one.
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
local started = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'L', '0', 'S', '0', 'N', '0')
  if ARGV[1] ~= '' then redis.call('HSET', KEYS[1], 'G', ARGV[1]) end
  if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'F', '1') end
  started = 1
end
if ARGV[3] == '1' then redis.call('HSET', KEYS[1], 'E', '1') end
return started
