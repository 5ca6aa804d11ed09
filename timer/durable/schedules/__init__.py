"""Recurring schedules: when their occurrences fall, their records and the
leader's plans, and the clients' operations on them. Over ``model``, ``timers``,
``groups`` and ``shards``."""
