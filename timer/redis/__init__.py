"""What both clients share at the edge to Redis: a URL made into a redis-py client
(``connections``), redis-py's errors made tickwheel's and URLs masked (``store``), where a
Cluster's script calls go under a failover or a resharding (``cluster_route``), and where a
client finds Redis when given no URL (``local_server``).

The drivers that use them are the clients' own: ``timer.client.driver`` (blocking) and
``timer.aio.driver`` (asyncio).
"""
