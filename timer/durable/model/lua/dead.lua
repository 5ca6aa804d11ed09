--[[ dead: a handler failed its last attempt; move the entry to the dead letters.

KEYS[1]  P:out (STREAM)    KEYS[2]  P:retry:<group> (ZSET)    KEYS[3]  P:dead (STREAM)
KEYS[4]  P:err:<group> (HASH: entry id -> its earlier failed attempts, see retry.lua)
ARGV[1]  group    ARGV[2]  entry id    ARGV[3]  consumer    ARGV[4]  attempts
ARGV[5]  the last error (text)

Returns  the dead letter's id; '' when the entry was no longer pending in the group (it
         was acknowledged elsewhere): nothing was written
Atomic   the acknowledgement and the dead letter are one step: a crash leaves the entry
         either pending (to be retried) or dead-lettered, never lost or both.
Cost     O(1) (XADD, XACK, HGET and HDEL of its kept errors).
Fields   group, entry, consumer, attempts, error, failed (ms), earlier (the earlier
         attempts' errors as retry.lua kept them, msgpack; absent if none), then the
         outcome's own fields (i and r, see include/records.lua) while the stream still
         holds it.
]]
--- @include "util"
local OUT, RETRY, DEAD, ERR = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, id, consumer, attempts, error_text = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not redis.call('XPENDING', OUT, group, id, id, 1)[1] then return '' end
local fields = {'group', group, 'entry', id, 'consumer', consumer, 'attempts', attempts,
  'error', error_text, 'failed', istr(now_ms())}
local earlier = redis.call('HGET', ERR, id)
if earlier then
  fields[#fields + 1] = 'earlier'
  fields[#fields + 1] = earlier
  redis.call('HDEL', ERR, id)
end
local entry = redis.call('XRANGE', OUT, id, id)[1]
if entry then
  for _, v in ipairs(entry[2]) do fields[#fields + 1] = v end
end
local dead_id = redis.call('XADD', DEAD, '*', unpack(fields))
redis.call('XACK', OUT, group, id)
redis.call('ZREM', RETRY, id)
return dead_id
