"""Three ways a consumer group could deliver, measured by server CPU (``benchmarks.capacity``'s
``delivery_ways``): the group's pending list, what tickwheel does; ``NOACK`` with the
consumer's own record written by the same script; ``NOACK`` alone."""

from __future__ import annotations

import msgpack
import redis

from ._meter import Meter

# A consumer's read with its own record of what it holds, in one atomic step: the group
# delivers without a pending list (NOACK) and the script notes each entry delivered.
READ_AND_RECORD = """
local got = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'NOACK',
  'STREAMS', KEYS[1], '>')
if not got then return got end
local held = {}
for _, e in ipairs(got[1][2]) do held[#held + 1] = e[1]; held[#held + 1] = ARGV[2] end
redis.call('HSET', KEYS[2], unpack(held))
return got
"""


def delivery_ways(r: redis.Redis, n: int) -> dict[str, float]:
    """Server CPU per entry delivered and settled, by three ways a group could deliver
    ``n`` outcome-shaped entries (read 100 a call, settled one call a read, so the round
    trips are the same): the group's pending list (``XREADGROUP`` + ``XACK``, what
    tickwheel does: at least once); ``NOACK`` with the consumer's own record of what it
    holds, written by the same script (``HSET``, then ``HDEL`` to settle: at least once
    too); ``NOACK`` alone (nothing held: at most once). For the design note on the
    append-only file's share, which the group's per-entry ``XCLAIM`` dominates."""
    read_and_record = r.register_script(READ_AND_RECORD)
    # an outcome entry's shape: its id, and its result packed (~30 bytes)
    result = msgpack.packb(["expired", 1_764_600_000_000, 1_764_600_000_001, 0, {"job": 1}])
    out: dict[str, float] = {}
    for way in ("group", "noack_recorded", "noack_alone"):
        stream, held = f"delivery:{way}", f"delivery:{way}:held"
        pipe = r.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(stream, {"i": f"job:{i}", "r": result})
            if i % 1_000 == 999:
                pipe.execute()
        pipe.execute()
        r.xgroup_create(stream, "g", id="0")
        meter = Meter(r)
        meter.start()
        settled = 0
        while True:
            if way == "noack_recorded":
                got = read_and_record(keys=[stream, held], args=["g", "c", 100])
            else:
                got = r.xreadgroup("g", "c", {stream: ">"}, count=100, noack=way == "noack_alone")
            if not got:
                break
            ids = [entry[0] for entry in got[0][1]]
            if way == "group":
                r.xack(stream, "g", *ids)
            elif way == "noack_recorded":
                r.hdel(held, *ids)
            settled += len(ids)
        out[f"usec_per_entry_{way}"] = round(meter.cpu_us() / n, 2)
        r.delete(stream, held)
        if settled != n:
            raise RuntimeError(f"{way}: {settled} of {n} entries delivered")
    return out
