"""What the dashboard reads and does for one namespace (:class:`Dashboard`), through the
public ``TimerClient`` alone, and the boards of every namespace a page may ask for
(:class:`Namespaces`)."""

from __future__ import annotations

from typing import Any, get_type_hints

from starlette.requests import Request

from timer import TimerClient
from timer.durable.admin.pending import cursor_text, parse_cursor
from timer.durable.groups.dead import MOST, DeadFilter
from timer.durable.model.entries import parse_ref
from timer.durable.model.fields import ScheduleOptions
from timer.durable.model.keys import check_namespace
from timer.durable.model.models import Outcome
from timer.durable.schedules.records import occurrence_name
from timer.durable.timers.finding import ACTIONS as BULK_ACTIONS
from timer.errors import InvalidInput, NotFound, ScheduleNotFound, TimerNotFound, quoted
from timer.handlers.limits import limits_in_use
from timer.shapes import advised, dead_letter_json, group_json, outcome_json, schedule_json

from .inputs import either, signed, takes, whole, whole_ms
from .shapes import PERIODS, attention, group_minute, history_shape, info_shape, lateness_histogram

SEARCH_SHOWN = 200  # outcomes a search shows, newest first
DEAD_SHOWN = 200  # dead letters a filter shows (its count is of all it selects)
RECENT = 200  # outcomes per shard read for the lateness histogram and the live list
FIND_PAGE, FIND_PAGES, FIND_SHOWN = 1000, 20, 100  # the search box: scan bounds, rows
PENDING_PAGE = 50  # pending timers a page of the Timers view shows

# The fields of a schedule's spec, as client.schedules.create takes them (cron, every,
# offset, tz, start, end, jitter, missed, catch_up, overlap, group, payload, watch).
SPEC_FIELDS = tuple(get_type_hints(ScheduleOptions))


class Dashboard:
    """What the routes read and do, synchronously (run in a thread by each route), for
    one namespace; :class:`Namespaces` hands out one per namespace."""

    def __init__(self, client: TimerClient, *, read_only: bool) -> None:
        self.client = client
        self.read_only = read_only

    def overview(self) -> dict[str, Any]:
        c = self.client
        st = c.stats(servers=False)  # every 2 s: no INFO of every server
        now = int(st["now_ms"])
        recent = c.recent_outcomes(RECENT)  # the newest of each shard, newest first
        minute_ago = now - 60_000
        per_minute: dict[str, int] = {"expired": 0, "completed": 0, "cancelled": 0}
        expired_by_shard: dict[int, int] = {}
        for o in recent:
            if o.decided_ms >= minute_ago:
                per_minute[o.outcome] = per_minute.get(o.outcome, 0) + 1
                if o.outcome == "expired":
                    expired_by_shard[o.shard] = expired_by_shard.get(o.shard, 0) + 1
        led: dict[str, int] = {}
        fired: dict[str, int] = {}
        for s in st["shards"]:
            if s["leader"]:
                led[s["leader"]] = led.get(s["leader"], 0) + 1
                fired[s["leader"]] = fired.get(s["leader"], 0) + expired_by_shard.get(s["shard"], 0)
        shown = {
            "namespace": c.namespace,
            "namespaces": c.namespaces(),
            "server": c.where,  # never a password: the client keeps a redacted URL
            "read_only": self.read_only,
            "now_ms": now,
            "pending": st["pending"],
            "shards": [{**s, "lease": s["leader"] is not None} for s in st["shards"]],
            "workers": [
                {
                    "id": w,
                    "heartbeat_age_ms": max(0, now - ms),
                    "shards_led": led.get(w, 0),
                    # timers expired on the shards it leads, per second over the last minute
                    "expired_per_s": round(fired.get(w, 0) / 60, 2),
                }
                for w, ms in c.workers()
            ],
            "groups": [group_json(g) for g in c.groups()],
            "limits": limits_in_use(c),  # per-key handler limits' slots held now
            "dead_letters": c.dead_letters_total(),
            "outcomes_last_minute": per_minute,
            "lateness": lateness_histogram(recent),
            "recent": [_outcome_row(o) for o in recent[:20]],  # no payloads each second
        }
        return {**shown, "attention": attention(shown)}  # what needs it, one item a cause

    def history(self, minutes: int) -> dict[str, Any]:
        return history_shape(self.client.history(minutes), _step(minutes))

    def group_history(self, group: str, minutes: int) -> dict[str, Any]:
        """One group's history: its handled, failed and dead alone, a point a bin."""
        step = _step(minutes)
        own = [group_minute(m, group) for m in self.client.history(minutes)]
        return history_shape(own, step)

    def timer(self, timer_id: str) -> dict[str, Any]:
        info = self.client.get(timer_id)
        if info is None:
            raise TimerNotFound.of(timer_id, self.client.namespace)
        return info_shape(info, self.client.server_time_ms())

    def act(self, timer_id: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        c = self.client
        if action not in ("cancel", "complete", "reschedule"):
            raise InvalidInput(
                f"unknown action {quoted(action, 40)}: cancel, complete or reschedule"
            )
        takes(body, ("delay_ms",) if action == "reschedule" else (), f"{action} of a timer")
        if action == "cancel":
            return {"done": c.cancel(timer_id), **self.timer(timer_id)}
        if action == "complete":
            return {"done": c.complete(timer_id), **self.timer(timer_id)}
        if action == "reschedule":
            delay = whole_ms(body.get("delay_ms"))
            if isinstance(delay, bool) or not isinstance(delay, int):
                raise InvalidInput(
                    f"delay_ms must be a whole number of ms, got {quoted(delay, 40)}"
                )
            moved = c.reschedule(timer_id, delay)
            return {"done": moved is not None, **self.timer(timer_id)}
        raise InvalidInput(f"unknown action {quoted(action, 40)}: cancel, complete or reschedule")

    def snapshot(self) -> dict[str, Any]:
        """What the page shows, in one event of the live stream: the dead letters as their
        table shows them (a dead letter's whole is read by its own view), not with every
        payload and traceback each second."""
        dead = [_dead_row(d) for d in self.dead()]
        return {"overview": self.overview(), "dead": dead, "schedules": self.schedules()}

    def find(self, query: dict[str, str]) -> dict[str, Any]:
        """Up to about FIND_SHOWN timers matching ``match`` and ``state`` from ``cursor``,
        a few bounded pages at most; the cursor to go on with (None: no more)."""
        shown: list[dict[str, Any]] = []
        cursor = query.get("cursor") or None
        now = self.client.server_time_ms()
        for _ in range(FIND_PAGES):
            page = self.client.timers.find(
                query.get("match") or "*",
                state=query.get("state") or "pending",
                cursor=cursor,
                count=FIND_PAGE,
            )
            shown += [info_shape(t, now) for t in page.timers]
            cursor = page.cursor
            if cursor is None or len(shown) >= FIND_SHOWN:
                break
        shown.sort(key=lambda t: t["deadline_ms"])  # soonest first, whatever the shard
        return {"timers": shown, "cursor": cursor}

    def pending(self, query: dict[str, str]) -> dict[str, Any]:
        """A page of the pending timers of every shard by next due (``limit``, 50 unless
        said), after ``cursor`` (the last page's), of those ``match``, ``field`` and
        ``value``, ``min_priority`` select; the cursor to go on with (None: no more)."""
        cursor = query.get("cursor") or None
        field, value = query.get("field") or None, query.get("value", "")
        low = query.get("min_priority") or None
        limit = whole("limit", query.get("limit"))
        page = self.client.pending_by_due(
            after=None if cursor is None else parse_cursor(cursor),
            limit=PENDING_PAGE if limit is None else limit,
            match=query.get("match") or None,
            payload={field: value} if field else None,
            min_priority=None if low is None else signed("min_priority", low),
        )
        now = self.client.server_time_ms()
        return {
            "timers": [
                {
                    "id": t.id,
                    "shard": t.shard,
                    "deadline_ms": t.deadline_ms,
                    "time_left_ms": t.deadline_ms - now,
                    "created_ms": t.created_ms,
                    "priority": t.priority,
                    "note": t.note,
                    # a schedule's armed occurrence ({name}@<ms>): the page shows it as
                    # that schedule's next, not as a timer of the user's to cancel
                    "schedule": _schedule_of(t.id),
                }
                for t in page.timers
            ],
            "cursor": None if page.after is None else cursor_text(page.after),
            "stopped": page.stopped,
            "read": page.read,
        }

    def bulk(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """``action`` on the timers the page selected (``ids``); reschedule by ``delay_ms``."""
        if action not in BULK_ACTIONS:
            raise InvalidInput(f"unknown action {quoted(action, 40)}: {either(BULK_ACTIONS)}")
        takes(body, ("ids", "delay_ms") if action == "reschedule" else ("ids",), f"bulk {action}")
        move = {"delay_ms": whole_ms(body.get("delay_ms"))} if action == "reschedule" else {}
        done = self.client.timers.act_on(body.get("ids"), action, **move)  # type: ignore[arg-type]
        return {
            "action": action,
            "selected": done.selected,
            "done": done.done,
            "skipped": done.skipped,
            "errors": done.errors,
        }

    def due(self, shard: int) -> dict[str, Any]:
        now = self.client.server_time_ms()
        timers = self.client.next_due(shard, 20)
        return {
            "shard": shard,
            "due": [{"id": tid, "deadline_ms": d, "time_left_ms": d - now} for d, tid in timers],
        }

    def dead(self) -> list[dict[str, Any]]:
        return [dead_letter_json(d) for d in self.client.dead_letters(limit=200)]

    def outcomes(self, query: dict[str, str]) -> dict[str, Any]:
        """The newest outcomes a search selects (``kind``, ``match``, ``field`` and
        ``value``, ``since_ms``, ``until_ms``, ``shard``, ``group`` and its ``state``),
        at most ``SEARCH_SHOWN``."""
        field, value = query.get("field") or None, query.get("value", "")
        shard = query.get("shard") or None
        found, stopped = self.client.search_outcomes(
            kind=query.get("kind") or None,
            match=query.get("match") or None,
            since_ms=whole("since_ms", query.get("since_ms")),
            until_ms=whole("until_ms", query.get("until_ms")),
            payload={field: value} if field else None,
            shards=None if shard is None else [whole("shard", shard)],  # type: ignore[list-item]
            group=query.get("group") or None,
            state=query.get("state") or None,
            limit=SEARCH_SHOWN,
        )
        return {"outcomes": [outcome_json(o) for o in found], "stopped": stopped}

    def worker(self, worker: str) -> dict[str, Any]:
        """One worker: what it says of itself (its card: version, host, counters, last
        error), its heartbeat, and the shards it leads as the shards say."""
        c = self.client
        cards = c.worker_cards([worker])
        beats = dict(c.workers())
        if worker not in cards and worker not in beats:
            raise NotFound(
                f"no worker {quoted(worker, 100)} in namespace {quoted(c.namespace)} now"
            )
        st = c.stats(servers=False)
        now = int(st["now_ms"])
        return {
            "id": worker,
            "live": worker in beats,
            "heartbeat_age_ms": max(0, now - beats[worker]) if worker in beats else None,
            "card": cards.get(worker),
            "shards": [s for s in st["shards"] if s["leader"] == worker],
        }

    def group_act(self, action: str, body: dict[str, Any], by: str) -> dict[str, Any]:
        """Pause or resume the group ``body["group"]`` (``by``: who asked, as the page and
        ``tickwheel groups`` show it)."""
        if action not in ("pause", "resume"):
            raise InvalidInput(f"unknown action {quoted(action, 40)}: pause or resume")
        takes(body, ("group",), f"{action} of a group")
        group = body.get("group")
        if action == "pause":
            done = self.client.pause_group(group, by=by)  # type: ignore[arg-type]
        elif action == "resume":
            done = self.client.resume_group(group)  # type: ignore[arg-type]
        else:
            raise InvalidInput(f"unknown action {quoted(action, 40)}: pause or resume")
        return {"group": group, "action": action, "done": done}

    def dead_matching(self, query: dict[str, str]) -> dict[str, Any]:
        """The dead letters a filter selects (``group``, ``error``, ``match``): the first
        ``DEAD_SHOWN``, oldest first, and how many match in all (``more``: past the most
        one action takes, so the count is that most)."""
        flt = DeadFilter.of(query.get("group"), query.get("error"), query.get("match"))
        # one pass: only the shown ones are made whole, the rest counted from their fields
        letters, matching = self.client.dead_letters_counted(
            flt.group, error=flt.error, match=flt.match, limit=DEAD_SHOWN, most=MOST + 1
        )
        return {
            "dead_letters": [dead_letter_json(d) for d in letters],
            "matching": min(matching, MOST),
            "more": matching > MOST,
        }

    def dead_bulk(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """``action`` (redeliver, drop) on the dead letters named by ``refs`` or selected
        by ``group``, ``error`` and ``match``, done only if ``expect`` (the count the
        person confirmed) still holds."""
        if action not in ("redeliver", "drop"):
            raise InvalidInput(f"unknown action {quoted(action, 40)}: redeliver or drop")
        takes(body, ("refs", "group", "error", "match", "expect"), f"{action} of dead letters")
        if "expect" not in body:
            raise InvalidInput("expect (the count the person confirmed) is required here")
        do = (
            self.client.redeliver_dead_letters
            if action == "redeliver"
            else self.client.drop_dead_letters
        )
        done = do(
            body.get("refs"),
            group=body.get("group"),
            error=body.get("error"),
            match=body.get("match"),
            expect=body.get("expect"),
        )
        return {
            "action": action,
            "matched": done.matched,
            "done": len(done.done),
            "missing": done.missing,
        }

    def dead_one(self, ref: str) -> dict[str, Any]:
        d = self.client.dead_letter(ref)
        if d is None:
            raise NotFound(
                f"no dead letter {quoted(ref, 100)} in namespace {quoted(self.client.namespace)}"
            )
        return dead_letter_json(d)

    def dead_act(self, ref: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        if action not in ("redeliver", "drop"):
            raise InvalidInput(f"unknown action {quoted(action, 40)}: redeliver or drop")
        takes(body, (), f"{action} of a dead letter")
        parse_ref(ref, self.client.meta.shards)
        if action == "redeliver":
            return {"ref": ref, "done": self.client.redeliver(ref) is not None}
        if action == "drop":
            return {"ref": ref, "done": self.client.drop_dead_letter(ref)}
        raise InvalidInput(f"unknown action {quoted(action, 40)}: redeliver or drop")

    def schedules(self) -> list[dict[str, Any]]:
        return [schedule_json(s) for s in self.client.schedules.list()]

    def schedule_create(self, body: dict[str, Any]) -> dict[str, Any]:
        """A new schedule: its ``name`` and the library's whole spec (:data:`SPEC_FIELDS`,
        as ``client.schedules.create`` takes it). A field the form leaves unset (null or
        "") takes its default; the payload is kept as given (null: none)."""
        takes(body, ("name", *SPEC_FIELDS), "creating a schedule")
        spec = {
            k: v for k, v in body.items() if k not in ("name", "payload") and v not in (None, "")
        }
        made = self.client.schedules.create(body.get("name"), payload=body.get("payload"), **spec)  # type: ignore[arg-type]
        return advised(made, self.client.time.wall_ms())

    def schedule_act(self, name: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """pause, resume, trigger, backfill (``start_ms``, ``end_ms``) or delete. A pause
        of a paused schedule, a resume of an active one, says ``already`` (its ``done``
        stays true: the schedule is as asked)."""
        s = self.client.schedules
        if action not in ("pause", "resume", "trigger", "backfill", "delete"):
            raise InvalidInput(
                f"unknown action {quoted(action, 40)}: pause, resume, trigger, backfill or delete"
            )
        backfill = ("start_ms", "end_ms")
        takes(body, backfill if action == "backfill" else (), f"{action} of a schedule")
        if action == "backfill":
            ran = s.backfill(name, body.get("start_ms"), body.get("end_ms"))  # type: ignore[arg-type]
            created = [t.id for t in ran if not isinstance(t, Exception) and t.created]
            return {"name": name, "action": action, "done": True, "created": created}
        if action in ("pause", "resume"):
            before = s.get(name)
            if before is None:
                raise ScheduleNotFound.of(name, self.client.namespace)
            already = before.state == ("paused" if action == "pause" else "active")
            done = s.pause(name) if action == "pause" else s.resume(name) is not None
            if not done:  # deleted meanwhile
                raise ScheduleNotFound.of(name, self.client.namespace)
            return {"name": name, "action": action, "done": done, "already": already}
        done = s.trigger(name).created if action == "trigger" else s.delete(name)
        if not done and action != "trigger":
            raise ScheduleNotFound.of(name, self.client.namespace)
        return {"name": name, "action": action, "done": done}


def _outcome_row(o: Outcome) -> dict[str, Any]:
    """A recent outcome as its row shows it."""
    return {
        "id": o.id,
        "outcome": o.outcome,
        "shard": o.shard,
        "decided_ms": o.decided_ms,
        "deadline_ms": o.deadline_ms,
        "lateness_ms": o.lateness_ms,
    }


def _dead_row(d: dict[str, Any]) -> dict[str, Any]:
    """A dead letter as its table row shows it: ref, group, timer, attempts, the first
    line of its error."""
    o = d["outcome"]
    return {
        "ref": d["ref"],
        "group": d["group"],
        "attempts": d["attempts"],
        "error": d["error"].split("\n", 1)[0][:300],
        "outcome": None if o is None else {"id": o["id"]},
    }


def _step(minutes: int) -> int:
    """The minutes a point of a period the page offers sums (InvalidInput for another)."""
    if minutes not in PERIODS:
        periods = ", ".join(map(str, PERIODS))
        raise InvalidInput(f"history is kept for {periods} minutes, not {minutes}")
    return PERIODS[minutes]


class Namespaces:
    """A Dashboard per namespace, each with a client sharing the first one's connections."""

    def __init__(self, client: TimerClient, *, read_only: bool) -> None:
        self.first = client
        self.read_only = read_only
        self.boards = {client.namespace: Dashboard(client, read_only=read_only)}

    def of(self, request: Request) -> Dashboard:
        name = request.query_params.get("ns") or self.first.namespace
        if name not in self.boards:
            check_namespace(name)
            c = TimerClient(
                self.first.redis, name, settings=self.first.settings, safe_url=self.first.where
            )
            c.meta  # noqa: B018 - a namespace that does not exist fails here (ConfigError)
            self.boards[name] = Dashboard(c, read_only=self.read_only)
        return self.boards[name]


def _schedule_of(timer_id: str) -> str | None:
    """The schedule whose occurrence ``timer_id`` is (``{name}@<ms>``), or None."""
    found = occurrence_name(timer_id)
    return None if found is None else found[0]
