"""The tickwheel worker process: membership, shard leases, per-shard reaper, recovery.

Not built yet (see the workers issue); the package exists so the layout is fixed.
"""
