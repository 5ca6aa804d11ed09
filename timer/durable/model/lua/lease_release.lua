--[[ lease_release: give a lease back (graceful stop or rebalancing).

KEYS[1]  P:lease    KEYS[2]  P:epoch    KEYS[3]  P:handed
ARGV[1]  worker id  ARGV[2]  epoch

Returns  1 released (and P:handed = epoch: the next holder's is a handover, not a
         takeover); 0 not held at that epoch (nothing changed)
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
local LEASE, EPOCH, HANDED = KEYS[1], KEYS[2], KEYS[3]
local worker, epoch = ARGV[1], ARGV[2]
if redis.call('GET', LEASE) == worker and redis.call('GET', EPOCH) == epoch then
  redis.call('DEL', LEASE)
  redis.call('SET', HANDED, epoch)
  return 1
end
return 0
