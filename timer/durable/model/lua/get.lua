--[[ get: a timer's pending record or its retained outcome, read together.

KEYS[1]  P:t
ARGV[1]  P          ARGV[2]  id

Returns  {record or false, retained outcome or false}: the outcome is looked up only when
         no record is pending (in the results table).
Cost     O(1).
Keys built from P: P:rx, P:R:<b>.
]]
--- @include "results"
local TIMERS = KEYS[1]
local P, id = ARGV[1], ARGV[2]
local raw = redis.call('HGET', TIMERS, id)
if raw then return {raw, false} end
return {false, result_get(results_of(P), id)}
