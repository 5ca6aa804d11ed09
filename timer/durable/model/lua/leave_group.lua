--[[ leave_group: a consumer stopping for good removes itself if it owes nothing.

KEYS[1]  P:out (STREAM)
ARGV[1]  group    ARGV[2]  consumer

Returns  1 removed; 0 kept (entries are still pending for it, e.g. waiting for a retry:
         deleting it would make them unclaimable), or no such group
Atomic   no entry can be delivered to it between the check and the removal.
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
local OUT = KEYS[1]
local group, consumer = ARGV[1], ARGV[2]
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', OUT)
if not ok then return 0 end
local found = false
for _, g in ipairs(groups) do
  for i = 1, #g, 2 do
    if g[i] == 'name' and g[i + 1] == group then found = true end
  end
end
if not found then return 0 end
if redis.call('XPENDING', OUT, group, '-', '+', 1, consumer)[1] then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', OUT, group, consumer) >= 0 and 1 or 0
