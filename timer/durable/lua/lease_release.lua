--[[ lease_release: give a lease back (graceful stop or rebalancing).

KEYS[1]  P:lease    KEYS[2]  P:epoch    KEYS[3]  P:handed
ARGV[1]  worker id  ARGV[2]  epoch

Returns  1 released (and P:handed = epoch: the next holder's is a handover, not a
         takeover); 0 not held at that epoch (nothing changed)
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[3], ARGV[2])
  return 1
end
return 0
