"""The operator's calls of :class:`~timer.client.TimerClient`: the namespace's data
format and its migration, the servers' settings, consumer groups and dead letters, the
namespace's views (stats, memory, leaders, recent and next-due timers, every outcome) and
trimming. A mixin of the client (its own file to keep the client readable); every call
is an operation of ``timer.durable`` run by the client's driver, as the client's own are.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..durable.admin import history, setup, views
from ..durable.admin import search as outcome_search
from ..durable.admin import server as server_checks
from ..durable.admin.history import Minute
from ..durable.admin.pending import PendingPage, PendingQuery, pending_page
from ..durable.admin.search import OutcomeQuery
from ..durable.groups import admin
from ..durable.groups import dead as dead_filter
from ..durable.groups.dead import DeadFilter
from ..durable.model import steps
from ..durable.model.checks import check_int
from ..durable.model.keys import NamespaceKeys
from ..durable.model.models import (
    ClientSettings,
    DeadBatch,
    DeadLetter,
    GroupInfo,
    Meta,
    Outcome,
    ServerSettings,
    Trimmed,
)
from ..durable.model.namespace import Namespace
from ..durable.shards import ops as shard_ops
from ..durable.shards.calls import MigrateStep

T = TypeVar("T")


class OperatorCalls:
    """What an operator asks of a namespace (mixed into ``TimerClient``)."""

    if TYPE_CHECKING:  # the client's own, which these calls run on
        namespace: str
        keys: NamespaceKeys
        where: str  # the server's URL, its password masked
        settings: ClientSettings
        _checked: bool
        _meta: Meta | None

        @property
        def meta(self) -> Meta: ...

        def _run(self, op: steps.Op[T]) -> T: ...

        def _drive(self, op: steps.Op[T]) -> Generator[Any, None, T]: ...

        def _ns(self) -> Namespace: ...

        def server_time_ms(self) -> int: ...

    # -- the namespace's format and its servers ------------------------------------------

    def data_format(self) -> int:
        """The data format the namespace is stored in (``meta``'s version), even one an
        earlier release wrote, which every other call refuses until ``migrate``."""
        op = setup.read_meta(self.keys, where=self.where, check=not self._checked, older=True)
        version = self._run(op).version
        self._checked = True
        return version

    def migrate(
        self,
        progress: Callable[[int, MigrateStep], None] | None = None,
        *,
        budget: int = setup.MIGRATE_BUDGET,
    ) -> tuple[int, int]:
        """Convert a namespace an earlier release made to this release's one layout;
        returns (format before, format after). A no-op on a converted namespace.

        Stop the namespace's workers first (every client and worker refuses it until it
        is converted; a ConfigError, before anything is converted, while a worker holds a
        shard's lease). It converts each shard in bounded steps of at most ``budget``
        records, bucket ids, keys or entries (``progress(shard, step)`` after each);
        interrupted, it is safe to run again and goes on.
        """
        op = setup.migrate(
            self.keys,
            where=self.where,
            check=not self._checked,
            result_ttl_ms=self.settings.result_ttl_ms,
            progress=progress,
            budget=budget,
        )
        before, after = self._run(op)
        self._checked = True
        self._meta = None  # read again: the format changed
        return before, after

    def server_settings(self) -> list[ServerSettings]:
        """Each server's (each cluster primary's) eviction policy, AOF and version."""
        return self._run(server_checks.server_settings())

    def check_durability(self, *, allow_eviction: bool = False) -> list[str]:
        """ConfigError if a server may evict timers (unless ``allow_eviction``); else the
        warnings to show (AOF off, an allowed evicting policy, replicas that this client's
        writes do not wait for). ``init`` and workers call it."""
        return server_checks.check_durability(
            self.server_settings(),
            self.where,
            allow_eviction=allow_eviction,
            durability=self.settings.durability,
        )

    # -- groups and dead letters ---------------------------------------------------------

    def history(self, minutes: int = 60) -> list[Minute]:
        """The namespace's last ``minutes`` minutes (1 to a day), oldest first, the current
        one last: timers scheduled, expired, cancelled and completed, outcomes handled,
        failed and dead-lettered (per group too), pending timers and lateness, as the
        workers and handler runners added them (``timer.durable.admin.history``). Each minute's
        ``approximate`` names the counts that may be short, all of them: scheduled,
        cancelled and completed are heard over pub/sub by the shards' leaders; the
        others are counted where they happen, but a process killed with kill -9 loses
        what it counted since its last flush (a worker's ``history_every_ms``, 10 s by
        default). A schedule's own occurrence armed or taken out is not counted as
        scheduled or cancelled."""
        return self._run(history.read(self.keys, minutes))

    def groups(self) -> list[GroupInfo]:
        """Every consumer group of the namespace: consumers, pending, retrying, lag and
        the age of the oldest outcome it still owes, summed over the shards."""
        now = self.server_time_ms()
        return self._run(admin.group_infos(self._ns(), now))

    def worker_cards(self, workers: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """What each worker (of ``workers``, or every live one) last said of itself: its
        version, host, pid, start, led shards, counters, lateness and last error, as a
        JSON object (workers put it up every 10 s; it goes 10 minutes after the last)."""
        if workers is None:
            workers = [w for w, _ in self._run(shard_ops.workers(self.keys))]
        return self._run(shard_ops.cards(self.keys, list(workers)))

    def pause_group(self, group: str, *, by: str | None = None) -> bool:
        """Pause a consumer group: within a second its runners read and claim nothing new
        (handlers already running finish and are acknowledged; outcomes in hand waiting
        for a per-key slot still start), and its outcomes wait in the streams, kept from
        trimming as any unread one is. ``by``: who paused it, as the dashboard and
        ``tickwheel groups`` show it (default: this process's user@host). False if it was
        paused already; NotFound if no shard has the group."""
        return self._run(admin.pause_group(self._ns(), group, by or _who()))

    def resume_group(self, group: str) -> bool:
        """Resume a paused group: its runners take up within a second. False if it was
        not paused."""
        return self._run(admin.resume_group(self._ns(), group))

    def delete_group(self, group: str) -> int:
        """Destroy a consumer group on every shard (its pending entries and retry schedule
        go with it; its dead letters stay); on how many shards it existed."""
        return self._run(admin.delete_group(self._ns(), group))

    def dead_letters(
        self,
        group: str | None = None,
        *,
        error: str | None = None,
        match: str | None = None,
        limit: int = 1000,
    ) -> list[DeadLetter]:
        """Dead letters, oldest first, at most ``limit``: of ``group``, whose error holds
        ``error`` (any case), whose timer id matches ``match`` (a Redis glob, as
        ``timers.find`` takes); None: any."""
        if error is None and match is None:
            return self._run(admin.dead_letters(self._ns(), group, limit=limit))
        check_int("limit", limit, 1, 1_000_000)
        flt = DeadFilter.of(group, error, match)
        return self._run(dead_filter.select(self._ns(), flt, limit))

    def count_dead_letters(
        self,
        group: str | None = None,
        *,
        error: str | None = None,
        match: str | None = None,
        most: int = 1_000_000,
    ) -> int:
        """How many dead letters ``dead_letters`` would give for the same filter with no
        limit, counting up to ``most``: each read from its fields, none made whole (a
        dashboard's count of what a filter selects)."""
        return self.dead_letters_counted(group, error=error, match=match, limit=0, most=most)[1]

    def dead_letters_counted(
        self,
        group: str | None = None,
        *,
        error: str | None = None,
        match: str | None = None,
        limit: int = 1000,
        most: int = 1_000_000,
    ) -> tuple[list[DeadLetter], int]:
        """``dead_letters`` and ``count_dead_letters`` of one filter in one pass over the
        streams: the oldest ``limit`` letters it selects (0: none), and how many it
        selects, counted up to ``most`` (a dashboard's page of a filter and its count)."""
        check_int("limit", limit, 0, 1_000_000)
        check_int("most", most, 1, 1_000_000)
        flt = DeadFilter.of(group, error, match)
        return self._run(dead_filter.scan(self._ns(), flt, limit, most))

    def redeliver_dead_letters(
        self,
        refs: list[str] | None = None,
        *,
        group: str | None = None,
        error: str | None = None,
        match: str | None = None,
        expect: int | None = None,
    ) -> DeadBatch:
        """Put many dead letters back in front of their groups: those ``refs`` names, or
        every one the filter selects (``group``, ``error``, ``match`` as in
        ``dead_letters``; at most 100,000 an action). With ``expect``, nothing is done
        unless that many are selected now (:class:`~timer.errors.SelectionChanged`): the
        count you showed a person is the count acted on."""
        flt = DeadFilter.of(group, error, match)
        return self._run(dead_filter.act(self._ns(), "redeliver", flt, refs, expect))

    def drop_dead_letters(
        self,
        refs: list[str] | None = None,
        *,
        group: str | None = None,
        error: str | None = None,
        match: str | None = None,
        expect: int | None = None,
    ) -> DeadBatch:
        """Delete many dead letters for good: as :meth:`redeliver_dead_letters` picks."""
        flt = DeadFilter.of(group, error, match)
        return self._run(dead_filter.act(self._ns(), "drop", flt, refs, expect))

    def dead_letter(self, ref: str) -> DeadLetter | None:
        """One dead letter by its ref (``<shard>/<id>``), or None."""
        return self._run(admin.get_dead_letter(self._ns(), ref))

    def dead_letters_total(self) -> int:
        return self._run(admin.dead_letter_count(self._ns()))

    def redeliver(self, ref: str) -> str | None:
        """Put a dead letter back in front of its group (attempts start again at 1); the
        new stream entry's id, or None if there is no such dead letter."""
        return self._run(admin.redeliver(self._ns(), ref))

    def drop_dead_letter(self, ref: str) -> bool:
        """Delete a dead letter; True if it existed."""
        return self._run(admin.drop_dead_letter(self._ns(), ref))

    def all_outcomes(self, shards: Iterable[int] | None = None) -> Iterator[Outcome]:
        """Every outcome the shards' streams hold, oldest first per shard, read in pages
        (no consumer group: for audits, demos and analytics; handlers use ``outcomes``)."""
        picked = range(self.meta.shards) if shards is None else shards
        return self._drive(views.history(self._ns(), picked))

    def namespaces(self) -> list[str]:
        """The namespaces ``init`` created on this server or cluster (this client's one
        included, even if it was created before namespaces were listed)."""
        return sorted({*self._run(views.namespaces()), self.namespace})

    def next_due(self, shard: int, count: int = 20) -> list[tuple[int, str]]:
        """The pending timers of one shard due first: (deadline_ms, id), soonest first."""
        return self._run(views.next_due(self._ns(), shard, count))

    def pending_by_due(
        self,
        *,
        after: tuple[int, str] | None = None,
        limit: int = 50,
        match: str | None = None,
        payload: Mapping[str, object] | None = None,
        min_priority: int | None = None,
    ) -> PendingPage:
        """A page of the pending timers of every shard, soonest first (at most ``limit``,
        500), after ``after`` (``(deadline_ms, id)``: the page's ``after`` goes on from
        where it ended, with no gap and no repeat); only those whose id matches ``match``
        (a Redis glob), whose payload holds ``payload``'s one field (a dotted path) with
        its value (compared as text), of priority at least ``min_priority``. Each shard's
        buckets are read in due order and merged, so a page costs what the buckets it
        reaches hold, not what the namespace does (:mod:`timer.durable.admin.pending`)."""
        q = PendingQuery.of(match=match, payload=payload, min_priority=min_priority)
        return self._run(pending_page(self._ns(), q, after, limit))

    def recent_outcomes(
        self, count: int = 100, shards: Iterable[int] | None = None
    ) -> list[Outcome]:
        """The newest ``count`` outcomes of each shard's stream (all, or ``shards``),
        newest first overall, in one pipelined round trip."""
        return self._run(views.recent(self._ns(), count, shards))

    def search_outcomes(
        self,
        *,
        kind: str | None = None,
        match: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        payload: Mapping[str, object] | None = None,
        shards: Iterable[int] | None = None,
        group: str | None = None,
        state: str | None = None,
        limit: int = 100,
    ) -> tuple[list[Outcome], bool]:
        """The newest outcomes (at most ``limit``, 1,000) the streams still hold that are
        of ``kind`` (expired, cancelled, completed), whose timer id matches ``match`` (a
        Redis glob), decided in [``since_ms``, ``until_ms``] (Redis ms), whose payload
        holds ``payload``'s one field with its value (``{"customer.id": "42"}``: a dotted
        path; a value is compared as text), on ``shards``, and where they are for
        consumer ``group`` (``state``: ``waiting``, not yet delivered to it; ``in_hand``,
        delivered and not settled: running or waiting for a retry; ``settled``,
        acknowledged: handled, or dead-lettered); and True if the search stopped after
        reading 100,000 entries before the oldest in range (narrow it for more)."""
        q = OutcomeQuery.of(
            self._ns(),
            kind=kind,
            match=match,
            since_ms=since_ms,
            until_ms=until_ms,
            payload=payload,
            shards=shards,
            group=group,
            state=state,
        )
        return self._run(outcome_search.search(self._ns(), q, limit))

    def outcomes_total(self) -> int:
        """How many outcomes the namespace's streams hold (one pipelined XLEN per shard)."""
        return self._run(views.outcomes_total(self._ns()))

    def trim_outcomes(
        self,
        retention_ms: int | None,
        *,
        keep_unread: bool = True,
        shards: Iterable[int] | None = None,
        pass_within: int | None = None,
        until_done: bool = True,
    ) -> list[Trimmed]:
        """Drop outcomes decided more than ``retention_ms`` ago (Redis clock), per shard.

        With ``keep_unread`` (the default) an outcome stays, whatever its age, until every
        consumer group of its stream has been handed it and has acked it. ``shards``
        limits the work to some shards (a worker trims the ones it leads). Each call also
        drops retained outcomes past their ``result_ttl`` from part of the results
        table (a thirtieth of its hashes, 64 to 1,024; with ``pass_within`` = k, at
        least a k-th of them, so k calls go round a table of any size, in calls of
        1,024 hashes, or, with ``until_done`` False, one call a shard, each ``Trimmed``
        saying in ``results_left`` what its round has left for ``ShardStore.trim_results``);
        ``retention_ms`` None does only that.
        """
        return self._run(
            shard_ops.trim_outcomes(
                self._ns(),
                retention_ms,
                keep_unread=keep_unread,
                shards=shards,
                pass_within=pass_within,
                until_done=until_done,
            )
        )

    def stats(self, *, servers: bool = True) -> dict[str, Any]:
        """Per shard: pending, leader, epoch, outcomes, lag (ms past the oldest ended
        bucket), lease time left; with ``servers``, each server's durability settings."""
        return self._run(views.stats(self._ns(), servers=servers))

    def memory(self, sample: int = 10) -> dict[str, Any]:
        """Redis bytes held per pending and per decided timer, estimated from
        ``MEMORY USAGE`` of each shard's keys and samples of its buckets and results."""
        return self._run(views.memory(self._ns(), sample))

    def leaders(self) -> dict[int, str | None]:
        """Each shard's leader (worker id) now, None where no worker holds its lease."""
        return self._run(views.leaders(self._ns()))


def _who() -> str:
    """This process's user@host, for a pause that does not say who."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"
