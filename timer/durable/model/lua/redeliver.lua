--[[ redeliver: put a dead letter back in front of its consumer group.

KEYS[1]  P:dead (STREAM)   KEYS[2]  P:out (STREAM)
ARGV[1]  the dead letter's id

Returns  the new outcome entry's id; '' when there is no such dead letter, or it holds
         no outcome (its entry was trimmed before it died): nothing was written
Atomic   the dead letter leaves and the outcome re-enters in one step.
Cost     O(1).
Fields   the outcome's fields (i and r: see the outcome stream entry in
         include/records.lua), plus only = the group (every other group acknowledges it
         unseen), from = the entry id it first had (its idempotency key) and died = the
         attempts it failed before (msgpack [attempt, failed ms, error] as retry.lua keeps
         them, the last KEEP): its earlier letters' `died` and `earlier`, then its own
         last attempt. dead.lua copies the entry's fields, so a letter dead again keeps
         every earlier death's errors.
]]
-- (no includes: it uses no shared helper)
local KEEP = 10
local DEAD, OUT = KEYS[1], KEYS[2]
local dead_id = ARGV[1]
local letter = redis.call('XRANGE', DEAD, dead_id, dead_id)[1]
if not letter then return '' end
local f = {}
for i = 1, #letter[2], 2 do f[letter[2][i]] = letter[2][i + 1] end
local only, from = f['group'], f['from'] or f['entry']
if not f['r'] then return '' end
local died = f['died'] and cmsgpack.unpack(f['died']) or {}
for _, e in ipairs(f['earlier'] and cmsgpack.unpack(f['earlier']) or {}) do
  died[#died + 1] = e
end
died[#died + 1] = {tonumber(f['attempts']), tonumber(f['failed']), f['error']}
while #died > KEEP do table.remove(died, 1) end
local new_id = redis.call('XADD', OUT, '*', 'i', f['i'], 'r', f['r'], 'only', only,
  'from', from, 'died', cmsgpack.pack(died))
redis.call('XDEL', DEAD, dead_id)
return new_id
