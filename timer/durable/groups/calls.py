"""The script calls of consumer groups (``groups``) and their replies: building each call
and reading what it answers (sans-I/O, as ``calls`` for timers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model.codec import text
from ..model.entries import flat_fields
from ..model.keys import ShardKeys
from ..model.scripts import ScriptName
from ..model.steps import ScriptCall


def claim_call(
    sk: ShardKeys,
    group: str,
    consumer: str,
    *,
    count: int,
    min_idle_ms: int,
    owner: str = "",
    cursor: str = "-",
    retries: bool = True,
) -> ScriptCall:
    return ScriptCall(
        ScriptName.CLAIM,
        [sk.outcomes, sk.retries(group)],
        [group, consumer, count, min_idle_ms, owner, cursor, int(retries)],
    )


def read_call(streams: Sequence[str], group: str, consumer: str, count: int) -> ScriptCall:
    """New entries of ``streams`` (one server's), at most ``count`` in all, read in order."""
    return ScriptCall(ScriptName.READ, list(streams), [group, consumer, count])


def parse_read(reply: Sequence[Any] | None) -> list[tuple[int, str, dict[bytes, bytes]]]:
    """[(index of its stream in the call's keys, entry id, fields)]."""
    return [(int(e[0]) - 1, text(e[1]), flat_fields(e[2])) for e in reply or ()]


def parse_claim(reply: Sequence[Any]) -> tuple[str, list[tuple[str, dict[bytes, bytes], int]]]:
    """(the cursor of the next scan, '' when done; [(entry id, fields, deliveries)])."""
    taken = [(text(e[0]), flat_fields(e[1]), int(e[2])) for e in reply[1:]]
    return text(reply[0]), taken


def retry_call(
    sk: ShardKeys,
    group: str,
    entry_id: str,
    delay_ms: int,
    *,
    attempt: int = 0,
    error: str = "",
    counted: bool = True,
) -> ScriptCall:
    """``error``: the failed attempt's, kept for the dead letter ('': a Later, no failure);
    ``counted`` False: a delivery given back unsent, not an attempt."""
    return ScriptCall(
        ScriptName.RETRY,
        [sk.outcomes, sk.retries(group), sk.errors(group)],
        [group, entry_id, delay_ms, attempt, _cut(error, MAX_KEPT_ERROR_CHARS), int(not counted)],
    )


def _cut(error: str, most: int) -> str:
    return error if len(error) <= most else error[: most - 1] + "…"


def parse_retry(reply: Any) -> int | None:
    """The retry time (ms), or None when the entry was no longer pending."""
    return int(reply) or None


MAX_ERROR_CHARS = 4000
MAX_KEPT_ERROR_CHARS = 2000  # each earlier attempt's, ten at most kept (retry.lua)


def dead_call(
    sk: ShardKeys, group: str, entry_id: str, consumer: str, *, attempts: int, error: str
) -> ScriptCall:
    return ScriptCall(
        ScriptName.DEAD,
        [sk.outcomes, sk.retries(group), sk.dead, sk.errors(group)],
        [group, entry_id, consumer, attempts, _cut(error, MAX_ERROR_CHARS)],
    )


def parse_dead(reply: Any) -> str | None:
    """The dead letter's id, or None when the entry was no longer pending."""
    return text(reply) or None


def touch_call(sk: ShardKeys, group: str, consumer: str, entry_ids: Sequence[str]) -> ScriptCall:
    return ScriptCall(ScriptName.TOUCH, [sk.outcomes], [group, consumer, *entry_ids])


def ack_call(
    sk: ShardKeys, group: str, entry_ids: Sequence[str], failed_before: Sequence[str]
) -> ScriptCall:
    """Acknowledge ``entry_ids``; drop the errors kept of ``failed_before`` (lua/ack.lua)."""
    return ScriptCall(
        ScriptName.ACK,
        [sk.outcomes, sk.errors(group)],
        [group, len(entry_ids), *entry_ids, *failed_before],
    )


def parse_touch(reply: Sequence[Any]) -> list[str]:
    """The ids no longer pending for the consumer."""
    return [text(x) for x in reply]


def redeliver_call(sk: ShardKeys, dead_id: str) -> ScriptCall:
    return ScriptCall(ScriptName.REDELIVER, [sk.dead, sk.outcomes], [dead_id])


def parse_redeliver(reply: Any) -> str | None:
    return text(reply) or None


def leave_group_call(sk: ShardKeys, group: str, consumer: str) -> ScriptCall:
    return ScriptCall(ScriptName.LEAVE_GROUP, [sk.outcomes], [group, consumer])
