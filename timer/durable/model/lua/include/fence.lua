--[[ fence: the lease check every leader script makes first.
]]

-- Fail with FENCED unless `worker` holds the shard's lease at `epoch`.
local function check_fence(lease_key, epoch_key, worker, epoch)
  if redis.call('GET', lease_key) ~= worker or redis.call('GET', epoch_key) ~= epoch then
    return redis.error_reply('FENCED worker ' .. worker .. ' does not hold this shard at epoch ' .. epoch)
  end
  return nil
end
