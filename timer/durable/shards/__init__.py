"""A shard as its leader and the worker see it: the leader's scripts' calls
(leases, fire, sweep, trim, the results table, migration) and the worker's reads.
Over ``model`` only."""
