"""The durable data model: the only place that knows how timers live in Redis.

No I/O and no redis-py here; the clients (``timer.client``, ``timer.aio``) run what
this layer builds: an operation is a generator of steps (``model.steps``) a driver runs.
Its sub-packages (https://tickwheel.readthedocs.io/data-model/ says what is stored where), each
importing only those above it in this list; timers, groups and shards are at one level,
and none of the three imports another (a test holds both):

    model      what is stored and how: keys, codec, fields, models, entries, checks,
               durations, globs, steps, scripts (the Lua of lua/ by name), namespace
    timers     a timer's operations: items (the gate), calls, ops, finding
    groups     consumer groups on the outcome streams: calls, streams, reader (one
               consumer's policy), admin, dead (dead letters by filter)
    shards     a shard as its leader and the worker see it: calls (leases, fire, sweep,
               trim, migrate), ops (membership, events, a shard's reads)
    schedules  recurring schedules: recurrence (when they fall), records (the record,
               the leader's plans), ops (the clients' operations on them)
    admin      the operator's: setup (a namespace made, read, converted), server (what a
               server is asked before writing), views, history, search (of outcomes)

The doors' JSON shapes of these values are ``timer.shapes``.
"""
