--[[ lease_release: give a lease back (graceful stop or rebalancing).

KEYS[1]  P:lease    KEYS[2]  P:epoch
ARGV[1]  worker id  ARGV[2]  epoch

Returns  1 released; 0 not held at that epoch (nothing changed)
Cost     O(1).
]]
-- (no includes: it uses no shared helper)
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
