--[[ read: new outcomes for a consumer of a group, exactly up to a count, across shards.

KEYS[1]  P:out (STREAM) of the shard read first, then KEYS[2..] the other shards' P:out, in
         the order to read them (the caller turns the first, so a small count reaches every
         shard in turn)
ARGV[1]  group    ARGV[2]  consumer    ARGV[3]  count: at most this many in all

Returns  per entry read {key index, id, fields}: it is now pending for `consumer` (its
         first delivery). Nothing: the streams held nothing new for the group.
Atomic   XREADGROUP's COUNT applies to each stream, so one read of every stream takes up
         to count from each; this one reads stream by stream what is still missing, and
         no entry is read that is not returned.
Cost     O(count) plus one XREADGROUP per stream until count is reached. One server only:
         a Redis Cluster reads one stream at a time from the client.
]]
-- (no includes: it uses no shared helper)
local group, me, left = ARGV[1], ARGV[2], tonumber(ARGV[3])
local got = {}
for k = 1, #KEYS do
  if left <= 0 then break end
  local reply = redis.call('XREADGROUP', 'GROUP', group, me, 'COUNT', left, 'STREAMS', KEYS[k], '>')
  if reply then
    for _, entry in ipairs(reply[1][2]) do
      got[#got + 1] = {k, entry[1], entry[2]}
      left = left - 1
    end
  end
end
return got
