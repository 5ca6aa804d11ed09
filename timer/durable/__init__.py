"""The durable data model: the only place that knows how timers live in Redis.

No I/O and no redis-py here; the clients (``timer.client``, ``timer.aio``) run what
this layer builds.

    keys     the key and channel format (the Lua builds its few keys the same way)
    codec    msgpack payloads and records (nothing is ever unpickled)
    models   the values: Timer, TimerInfo, Outcome, Trimmed, Meta, lease/fire/sweep results
    scripts  the Lua scripts of lua/ by name, and ErrorCode: the one enum of their errors
    calls    per script a builder (typed arguments -> KEYS/ARGV) and a parser (reply ->
             result); the steps an operation yields
    ops      every operation (schedule … stats, the consumer-group reader, a leader's
             reads) as a generator of steps, shared by the sync and asyncio clients
"""
