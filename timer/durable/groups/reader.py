"""GroupReader: one consumer of a consumer group, the one reading policy (sans-I/O).

Both ways of consuming outcomes run on it: ``TimerClient.outcomes()`` (``run``) and
the handler runner (``Handlers``, through ``ConsumerGroup``, which calls ``start``,
``poll``, ``idle`` and ``touch`` between its own work). So take-back-own, read, claim
and touch exist once, with one set of timings, all derived from ``reclaim_idle_ms``:

- ``start``: this consumer's own unacknowledged entries (a restart under the same
  name), at once, whatever their idle time.
- ``poll``: every ``claim_every_s`` (a quarter of ``reclaim_idle_ms``, at most 250 ms)
  one page of claims: the entries whose retry time has come, then the entries of other
  consumers idle past ``reclaim_idle_ms`` (presumed dead), the scan going on from where
  the last page ended. Every ``own_every_s`` (half of it), when the caller says which
  entries it holds, its own entries idle past it and not held: a read or claim whose
  reply was lost, an acknowledgement that failed. Then new entries, waiting at most
  until the next claim is due.
- ``touch``: entries still being handled get their idle time reset (a caller that
  holds entries calls it every ``touch_every_s``, a third of ``reclaim_idle_ms``), so
  a long handler is not presumed dead.
- ``idle``: nothing new, nothing to claim on a whole scan, no retry waiting.

The Redis side of each step (one atomic script per shard) is in :mod:`.streams`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ...errors import NotFound
from ..model import steps
from ..model.checks import check_bool, check_int
from ..model.namespace import Namespace
from ..model.steps import Op
from . import streams as group_ops
from .streams import Delivery

Held = Callable[[], Collection[tuple[int, str]]]  # (shard, entry id) of entries in hand


class GroupReader:
    """The reading policy of one consumer of ``group``; see the module's docstring.

    ``held`` (None: the caller keeps no account) says which entries the caller holds;
    with it, the reader takes back its own entries that went idle without being held.
    """

    def __init__(
        self,
        ns: Namespace,
        group: str,
        consumer: str,
        *,
        reclaim_idle_ms: int,
        per_stream: bool,
        held: Held | None = None,
    ) -> None:
        self.ns = ns
        self.group = group
        self.consumer = consumer
        self.reclaim_idle_ms = reclaim_idle_ms
        self.per_stream = per_stream  # a Redis Cluster: streams are read one at a time
        self.held = held
        idle_s = reclaim_idle_ms / 1000
        self.claim_every_s = max(0.01, min(0.25, idle_s / 4))
        self.own_every_s = max(0.05, idle_s / 2)
        self.touch_every_s = max(0.01, idle_s / 3)
        self.shards = list(range(ns.meta.shards))
        self._cursors = dict.fromkeys(self.shards, "-")
        self._first = 0  # the shard new entries are read from first (rotated)
        # when the next claims are due (monotonic s on the driver's clock, which the
        # first poll asks for): claims at once, its own lost entries after own_every_s
        self._next_claim = 0.0
        self._next_own: float | None = None
        self.start_at = "0"  # where ensure last started the group: so it is made again
        self.groups_created_again = 0  # times poll found the group gone and made it again

    @classmethod
    def of(
        cls,
        ns: Namespace,
        group: object,
        consumer: object,
        *,
        reclaim_idle_ms: object,
        per_stream: bool,
        held: Held | None = None,
    ) -> GroupReader:
        """A reader, every argument checked before anything is written."""
        group, consumer = group_ops.check_group(group, consumer)
        idle = check_int("reclaim_idle_ms", reclaim_idle_ms, 0, 2**53)
        return cls(ns, group, consumer, reclaim_idle_ms=idle, per_stream=per_stream, held=held)

    def ensure(self, *, start: str = "0") -> Op[None]:
        """Create the group on every shard's stream unless it exists (``$``: only new)."""
        self.start_at = start
        yield from group_ops.ensure_groups(self.ns, self.group, start=start)

    def start(self, count: int) -> Op[list[Delivery]]:
        """This consumer's own pending entries, every one (a restart under its name)."""
        return (yield from self._scan(count, owner=self.consumer, min_idle_ms=0))

    def poll(self, count: int, block_ms: int | None) -> Op[list[Delivery]]:
        """Up to ``count`` deliveries: claims whose time has come, then new entries
        (waiting up to ``block_ms``, None: not at all, and never past the next claim).
        Only a blocked read's wake-up, one entry from each shard that has one at that
        instant, can hand out more (up to the number of shards).

        A group gone from a stream (a server restart that lost what came after its last
        fsync, the group's creation among it; the stream kept) is created again, from
        where ``ensure`` started it, and counted in ``groups_created_again``: its outcomes
        are delivered again (at least once), none is left unread."""
        try:
            return (yield from self._poll(count, block_ms))
        except NotFound as exc:
            if exc.code != "NOGROUP":
                raise
            yield from self.ensure(start=self.start_at)
            self.groups_created_again += 1
            return []

    def _poll(self, count: int, block_ms: int | None) -> Op[list[Delivery]]:
        got: list[Delivery] = []
        clock = yield steps.Clock()
        now = clock.monotonic()
        if self._next_own is None:
            self._next_own = now + self.own_every_s
        if now >= self._next_claim:
            got += yield from self._claim_page(count)
            self._next_claim = clock.monotonic() + self.claim_every_s
        if self.held is not None and now >= self._next_own and len(got) < count:
            got += yield from self._lost_own(count - len(got), also_held=got)
        free = count - len(got)
        if free > 0:
            wait = block_ms
            if got:
                wait = None
            elif wait is not None:
                until_claim = int((self._next_claim - clock.monotonic()) * 1000)
                wait = max(1, min(wait, until_claim))
            got += yield from self.read(free, wait)
        return got

    def read(self, count: int, block_ms: int | None) -> Op[list[Delivery]]:
        """Up to ``count`` new entries, shard by shard, from a first shard that turns at
        each read (so small reads reach every shard), waiting up to ``block_ms``."""
        first, self._first = self._first, self._first + 1
        return (
            yield from group_ops.read_new(
                self.ns,
                self.group,
                self.consumer,
                count=count,
                block_ms=block_ms,
                per_stream=self.per_stream,
                first=first,
            )
        )

    def idle(self) -> Op[tuple[bool, list[Delivery]]]:
        """(True if nothing is left to do, else what a whole scan of claims found). A
        retry waiting for its time is something left to do."""
        got = yield from self._scan(100, owner="", min_idle_ms=self.reclaim_idle_ms)
        self._next_claim = (yield steps.Clock()).monotonic() + self.claim_every_s
        if got:
            return False, got
        return (yield from group_ops.retrying(self.ns, self.group)) == 0, []

    def touch(self, deliveries: list[Delivery]) -> Op[list[Delivery]]:
        """Reset the idle time of entries still in hand; those another consumer has
        taken over meanwhile."""
        return (yield from group_ops.touch(self.consumer, deliveries))

    def run(self, *, count: int, block_ms: int, stop_when_idle: bool) -> Op[None]:
        """Emit a :class:`Delivery` for each outcome, forever, or with ``stop_when_idle``
        until nothing is left (``TimerClient.outcomes``). Run ``ensure`` first."""
        for d in (yield from self.start(count)):
            yield steps.Emit(d)
        while True:
            got = yield from self.poll(count, None if stop_when_idle else block_ms)
            if not got and stop_when_idle:
                done, got = yield from self.idle()
                if done:
                    return
                if not got:  # a retry waits for its time
                    yield steps.Sleep(group_ops.POLL_S)
            for d in got:
                yield steps.Emit(d)

    # -- claims ---------------------------------------------------------------------------

    def _claim_page(self, count: int) -> Op[list[Delivery]]:
        got, nxt = yield from group_ops.claim(
            self.ns,
            self.group,
            self.consumer,
            self._cursors,
            count=count,
            min_idle_ms=self.reclaim_idle_ms,
        )
        self._cursors = {s: nxt.get(s) or "-" for s in self.shards}
        return got

    def _lost_own(self, count: int, also_held: list[Delivery]) -> Op[list[Delivery]]:
        """Our own entries idle past ``reclaim_idle_ms`` that the caller does not hold.
        Those in hand are touched, so they never go that idle, unless the process stalls
        that long between two of its calls: so "held" is what the caller holds before the
        claim or after it (an entry acknowledged and let go meanwhile was pending at the
        claim), and what this poll claimed a moment before (``also_held``, not yet in
        the caller's hand). Any of them handed out again would run beside itself."""
        self._next_own = (yield steps.Clock()).monotonic() + self.own_every_s
        assert self.held is not None
        held = {(d.outcome.shard, d.entry_id) for d in also_held}
        held.update(self.held())
        got, _ = yield from group_ops.claim(
            self.ns,
            self.group,
            self.consumer,
            dict.fromkeys(self.shards, "-"),
            count=count,
            min_idle_ms=self.reclaim_idle_ms,
            owner=self.consumer,
            retries=False,
        )
        held.update(self.held())
        return [d for d in got if (d.outcome.shard, d.entry_id) not in held]

    def _scan(self, count: int, *, owner: str, min_idle_ms: int) -> Op[list[Delivery]]:
        """A whole scan of every shard's pending entries (pages of ``count``)."""
        cursors = dict.fromkeys(self.shards, "-")
        out: list[Delivery] = []
        while cursors:
            got, nxt = yield from group_ops.claim(
                self.ns,
                self.group,
                self.consumer,
                cursors,
                count=count,
                min_idle_ms=min_idle_ms,
                owner=owner,
                retries=owner == "",
            )
            out += got
            cursors = {s: c for s, c in nxt.items() if c}
        return out


def check_options(*, count: object, block_ms: object, stop_when_idle: object) -> None:
    """``outcomes()``'s own options, checked before anything is written."""
    check_int("count", count, 1, 100_000)
    check_int("block_ms", block_ms, 0, 3_600_000)
    check_bool("stop_when_idle", stop_when_idle)
