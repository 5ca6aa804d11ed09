--[[ rate_take: one start under a key's rate (per-key rates), as GCRA counts it.

A handler runner with a rate (`tickwheel handle --rate payload.tenant=5/s`) takes one
before each handler of that key starts. The key holds the theoretical arrival time
(TAT): a start is allowed when TAT is at most `burst - 1` intervals ahead of now, and
moves TAT one interval on. Equivalent to a token bucket of `burst` tokens filled at
1000 / interval_ms a second, in one value.

KEYS[1]  {tw:<ns>}:rate:<length>:<group>:<limit>:<value>   STRING  TAT (Redis ms)
ARGV[1]  interval_ms (1000 / the rate a second)   ARGV[2]  burst (>= 1)

Returns  0   allowed: the handler may start now
         ms  refused: the next start of this key is allowed in this many ms
Cost     O(1).
]]
--- @include "util"
local RATE = KEYS[1]
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local tat = tonumber(redis.call('GET', RATE) or now)
if tat < now then tat = now end
local ahead = tat - now - interval * (burst - 1)
if ahead > 0 then return math.ceil(ahead) end
local next_tat = tat + interval
redis.call('SET', RATE, string.format('%.3f', next_tat), 'PX', math.ceil(next_tat - now) + 1000)
return 0
