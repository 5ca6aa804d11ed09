"""The operator's side of consumer groups: list and delete them, and their dead letters
(list, read, redeliver, drop). Sans-I/O operations, as in :mod:`.streams`."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ...errors import NotFound, StoreError, quoted
from ..model import steps
from ..model.checks import check_int
from ..model.codec import text
from ..model.entries import dead_letter_from_entry, parse_ref
from ..model.keys import check_name
from ..model.models import ConsumerInfo, DeadLetter, GroupInfo
from ..model.namespace import Namespace
from ..model.steps import Op, error_or, server_time_ms
from . import dead as dead_filter
from .calls import parse_redeliver, redeliver_call


def _id_ms(entry_id: Any) -> int:
    return int(text(entry_id).split("-", 1)[0])


_DENIED_SAID = False


def _unless_denied(reply: Any) -> Any:
    """A reply, or None where the user's ACL denies the command (NOPERM: an operator user
    made by an older ``tickwheel acl``), said once in this process."""
    global _DENIED_SAID
    if isinstance(reply, StoreError) and reply.code == "NOPERM":
        if not _DENIED_SAID:
            _DENIED_SAID = True
            warnings.warn(
                "this Redis user may not run HKEYS or ZMSCORE, so a group's retrying counts "
                "the outcomes looked at later too; run `tickwheel acl operator` again and "
                "apply its rules to grant them",
                UserWarning,
                stacklevel=2,
            )
        return None
    return error_or(reply)


def group_infos(ns: Namespace, now_ms: int) -> Op[list[GroupInfo]]:
    """Every consumer group of the namespace with its consumers, pending, retrying, lag
    and the age of what it owes, summed over the shards' streams."""
    streams = list(ns.outcome_streams().items())
    listed = yield steps.Pipeline(
        [steps.Command("xinfo_groups", (s,)) for s, _ in streams], errors_in_slots=True
    )
    found: list[tuple[str, int, dict[str, Any]]] = []
    for (stream, shard), reply in zip(streams, listed, strict=True):
        if isinstance(reply, StoreError):
            continue  # no stream yet on this shard
        for g in error_or(reply):
            found.append((stream, shard, g))
    if not found:
        return []
    detail: list[steps.Command] = []
    for stream, shard, g in found:
        name = text(g["name"])
        last = text(g["last-delivered-id"])
        detail += [
            steps.Command("xinfo_consumers", (stream, name)),
            steps.Command("zcard", (ns.shard(shard).retries(name),)),
            steps.Command("xrange", (stream, "(" + last, "+"), {"count": 1}),
            steps.Command("xpending", (stream, name)),
            steps.Command("hkeys", (ns.shard(shard).errors(name),)),
        ]
    replies = yield steps.Pipeline(detail, errors_in_slots=True)
    # Of those waiting for a time, the ones that failed (their errors kept) are retrying;
    # the rest wait at their handler's request (Later), which is no failure. An operator
    # user made before this read (its ACL has no HKEYS or ZMSCORE) counts them all as
    # retrying, as it did then, and is told once how to grant them.
    kept: list[list[str] | None] = []
    for i in range(len(found)):
        for reply in replies[5 * i : 5 * i + 4]:
            error_or(reply)
        kept.append(_unless_denied(replies[5 * i + 4]))
    failed = [[k for k in map(text, ids) if k != "~"] if ids is not None else [] for ids in kept]
    asked = [(i, ids) for i, ids in enumerate(failed) if ids]
    calls = []
    for i, ids in asked:
        _stream, shard, g = found[i]
        calls.append(steps.Command("zmscore", (ns.shard(shard).retries(text(g["name"])), ids)))
    scores = (yield steps.Pipeline(calls, errors_in_slots=True)) if calls else []
    waiting_failed: list[int | None] = [None if ids is None else 0 for ids in kept]
    for (i, _), reply in zip(asked, scores, strict=True):
        got = _unless_denied(reply)
        waiting_failed[i] = None if got is None else sum(1 for x in got if x is not None)
    acc: dict[str, dict[str, Any]] = {}
    for i, (_stream, _shard, g) in enumerate(found):
        consumers, waiting, nxt, pending = replies[5 * i : 5 * i + 4]
        _add_shard(acc, g, consumers, waiting, nxt, pending, waiting_failed[i])
    paused = yield from paused_groups(ns)
    return [_group_info(name, a, now_ms, paused.get(name)) for name, a in sorted(acc.items())]


def _add_shard(  # noqa: PLR0917 - one shard's replies, in the order they were asked
    acc: dict[str, dict[str, Any]],
    g: dict[str, Any],
    consumers: list[dict[str, Any]],
    retrying: Any,
    nxt: list[Any],
    pending: dict[str, Any],
    failed: int | None,
) -> None:
    """Sum one shard's figures of group ``g`` into its account in ``acc`` (``retrying``:
    how many wait for a time; ``failed``: how many of those failed, their errors kept;
    None: not known, every one counted as retrying)."""
    if failed is None:
        failed = int(retrying)
    a = acc.setdefault(
        text(g["name"]),
        {
            "consumers": {},
            "pending": 0,
            "retrying": 0,
            "later": 0,
            "lag": 0,
            "oldest": None,
            "owes": None,
            "shards": 0,
        },
    )
    a["shards"] += 1
    a["pending"] += int(g["pending"])
    a["retrying"] += failed
    a["later"] += int(retrying) - failed
    # Redis counts lag from the entries ever added less those read, which a trim leaves
    # behind (trim --drop-unread of every entry showed lag 1): none after the last one
    # delivered is lag 0, whatever it says, and one there is at least 1.
    lag = g.get("lag")
    if not nxt:
        lag = 0
    elif lag is not None:
        lag = max(int(lag), 1)
    a["lag"] = None if lag is None or a["lag"] is None else a["lag"] + int(lag)
    owed: list[int] = []
    if int(pending["pending"]) > 0:
        oldest = _id_ms(pending["min"])
        owed.append(oldest)
        a["oldest"] = oldest if a["oldest"] is None else min(a["oldest"], oldest)
    if nxt:
        owed.append(_id_ms(nxt[0][0]))
    if owed:
        a["owes"] = min(owed) if a["owes"] is None else min(a["owes"], *owed)
    for c in consumers:
        cname = text(c["name"])
        have = a["consumers"].get(cname)
        idle = int(c["idle"])
        cpending = int(c["pending"])
        a["consumers"][cname] = (
            (cpending, idle) if have is None else (have[0] + cpending, min(have[1], idle))
        )


def _group_info(
    name: str, a: dict[str, Any], now_ms: int, paused: tuple[int, str] | None
) -> GroupInfo:
    return GroupInfo(
        name=name,
        consumers=tuple(
            ConsumerInfo(c, p, idle) for c, (p, idle) in sorted(a["consumers"].items())
        ),
        pending=a["pending"],
        retrying=a["retrying"],
        lag=a["lag"],
        oldest_pending_age_ms=None if a["oldest"] is None else max(0, now_ms - a["oldest"]),
        owes_since_ms=a["owes"],
        shards=a["shards"],
        paused_since_ms=paused[0] if paused else None,
        paused_by=paused[1] if paused else None,
        later=a["later"],
    )


# -- pause and resume ------------------------------------------------------------------------
# A paused group's runners read and claim nothing new (handlers already running finish and
# are acknowledged); its outcomes wait in the streams. They look at ``paused`` each second.


def paused_groups(ns: Namespace) -> Op[dict[str, tuple[int, str]]]:
    """Every paused group: (since, Redis ms; who paused it)."""
    stored = yield steps.Command("hgetall", (ns.keys.paused,))
    out: dict[str, tuple[int, str]] = {}
    for group, value in stored.items():
        since, _, by = text(value).partition(" ")
        out[text(group)] = (int(since) if since.isdigit() else 0, by)
    return out


def is_paused(ns: Namespace, group: str) -> Op[bool]:
    return bool((yield steps.Command("hexists", (ns.keys.paused, group))))


def group_names(ns: Namespace) -> Op[set[str]]:
    """The groups that have read some shard's outcomes (a group exists from then on)."""
    listed = yield steps.Pipeline(
        [steps.Command("xinfo_groups", (s,)) for s in ns.outcome_streams()],
        errors_in_slots=True,
    )
    return {text(g["name"]) for r in listed if not isinstance(r, StoreError) for g in error_or(r)}


def group_exists(ns: Namespace, group: str) -> Op[bool]:
    return group in (yield from group_names(ns))


def no_group(namespace: str, group: str, names: Iterable[str]) -> NotFound:
    """No consumer group ``group``, said one way by pause, resume and delete at every
    door: with the groups there are (a typo shows its right name)."""
    return NotFound(
        f"no consumer group {quoted(group)} in namespace {quoted(namespace)} "
        f"(groups: {', '.join(sorted(names)) or 'none'})"
    )


def pause_group(ns: Namespace, group: str, by: str) -> Op[bool]:
    """Pause ``group`` (it must exist on some shard: a typo would pause nothing); False
    if it was paused already (its first pause, and who did it, stay)."""
    check_name("consumer group", group)
    check_name("who pauses it", by)
    names = yield from group_names(ns)
    if group not in names:
        raise no_group(ns.name, group, names)
    now = yield from server_time_ms()
    return int((yield steps.Command("hsetnx", (ns.keys.paused, group, f"{now} {by}")))) == 1


def resume_group(ns: Namespace, group: str) -> Op[bool]:
    """Resume a paused group (its runners take up within a second); False if it was not."""
    check_name("consumer group", group)
    if int((yield steps.Command("hdel", (ns.keys.paused, group)))) == 1:
        return True
    names = yield from group_names(ns)
    if group not in names:  # as pause says of it
        raise no_group(ns.name, group, names)
    return False


def delete_group(ns: Namespace, group: str) -> Op[int]:
    """Destroy the group on every shard's stream and drop its retry schedule; on how many
    streams it existed. Its dead letters stay (drop them with ``drop_dead_letters``)."""
    check_name("consumer group", group)
    shards = range(ns.meta.shards)
    calls: list[steps.Command] = []
    for s in shards:
        sk = ns.shard(s)
        calls += [
            steps.Command("xgroup_destroy", (sk.outcomes, group)),
            steps.Command("delete", (sk.retries(group),)),
            steps.Command("delete", (sk.errors(group),)),  # one key a DEL: a Cluster's pipeline
        ]
    replies = yield steps.Pipeline(calls, errors_in_slots=True)
    yield steps.Command("hdel", (ns.keys.paused, group))  # a group made again starts unpaused
    return sum(1 for r in replies[0::3] if not isinstance(r, StoreError) and int(error_or(r)) == 1)


def dead_letters(
    ns: Namespace, group: str | None = None, *, limit: int = 1000
) -> Op[list[DeadLetter]]:
    """Dead letters (of ``group``, or all), oldest first, at most ``limit``."""
    check_int("limit", limit, 1, 1_000_000)
    return (yield from dead_filter.select(ns, dead_filter.DeadFilter.of(group), limit))


def dead_letter_count(ns: Namespace) -> Op[int]:
    lengths = yield steps.Pipeline(
        [steps.Command("xlen", (ns.shard(s).dead,)) for s in range(ns.meta.shards)]
    )
    return sum(int(n) for n in lengths)


def get_dead_letter(ns: Namespace, ref: object) -> Op[DeadLetter | None]:
    shard, eid = parse_ref(ref, ns.meta.shards)
    entries = yield steps.Command("xrange", (ns.shard(shard).dead, eid, eid))
    if not entries:
        return None
    return dead_letter_from_entry(shard, entries[0][0], entries[0][1])


def redeliver(ns: Namespace, ref: object) -> Op[str | None]:
    """Put a dead letter back in front of its group (a new entry of its shard's stream);
    the new entry id, or None when there is no such dead letter (or it holds no outcome)."""
    shard, eid = parse_ref(ref, ns.meta.shards)
    yield from dead_filter.check_readers(ns, [f"{shard}/{eid}"])
    return parse_redeliver((yield redeliver_call(ns.shard(shard), eid)))


def drop_dead_letter(ns: Namespace, ref: object) -> Op[bool]:
    """Delete a dead letter; True if it existed."""
    shard, eid = parse_ref(ref, ns.meta.shards)
    return int((yield steps.Command("xdel", (ns.shard(shard).dead, eid)))) == 1
