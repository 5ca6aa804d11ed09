--[[ fence: the lease check every leader script makes first.
]]

-- Fail with FENCED unless `worker` holds the shard's lease at `epoch`.
local function check_fence(lease_key, epoch_key, worker, epoch)
  if redis.call('GET', lease_key) ~= worker or redis.call('GET', epoch_key) ~= epoch then
    return redis.error_reply('FENCED worker ' .. worker .. ' does not hold this shard at epoch ' .. epoch)
  end
  return nil
end

-- Fail with OOM, before anything is written, when Redis is out of memory (maxmemory
-- reached, noeviction). Redis checks a script's memory only at a command that may grow
-- it (SET, XADD...) and only until the script first writes: a decision whose first
-- write is a bucket's LPOP (sweep) went through whole under OOM. ZADD XX of a member
-- that is no bucket number checks memory and changes nothing, on a key the script
-- declares.
local function refuse_when_out_of_memory(buckets_key)
  redis.call('ZADD', buckets_key, 'XX', 0, 'oom?')
end
