--[[ lease_renew: extend a lease the caller still holds at its epoch.

KEYS[1]  P:lease    KEYS[2]  P:epoch
ARGV[1]  worker id  ARGV[2]  epoch    ARGV[3]  ttl_ms

Returns  {1, now_ms}  renewed for ttl_ms from now
         {0, now_ms}  lost (expired, taken over, or another epoch): drop the shard at once
Cost     O(1).
]]
--- @include "util"
local LEASE, EPOCH = KEYS[1], KEYS[2]
local worker, epoch, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
if redis.call('GET', LEASE) == worker and redis.call('GET', EPOCH) == epoch then
  redis.call('PEXPIRE', LEASE, ttl_ms)
  return {1, istr(now)}
end
return {0, istr(now)}
