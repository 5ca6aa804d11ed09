--[[ redeliver: put a dead letter back in front of its consumer group.

KEYS[1]  P:dead (STREAM)   KEYS[2]  P:out (STREAM)
ARGV[1]  the dead letter's id

Returns  the new outcome entry's id; '' when there is no such dead letter, or it holds
         no outcome (its entry was trimmed before it died): nothing was written
Atomic   the dead letter leaves and the outcome re-enters in one step.
Cost     O(1).
Fields   the outcome's fields (in the layout it was written in: see the outcome stream
         entry in _lib), plus only = the group (every other group acknowledges it
         unseen) and from = the entry id it first had (its idempotency key).
]]
local letter = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not letter then return '' end
local f = {}
for i = 1, #letter[2], 2 do f[letter[2][i]] = letter[2][i + 1] end
local fields
if f['r'] then  -- format 4: the id and the outcome record
  fields = {'i', f['i'], 'r', f['r']}
elseif f['id'] then
  fields = {'id', f['id'], 'outcome', f['outcome'], 'deadline', f['deadline'],
    'decided', f['decided'], 'payload', f['payload']}
else
  return ''
end
fields[#fields + 1] = 'only'
fields[#fields + 1] = f['group']
fields[#fields + 1] = 'from'
fields[#fields + 1] = f['from'] or f['entry']
local new_id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[1])
return new_id
