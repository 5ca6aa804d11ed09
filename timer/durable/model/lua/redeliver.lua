--[[ redeliver: put a dead letter back in front of its consumer group.

KEYS[1]  P:dead (STREAM)   KEYS[2]  P:out (STREAM)
ARGV[1]  the dead letter's id

Returns  the new outcome entry's id; '' when there is no such dead letter, or it holds
         no outcome (its entry was trimmed before it died): nothing was written
Atomic   the dead letter leaves and the outcome re-enters in one step.
Cost     O(1).
Fields   the outcome's fields (i and r: see the outcome stream entry in
         include/records.lua), plus only = the group (every other group acknowledges it
         unseen) and from = the entry id it first had (its idempotency key).
]]
-- (no includes: it uses no shared helper)
local DEAD, OUT = KEYS[1], KEYS[2]
local dead_id = ARGV[1]
local letter = redis.call('XRANGE', DEAD, dead_id, dead_id)[1]
if not letter then return '' end
local f = {}
for i = 1, #letter[2], 2 do f[letter[2][i]] = letter[2][i + 1] end
local only, from = f['group'], f['from'] or f['entry']
if not f['r'] then return '' end
local new_id = redis.call('XADD', OUT, '*', 'i', f['i'], 'r', f['r'], 'only', only,
  'from', from)
redis.call('XDEL', DEAD, dead_id)
return new_id
