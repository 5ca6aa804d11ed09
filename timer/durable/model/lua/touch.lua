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
local OUT = KEYS[1]
local group, me = ARGV[1], ARGV[2]
local FIRST_ID = 3  -- ARGV[3..]: the entry ids
local lost = {}
for i = FIRST_ID, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', OUT, group, id, id, 1)[1]
  if p and p[2] == me then
    redis.call('XCLAIM', OUT, group, me, 0, id, 'JUSTID')
  elseif p then
    lost[#lost + 1] = id
  end
end
return lost
