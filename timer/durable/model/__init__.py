"""The data model: what is stored in Redis and how, and no operation on it.

Keys and channels, records and payloads (msgpack), the values the clients return, a
timer's fields declared once, the argument checks, the Lua scripts (``lua/``) by name,
the steps an operation yields to its driver, and a namespace as the builders see it. It
imports nothing of ``timer.durable``'s other sub-packages.
"""
