--[[ touch: a consumer says it is still handling entries (resets their idle time).

KEYS[1]  P:out (STREAM)
ARGV[1]  group    ARGV[2]  consumer    ARGV[3..]  entry ids it is handling

Returns  the ids another consumer has taken over (this one seemed dead): they are left
         alone. Ids no longer pending at all (acknowledged meanwhile) are not returned.
Atomic   an entry another consumer took is not taken back, and the delivery count of the
         touched ones does not change (XCLAIM JUSTID).
Cost     O(N) for N ids.
]]
-- (no includes: it uses no shared helper)
local out, group, me = KEYS[1], ARGV[1], ARGV[2]
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', out, group, ARGV[i], ARGV[i], 1)[1]
  if p and p[2] == me then
    redis.call('XCLAIM', out, group, me, 0, ARGV[i], 'JUSTID')
  elseif p then
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
