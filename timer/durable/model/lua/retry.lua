--[[ retry: a handler failed; hand the entry back after a delay (any consumer may take it).

KEYS[1]  P:out (STREAM)    KEYS[2]  P:retry:<group> (ZSET: entry id -> retry time, ms)
KEYS[3]  P:err:<group> (HASH: entry id -> its failed attempts so far, msgpack)
ARGV[1]  group             ARGV[2]  entry id        ARGV[3]  delay_ms
ARGV[4]  the attempt that failed    ARGV[5]  its error (text; '' for a handler's Later,
         which is not a failure: nothing is kept)
ARGV[6]  1 = this delivery does not count: it was given back unsent (an event stream's
         client left), so the next one is the same attempt; 0 = it counts

Returns  the retry time (Redis clock, ms); 0 when the entry is no longer pending in the
         group (acknowledged elsewhere, or the group was deleted): nothing was written
Atomic   the entry stays pending (so trim keeps it) and claim skips it until its time;
         a Later (no error) finding the entry at time 0 (a look asked for before the
         Later was recorded: the Celery task it waits for ended first) is due at once;
         its error is kept with it ([attempt, failed ms, error], the last KEEP of them,
         one per attempt: a call sent again after its reply was lost keeps it once),
         for the dead letter it may become (dead.lua) or until it is acknowledged.
Cost     O(log R) and the entry's kept errors (at most KEEP).
]]
--- @include "util"
local OUT, RETRY, ERR = KEYS[1], KEYS[2], KEYS[3]
local group, id, delay_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local attempt, error_text, uncounted = tonumber(ARGV[4]), ARGV[5], ARGV[6] == '1'
local KEEP, KEEP_MS = 10, 7 * 86400000
local p = redis.call('XPENDING', OUT, group, id, id, 1)[1]
if not p then return 0 end
local now = now_ms()
local due = now + delay_ms
if error_text == '' and tonumber(redis.call('ZSCORE', RETRY, id) or '-1') == 0 then
  due = now  -- a Later whose look came first: the task it waits for ended already
end
redis.call('ZADD', RETRY, due, id)
if uncounted and tonumber(p[4]) > 0 then  -- its owner kept; the next claim adds it back
  redis.call('XCLAIM', OUT, group, p[2], 0, id, 'RETRYCOUNT', tonumber(p[4]) - 1, 'JUSTID')
end
if error_text ~= '' then
  local kept = redis.call('HGET', ERR, id)
  local errors = kept and cmsgpack.unpack(kept) or {}
  local last = errors[#errors]
  -- this attempt's error sent again (its first reply lost): kept once
  if last and last[1] == attempt then errors[#errors] = nil end
  errors[#errors + 1] = {attempt, now, error_text}
  while #errors > KEEP do table.remove(errors, 1) end
  redis.call('HSET', ERR, id, cmsgpack.pack(errors))
  redis.call('PEXPIRE', ERR, KEEP_MS)  -- an entry lost with its group cannot keep it forever
end
return due
