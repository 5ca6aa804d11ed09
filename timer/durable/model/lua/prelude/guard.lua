--[[ guard: put in front of every script by scripts.inline, before its includes.

On a Redis Cluster, Redis checks each key a script touches as it touches it: a key of a
slot being migrated that is not on this node any more (or not yet anywhere) stops the
script with "non local key" there, after whatever it had written. So before anything
else every script reads P:guard, a key of its shard's slot that nothing ever writes:
while the slot is migrating it is missing here, and the script stops before its first
write; otherwise every key of the slot is local, and nothing can stop it half-way. P is
the hash-tagged prefix that begins KEYS[1] (every script's first key is its shard's).
Clients never send a script with ASKING (timer/redis/cluster_route.py): on the importing
node a key not moved yet would read as missing. On one server this is one EXISTS.
]]
do
  local tag = string.match(KEYS[1] or '', '^{[^}]*}')
  if tag then redis.call('EXISTS', tag .. ':guard') end
end
