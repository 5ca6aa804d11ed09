--[[ ack: a consumer group's entries handled: acknowledged, and the errors kept of their
failed attempts dropped.

KEYS[1]  P:out        STREAM  the shard's outcomes
KEYS[2]  P:err:<g>    HASH    the group's entries that failed: entry id -> errors
ARGV[1]  group
ARGV[2]  m            how many entry ids follow to acknowledge
ARGV[3..2+m]          the entry ids to acknowledge
ARGV[3+m..]           the entry ids whose kept errors to drop (attempts after a failure)

Returns  how many of the m were pending, and are acknowledged now.
Durable  an acknowledgement is replicated as what it wrote, so a durability wait after it
         covers it. A call that acknowledges none (each acknowledged already: sent again
         because the wait after the first did not confirm it, or after a failover) would
         write nothing, and a wait after it would cover nothing; so it writes a field of
         KEYS[2] and removes it again: replicated, it makes the wait cover every write the
         master made before, the first acknowledgement among them.
Atomic   the acknowledgement and the errors' removal together.
Cost     O(m + k) for m ids acknowledged and k errors dropped.
]]
-- (no includes: it uses no shared helper)
local OUT, ERRORS = KEYS[1], KEYS[2]
local group, m = ARGV[1], tonumber(ARGV[2])
local FIRST_ID = 3  -- ARGV[3..]: the entry ids, then those whose errors to drop
local ids, failed = {}, {}
for i = FIRST_ID, #ARGV do
  if i < FIRST_ID + m then ids[#ids + 1] = ARGV[i] else failed[#failed + 1] = ARGV[i] end
end
local acked = redis.call('XACK', OUT, group, unpack(ids))
if #failed > 0 then redis.call('HDEL', ERRORS, unpack(failed)) end
if acked == 0 then
  redis.call('HSET', ERRORS, '~', 1)
  redis.call('HDEL', ERRORS, '~')
end
return acked
