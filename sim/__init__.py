"""A deterministic simulation of tickwheel's whole protocol on virtual time.

FoundationDB and TigerBeetle (its VOPR) run their real code against a simulated network,
disk and clock, one seeded generator choosing every step, and replay any failure from its
seed. tickwheel can do the same because every change of state is a Lua script: here the
real scripts run on an in-process store (:class:`timer.testing.store.FakeStore`, fakeredis
with the fixes it needs), and the real worker and handler runner are stepped on a
:class:`timer.clock.VirtualTime` that moves only when the simulation says so.

One run (an *example*) is a sequence of steps chosen by hypothesis's stateful testing
from one seed: clients schedule, cancel and complete timers; workers and handler runners
take a turn (``Worker.run_once``, a stepped ``Handlers.run``); time moves on; and faults
strike: a worker killed (its leases kept until they expire), a worker's clock stepped or
set running fast or slow, a process restarted under the id of one that is only paused (a
zombie), a pub/sub message lost, a handler runner killed in the middle of a handler,
and the store's own: a script call's connection cut before or after it took effect, and
a restart from the last fsync (appendfsync ``always`` or ``everysec``).
After every step the promises are checked against the store (:mod:`sim.checks`):

- no timer fires before its deadline, by the store's clock;
- a timer has one outcome at most;
- a fire lands only from the process that holds the shard's lease at the store's epoch;
- no handler runs an outcome past ``max_attempts``, and a retry waits its backoff;
- a shard's raised priorities are sent first (of what one turn's fire calls send);
- :mod:`sim.crossings`: never more handlers of a key running than its limit, with
  handlers that run across steps past their timeout; each schedule occurrence once, and
  none lost by its catch-up policy;

and at the end, with every process alive again and time moving on, every timer is
decided and every decided outcome handled at least once (or dead-lettered after its last
attempt). A failure prints the seed and the shortest sequence of steps hypothesis could
shrink it to; ``python -m sim --seed N`` replays it exactly.

``sim.plants`` holds bugs planted one at a time (a line of a script or of the runner
changed) that the simulation must find: the mutation tests of the simulation itself.
"""
