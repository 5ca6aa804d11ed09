"""The durable data model: the only place that knows how timers live in Redis.

No I/O and no redis-py here; the clients (``timer.client``, ``timer.aio``) run what
this layer builds. Its modules (docs/data-model.md says what is stored where):

    keys         the key and channel format (the Lua builds its few keys the same way)
    codec        msgpack payloads and records (nothing is ever unpickled)
    models       the values: Timer, TimerInfo, Outcome, Meta, lease/fire/sweep results
    entries      reading records, outcome entries, dead letters and events
    checks       the argument checks every public entry shares
    durations    durations as text (30s, 1h30m), read and written
    scripts      the Lua scripts of lua/ by name, and ErrorCode: the one enum of their errors
    fields       a timer's fields (and a schedule's spec) declared once: types, defaults,
                 limits, record slots, help; the HTTP schema and docs table come from it
    items        the gate a timer passes: its fields checked and packed for schedule.lua
    steps        the steps an operation yields to its driver, and Run
    namespace    a namespace as the builders see it: keys, shape (meta), limits
    calls        per client script a builder and a parser
    ops          every client operation as a generator of steps, for both clients
    setup        a namespace made (after the server's checks), its meta read, converted
    shard_calls  the leader's scripts: leases, fire, sweep, trim, the results table
    shard_ops    the worker's side: membership, events, a shard's reads
    groups       consumer groups on the outcome streams; reader: one consumer's policy;
                 group_calls: their script calls and replies
    group_admin  the operator's side of groups and dead letters
    views        what an operator sees: history, recent outcomes, what is due, stats
    finding      finding timers by pattern, state and deadline, a bounded scan at a time
    recurrence   when a schedule's occurrences fall (cron or interval, any time zone)
    schedule_records  recurring schedules: the record, the leader's plans and arming
    schedule_ops      the clients' operations on schedules (create, pause, trigger, list)
"""
