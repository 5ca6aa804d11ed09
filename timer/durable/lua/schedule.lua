--[[ schedule: create a timer once, or say what already exists under its id.

KEYS[1]  P:t         HASH  id -> record
KEYS[2]  P:buckets   ZSET  durable bucket n -> n * bucket_ms
KEYS[3]  P:r:<id>    STRING retained outcome of this id
ARGV[1]  P           shard prefix, e.g. {tw:default:3}
ARGV[2]  id
ARGV[3]  mode        'in' (ARGV[4] is a delay, ms) or 'at' (ARGV[4] is a deadline, epoch ms, Redis time)
ARGV[4]  delay_ms | deadline_ms
ARGV[5]  payload     msgpack bytes
ARGV[6]  need        distinct watch keys that complete the timer (>= 1)
ARGV[7]  bucket_ms   width of a durable bucket, ms
ARGV[8]  max_delay_ms  a deadline further than this from now is refused
ARGV[9]  events channel of the shard
ARGV[10] origin      an opaque token naming who created it (a batch, a Spark job); may be ''
ARGV[11] rearm       '1': an id whose outcome is retained is scheduled again (a new arming,
                     which will have its own outcome); '0': that outcome is returned
ARGV[12..] watch keys (deduplicated and sorted by the client; all route to this shard)

Returns  {'created', deadline_ms, now_ms}              this call created the timer
         {'pending', deadline_ms, created_ms, origin}  the same timer was already pending
         {'decided', outcome_record}           the id was decided and its outcome is retained
                                               (not with rearm: then it is created again)
Errors   CONFLICT  a pending timer with this id has another payload, watch list, need or deadline
         TOOFAR    the deadline is more than max_delay_ms from now
Atomic   one timer per id: creation, bucket and watch indexes are written together.
Cost     O(W) for W watch keys.
]]
local P, id, mode = ARGV[1], ARGV[2], ARGV[3]
local value, payload, need = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local bucket_ms, max_delay = tonumber(ARGV[7]), tonumber(ARGV[8])
local origin, rearm = ARGV[10], ARGV[11] == '1'
local watch = {}
for i = 12, #ARGV do
  watch[#watch + 1] = ARGV[i]
end

local retained = redis.call('GET', KEYS[3])
if retained and not rearm then
  return {'decided', retained}
end

local existing = redis.call('HGET', KEYS[1], id)
if existing then
  local rec = cmsgpack.unpack(existing)
  local same = rec.p == payload and rec.n == need and #rec.w == #watch
  if same then
    for i = 1, #watch do
      if rec.w[i] ~= watch[i] then same = false end
    end
  end
  if same and mode == 'at' and rec.d ~= value then same = false end
  if not same then
    return redis.error_reply('CONFLICT timer ' .. id .. ' is pending with other parameters')
  end
  return {'pending', istr(rec.d), istr(rec.c), rec.s or ''}
end

local now = now_ms()
local deadline, too_far = deadline_of(mode, value, now, max_delay)
if too_far then return too_far end
if retained then
  redis.call('DEL', KEYS[3])  -- re-armed: the old outcome stays in the stream only
end

redis.call('HSET', KEYS[1], id, cmsgpack.pack({d = deadline, p = payload, w = watch, n = need, g = {}, c = now, s = origin}))
index_bucket(P, KEYS[2], id, deadline, bucket_ms)
for _, k in ipairs(watch) do
  redis.call('SADD', watch_key(P, k), id)
end
redis.call('PUBLISH', ARGV[9], 'S ' .. istr(deadline) .. ' ' .. id)
return {'created', istr(deadline), istr(now)}
