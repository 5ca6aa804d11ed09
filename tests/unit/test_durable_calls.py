"""The durable layer's builders and parsers, without a server: argument order, errors, events."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from timer import Capped, DuplicateTimer, Fenced, HeartbeatCapped, InvalidInput
from timer.durable.groups import streams as groups
from timer.durable.groups.calls import (
    MAX_ERROR_CHARS,
    MAX_KEPT_ERROR_CHARS,
    claim_call,
    dead_call,
    leave_group_call,
    parse_claim,
    parse_dead,
    parse_retry,
    parse_touch,
    redeliver_call,
    retry_call,
    touch_call,
)
from timer.durable.model import codec, steps
from timer.durable.model.codec import decode_pending, decode_result
from timer.durable.model.entries import (
    for_group,
    outcome_from_entry,
    parse_event,
    parse_events,
    parse_ref,
)
from timer.durable.model.fields import FIELDS, KEPT_PENDING
from timer.durable.model.keys import NamespaceKeys
from timer.durable.model.leader import Event
from timer.durable.model.models import ClientSettings, Meta, Outcome
from timer.durable.model.namespace import Namespace
from timer.durable.model.scripts import ErrorCode, ScriptName, header, script_error
from timer.durable.shards import ops as shard_ops
from timer.durable.shards.calls import Hand, fire_call, parse_fire, parse_lease_acquire, parse_sweep
from timer.durable.timers import ops
from timer.durable.timers.calls import (
    heartbeat_call,
    parse_heartbeat,
    parse_reschedule,
    reschedule_call,
)
from timer.durable.timers.items import check_when
from timer.errors import instant_text

NS = Namespace(NamespaceKeys("ns"), Meta(shards=8, bucket_ms=1000), ClientSettings())
LUA = resources.files("timer.durable.model") / "lua"


def header_errors(name: ScriptName) -> set[str]:
    """The codes an ``Errors`` block of a script's header names (one per line)."""
    codes: set[str] = set()
    in_errors = False
    for line in header(name).splitlines():
        rest = line
        if line.startswith("Errors"):
            in_errors = True
            rest = line[len("Errors") :]
        elif line[:1].strip():  # the next heading (Atomic, Cost…) ends the block
            in_errors = False
        if in_errors and rest.strip():
            codes.add(rest.split()[0])
    return codes


def test_error_enum_matches_every_lua_header_and_reply() -> None:
    """Every code in a script's Errors header or error_reply is in ErrorCode, and back."""
    named = set().union(*(header_errors(n) for n in ScriptName))
    replied: set[str] = set()
    for path in [*LUA.iterdir(), *(LUA / "include").iterdir()]:  # scripts and includes
        if path.name.endswith(".lua"):
            replied |= set(re.findall(r"error_reply\('([A-Z]+) ", path.read_text()))
    assert named == replied == {code.value for code in ErrorCode}


def test_script_errors_map_to_one_exception_each() -> None:
    """A script's error reply becomes its TimerError; Redis's own errors are not ours."""
    assert isinstance(script_error("FENCED worker w does not hold"), Fenced)
    assert isinstance(script_error("CONFLICT timer x is pending"), DuplicateTimer)
    # schedule.lua names the fields that differ last, whatever the id holds
    dup = script_error("CONFLICT timer a (b) c is pending with other parameters (payload,need)")
    assert isinstance(dup, DuplicateTimer) and (dup.timer_id, dup.differ) == (
        "a (b) c",
        ("payload", "need"),
    )
    assert str(dup).startswith('timer "a (b) c" is pending with other parameters: its payload')
    err = script_error("TOOFAR deadline 9 is more than 5 ms from now")
    assert isinstance(err, InvalidInput)
    assert str(err).startswith("deadline 1970-01-01T00:00:00.009Z is more than 5ms from now")
    assert script_error("ERR unknown command") is None
    assert script_error("BUSYGROUP Consumer Group name already exists") is None


def test_an_instant_in_a_message_is_a_time_not_epoch_ms() -> None:
    """A cap, a deadline too far and one before 1970 read as epoch ms ("it falls due at
    its cap, 1796302114856 (epoch ms)": trial); each is a UTC time to the millisecond now,
    the number kept in the error's field; one no datetime can name, its number, said so."""
    assert instant_text(1796302114856) == "2026-12-03T12:48:34.856Z"
    assert instant_text(0) == "1970-01-01T00:00:00.000Z"
    assert instant_text(10**15) == "1000000000000000 (epoch ms, past year 9999)"
    with pytest.raises(HeartbeatCapped) as beat:
        parse_heartbeat(NS, [b"capped", b"1796302114856", b"0"], heartbeat_call(NS, "j:{1}", 5))
    assert beat.value.deadline_ms == 1796302114856
    assert str(beat.value) == (
        'timer "j:{1}" would pass its cap (created + max_total_ms): refused; it falls due '
        "at its cap, 2026-12-03T12:48:34.856Z, and no heartbeat moves it later"
    )
    with pytest.raises(Capped) as moved:
        parse_reschedule(NS, [b"pastcap", b"1796302114856"], reschedule_call(NS, "j:{1}", 5, None))
    assert moved.value.deadline_ms == 1796302114856
    assert "after its cap, 2026-12-03T12:48:34.856Z (created + max_total_ms)," in str(moved.value)
    # named as a caller names the cap (the CLI: --max-total), the cap itself kept
    named = moved.value.naming({"max_total_ms": "--max-total"})
    assert "(created + --max-total)," in str(named) and named.deadline_ms == 1796302114856
    err = script_error("TOOFAR deadline 4070908800000 is more than 316224000000 ms from now")
    assert str(err) == (
        "deadline 2099-01-01T00:00:00.000Z is more than 3660d (about 10 years) from now: "
        "give a nearer one"
    ), err
    with pytest.raises(InvalidInput) as early:
        check_when(NS, None, -1)
    assert str(early.value) == (
        "deadline_ms must be 1970-01-01T00:00:00.000Z (epoch ms 0) or later, "
        "got 1969-12-31T23:59:59.999Z"
    )


def test_every_script_has_a_builder_named_in_its_header() -> None:
    """Each ScriptName has a file with a contract header listing KEYS and Returns."""
    for name in ScriptName:
        text = header(name)
        assert text.startswith(f"--[[ {name.value}:"), name
        assert "KEYS[1]" in text and "Returns" in text, name


def test_fire_call_keys_follow_the_header_order() -> None:
    """fire's KEYS are t, buckets, out, lease, epoch, schedules, their queue, and its ARGV
    P, worker, epoch, bucket_ms, result_ttl_ms, ahead (0 when not given, never negative),
    the plans ('' for none), the hand (0 and two empty names for none), then the ids, as
    its header says."""
    sk = NS.shard(3)
    call = fire_call(sk, "w1", 7, ["a", "b"], bucket_ms=1000, ttl_ms=60_000, ahead=40)
    assert call.script is ScriptName.FIRE
    assert call.keys == [
        sk.timers, sk.buckets, sk.outcomes, sk.lease, sk.epoch, sk.schedules, sk.schedule_queue
    ]  # fmt: skip
    assert call.args == [sk.prefix, "w1", 7, 1000, 60_000, 40, "", 0, "", "", "a", "b"]
    handing = fire_call(sk, "w1", 7, ["a"], bucket_ms=1000, ttl_ms=1, hand=Hand(3, "g", "c"))
    assert handing.args[7:] == [3, "g", "c", "a"]
    assert fire_call(sk, "w1", 7, ["a"], bucket_ms=1000, ttl_ms=60_000).args[5] == 0
    assert fire_call(sk, "w1", 7, ["a"], bucket_ms=1000, ttl_ms=1, ahead=-3).args[5] == 0


def test_parsers_type_the_replies() -> None:
    """Replies of fire, sweep and the lease scripts come back as typed results."""
    tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    handed = [[b"1-0", [b"i", b"a", b"r", b"x"]]]
    fired = parse_fire(
        [[b"a"], [b"b c", b"1700"], [b"{s}@9", b"9"], 1, [b"a", tp, b"12"], 5, handed]
    )
    assert fired.handed == [("1-0", {b"i": b"a", b"r": b"x"})]
    assert fired.fired == ["a"] and fired.early == {"b c": 1700}
    assert fired.armed == {"{s}@9": 9} and fired.queued == 1
    assert fired.traced == [("a", tp.decode(), 12)]
    swept = parse_sweep([[b"x", b"5", b"y", b"6"], 1, 3, 2, [b"{s}@7", b"8"], []])
    assert swept.fired == [("x", 5), ("y", 6)] and swept.more and swept.moved == 3
    assert swept.queued == 2 and swept.held == {"{s}@7": 8} and swept.traced == []
    got = parse_lease_acquire([1, 4, b"99", 1])
    assert got.epoch == 4 and got.handover
    assert not parse_lease_acquire([1, 5, b"99", 0]).handover
    held = parse_lease_acquire([0, b"w2", 1200, b"99"])
    assert (held.acquired, held.holder, held.pttl_ms) == (False, "w2", 1200)


def test_events_parse_with_spaces_in_ids() -> None:
    """The three event forms of lua/include/records.lua parse; an id may contain spaces."""
    assert parse_event("S 1700 job one") == Event("scheduled", "job one", deadline_ms=1700)
    assert parse_event("R 1800 j") == Event("rescheduled", "j", deadline_ms=1800)
    assert parse_event("X expired a b") == Event("decided", "a b", outcome="expired")
    with pytest.raises(ValueError, match="not a tickwheel event"):
        parse_event("Q 1 x")  # priorities come only as a batch (parse_events)
    ranked = parse_events("Q 5 7 job one -100 1 x")  # #43: after the S or M event
    assert ranked == [Event("prioritized", "job one", priority=5),
                      Event("prioritized", "x", priority=-100)]  # fmt: skip
    with pytest.raises(ValueError, match="not a tickwheel event batch"):
        parse_events("Q 5 9 job one")  # an id shorter than its length


def test_events_channel_names_its_shard() -> None:
    """A shard's events channel maps back to the shard; other channels map to None."""
    keys = NS.keys
    assert all(keys.shard_of_channel(keys.shard(s).events) == s for s in range(8))
    assert keys.shard_of_channel(keys.key_channel("job:{1}:done")) is None
    assert NamespaceKeys("other").shard_of_channel(keys.shard(1).events) is None


def test_bad_input_fails_before_any_step() -> None:
    """An operation validates before its first step, so bad input sends (writes) nothing."""
    bad = [
        ops.schedule(NS, {"id": "", "delay_ms": 5}),
        ops.schedule(NS, {"id": "a", "delay_ms": 5, "watch": ["b"]}),  # another shard
        ops.cancel(NS, 42),
        ops.reschedule(NS, "a", None, None),
        ops.notify(NS, "x" * 300),
        shard_ops.trim_outcomes(NS, -1, keep_unread=True, shards=None),
    ]
    assert NS.shard_of("a") != NS.shard_of("b")
    for op in bad:
        with pytest.raises(InvalidInput):
            next(op)


def test_schedule_many_sends_one_call_per_shard_and_keeps_errors_in_place() -> None:
    """schedule_many yields one pipeline: one call per shard, its timers packed once; a
    bad item keeps its error, an error reply lands in its timer's slot, and a failed call
    fails each of its timers."""
    ids = [f"t{i}" for i in range(40)]
    one = [i for i in ids if NS.shard_of(i) == NS.shard_of("t0")][:3]
    other = next(i for i in ids if NS.shard_of(i) != NS.shard_of("t0"))
    items: list[dict[str, Any]] = [
        {"id": one[0], "delay_ms": 1},
        {"id": ""},
        {"id": other, "delay_ms": 2},
        {"id": one[1], "delay_ms": 3},
        {"id": one[2], "delay_ms": 4},
    ]
    op = ops.schedule_many(NS, items, "batch-1")
    send = next(op)
    assert isinstance(send, steps.Send)
    step = send.pipeline
    assert step.errors_in_slots
    calls = step.calls
    assert len(calls) == 2  # two shards, one call each
    first, second = calls
    assert isinstance(first, steps.ScriptCall) and isinstance(second, steps.ScriptCall)
    # four slots a timer, flat (#55): its id first
    assert msgpack.unpackb(first.args[5], raw=True)[::4] == [i.encode() for i in one]
    assert msgpack.unpackb(second.args[5], raw=True)[0] == other.encode()
    sk = NS.shard(NS.shard_of(one[0]))
    assert first.keys == [sk.timers, sk.buckets]
    assert first.args[4] == "batch-1"
    conflict = Exception("CONFLICT timer t1 is pending with other parameters")
    assert op.send("ticket") == steps.Collect("ticket")
    with pytest.raises(StopIteration) as done:
        op.send([[10, conflict, [b"pending", b"30", b"5", b"old"]], Fenced("x")])
    results = done.value.value
    assert results[0].deadline_ms == 10 and results[0].created and results[0].origin == "batch-1"
    assert isinstance(results[1], InvalidInput)
    assert isinstance(results[2], Fenced)
    assert isinstance(results[3], DuplicateTimer)
    assert not results[4].created and results[4].origin == "old"


def test_schedule_many_sends_the_next_pipeline_before_collecting_the_one_before() -> None:
    """Pipelines of pipeline_batch timers: each is sent before the one ahead of it is
    collected (the server runs one while the client packs the next), collected oldest
    first, and every result lands in its item's slot."""
    ns = Namespace(NS.keys, NS.meta, dataclasses.replace(NS.settings, pipeline_batch=2))
    items = [{"id": f"s{i}", "delay_ms": 1_000 + i} for i in range(7)]
    op = ops.schedule_many(ns, items, "")
    seen: list[str] = []
    sent: dict[str, list[list[str]]] = {}  # ticket -> the ids of each call of its pipeline
    reply: Any = None
    while True:
        try:
            step = op.send(reply)
        except StopIteration as done:
            results = done.value
            break
        if isinstance(step, steps.Send):
            ticket = f"t{len(sent)}"
            sent[ticket] = [
                [t.decode() for t in msgpack.unpackb(call.args[5], raw=True)[::4]]
                for call in step.pipeline.calls
                if isinstance(call, steps.ScriptCall)
            ]
            seen.append(f"send {ticket}")
            reply = ticket
        else:
            assert isinstance(step, steps.Collect)
            seen.append(f"collect {step.ticket}")
            reply = [[1_000 + int(tid[1:]) for tid in call] for call in sent[step.ticket]]
    assert seen == ["send t0", "send t1", "collect t0", "send t2", "collect t1",
                     "send t3", "collect t2", "collect t3"]  # fmt: skip
    assert sorted(i for calls in sent.values() for ids in calls for i in ids) == [
        f"s{i}" for i in range(7)
    ]
    assert [r.id for r in results] == [f"s{i}" for i in range(7)]
    assert [r.deadline_ms for r in results] == [1_000 + i for i in range(7)]


def test_batched_schedule_events_parse_by_byte_length() -> None:
    """A schedule call's one event names each id's byte length: any id survives it."""
    ids = ["plain", "with space", "é and 日本", "M 1 2 x", " "]
    msg = "M" + "".join(f" {1000 + n} {len(i.encode())} {i}" for n, i in enumerate(ids))
    events = parse_events(msg)
    assert [(e.kind, e.timer_id, e.deadline_ms) for e in events] == [
        ("scheduled", i, 1000 + n) for n, i in enumerate(ids)
    ]
    assert parse_events("S 5 a b") == [Event("scheduled", "a b", deadline_ms=5)]
    for bad in ("M 5 9 short", "M x 1 a", "M 5 1 ab"):
        with pytest.raises(ValueError, match="event batch"):
            parse_events(bad)


def test_group_calls_keep_every_key_in_the_shard() -> None:
    """The consumer-group scripts' KEYS all carry the shard's hash tag (one cluster
    slot), in their headers' order; their replies parse into typed values."""
    sk = NS.shard(2)
    calls = [
        claim_call(sk, "g", "c", count=5, min_idle_ms=100),
        retry_call(sk, "g", "1-0", 50),
        dead_call(sk, "g", "1-0", "c", attempts=3, error="x" * 5000),
        touch_call(sk, "g", "c", ["1-0", "2-0"]),
        redeliver_call(sk, "9-0"),
        leave_group_call(sk, "g", "c"),
    ]
    for call in calls:
        assert all(k.startswith(sk.prefix) for k in call.keys), call
    assert calls[0].keys == [sk.outcomes, sk.retries("g")]
    assert calls[0].args == ["g", "c", 5, 100, "", "-", 1]
    assert calls[1].keys == [sk.outcomes, sk.retries("g"), sk.errors("g")]
    assert calls[2].keys == [sk.outcomes, sk.retries("g"), sk.dead, sk.errors("g")]
    assert len(calls[2].args[4]) == MAX_ERROR_CHARS  # a huge traceback is cut
    kept = retry_call(sk, "g", "1-0", 50, attempt=2, error="y" * 5000)
    assert kept.args[3] == 2 and len(kept.args[4]) == MAX_KEPT_ERROR_CHARS
    assert kept.args[5] == 0 and retry_call(sk, "g", "1-0", 0, counted=False).args[5] == 1
    cursor, taken = parse_claim([b"(5-0", [b"4-0", [b"id", b"a", b"outcome", b"x"], 3]])
    assert cursor == "(5-0" and taken == [("4-0", {b"id": b"a", b"outcome": b"x"}, 3)]
    assert parse_retry(0) is None and parse_retry(1700) == 1700
    assert parse_dead(b"") is None and parse_touch([b"1-0"]) == ["1-0"]


def test_dead_letter_refs_are_checked() -> None:
    assert parse_ref("3/1700000000000-0", 4) == (3, "1700000000000-0")
    for bad in ("4/1-0", "x/1-0", "3/abc", "3", "", None, "3/1-0-0"):
        with pytest.raises(InvalidInput, match="dead letter ref"):
            parse_ref(bad, 4)
    # a ref of the form, on a shard the namespace lacks: said so, not "must be <shard>/<id>"
    with pytest.raises(InvalidInput, match=r"names shard 16, and the namespace has 16 \(0 to 15\)"):
        parse_ref("16/1-0", 16)


def test_outcome_entries_for_groups_and_redeliveries() -> None:
    """A redelivered entry is for its group only and keeps the first entry's key."""
    record = msgpack.packb([1, 5, 1, b"\xc0", 0], use_bin_type=False)  # expired at 6
    fields = {b"i": b"t", b"r": record, b"only": b"g", b"from": b"1-0"}
    o = outcome_from_entry(1, b"9-0", fields, attempt=2)
    assert (o.attempt, o.redelivery_of, o.idempotency_key) == (2, "1-0", "1/1-0")
    assert for_group(fields, "g") and not for_group(fields, "other")
    plain = outcome_from_entry(
        1, b"9-0", {k: v for k, v in fields.items() if k not in (b"only", b"from")}
    )
    assert plain.idempotency_key == "1/9-0" and for_group({}, "any")


def test_records_decode_with_their_defaults() -> None:
    """decode_pending/decode_result fill a compact record's left-out defaults; a record
    that is not an array (the maps of an earlier release, which migrate converts) is
    refused, not guessed at."""
    short = msgpack.packb([5, b"\x01", 3], use_bin_type=False)  # created 3 ms before
    assert decode_pending(short) == {
        "deadline_ms": 5,
        "payload": b"\x01",
        "created_ms": 2,
        "origin": "",
        "got": [],
        "absorbed": 0,
        **{name: FIELDS[name].stored for name in KEPT_PENDING},  # each declared one left out
    }
    n = len(codec._PENDING)  # a debounce window's count, then a priority (#43)
    counted = decode_pending(msgpack.packb([5, b"\x01", 3, "", 1, [], [], "", "", "", 0, 7]))
    assert (n, counted["absorbed"], counted["priority"]) == (13, 7, 0)
    ranked = decode_pending(msgpack.packb([5, b"\x01", 3, "", 1, [], [], "", "", "", 0, 0, -4]))
    assert (ranked["absorbed"], ranked["priority"]) == (0, -4)
    assert (
        decode_result(msgpack.packb([1, 5, 4, b"\x01", 3, "", [], "", "", "", 3]))["absorbed"] == 3
    )
    assert (
        decode_result(msgpack.packb([1, 5, 4, b"\x01", 3, "", [], "", "", "", 0, 9]))["priority"]
        == 9
    )
    watched = decode_pending(msgpack.packb([5, b"\x01", 3, "o", 2, ["a", "b"], ["a"]]))
    assert (watched["need"], watched["watch"], watched["got"]) == (2, ["a", "b"], ["a"])
    assert watched["origin"] == "o"
    result = decode_result(msgpack.packb([3, 5, 4, b"\x01", 3]))
    assert (result["outcome"], result["deadline_ms"], result["decided_ms"]) == ("completed", 5, 9)
    assert result["created_ms"] == 2
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = decode_result(msgpack.packb([1, 5, 4, b"\x01", 3, "", [], tp]))
    assert traced["traceparent"] == tp and traced["got"] == [] and result["traceparent"] == ""
    hooked = decode_result(msgpack.packb([1, 5, 4, b"\x01", 3, "", [], "", "https://h/x"]))
    assert hooked["callback_url"] == "https://h/x" and hooked["traceparent"] == ""
    assert result["callback_url"] == ""
    assert decode_pending(short)["got"] is not decode_pending(short)["got"]  # never shared
    for old in ({"d": 5, "p": b"\x01", "c": 2}, {"o": "expired", "d": 5, "t": 9, "p": b""}):
        with pytest.raises(ValueError, match="msgpack array"):
            (decode_pending if "t" not in old else decode_result)(msgpack.packb(old))


_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary(),
    st.lists(st.integers(), max_size=2),
)  # fmt: skip


@given(st.dictionaries(st.one_of(st.text(), st.integers(), st.tuples(st.integers())), _scalar))
def test_a_flat_payloads_shortcut_agrees_with_the_full_check(payload: dict[Any, Any]) -> None:
    """encode_payload skips the tree walk and the read-back for a map of text keys to
    non-float scalars; for any map it must refuse and accept what the full check does."""
    try:
        full: bytes | str = msgpack.packb(payload, use_bin_type=True)
        codec._check_tree(payload)
        codec.decode_payload(full)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, InvalidInput) as exc:
        full = type(exc).__name__
    try:
        got: bytes | str = codec.encode_payload(payload)
    except InvalidInput:
        got = "refused"
    if isinstance(full, bytes):
        assert got == full
    else:
        assert got == "refused", (payload, full)


def test_the_common_payloads_take_the_shortcut() -> None:
    """A map of text keys to non-float scalars is packed and not walked; the rest is."""
    assert codec._flat({"job": 42, "name": "x", "raw": b"\x00", "ok": True, "none": None})
    assert codec._flat({})
    walked: list[object] = [{"f": 1.5}, {1: "a"}, {"l": [1]}, {"d": {}}, [1], {"s": _Str("x")}]
    for payload in walked:
        assert not codec._flat(payload), payload


class _Str(str):
    pass


def test_acknowledgements_are_a_script_the_wait_covers_only_when_the_client_waits() -> None:
    """ack_many asks its driver whether it waits for durability: if so, one lua/ack.lua
    a stream (that the wait after it always covers); if not, the plain XACK, and the
    errors of retried entries dropped with HDEL. Both count what was not pending."""

    def delivery(shard: int, entry: str, attempt: int) -> groups.Delivery:
        o = Outcome("t", "expired", 0, 0, None, shard, entry_id=entry, attempt=attempt)
        return groups.Delivery(o, NS.shard(shard), "g")

    batch = [delivery(0, "1-0", 1), delivery(0, "2-0", 3), delivery(1, "3-0", 1)]
    s0, s1 = NS.shard(0), NS.shard(1)
    op = groups.ack_many(batch)
    assert isinstance(op.send(None), steps.Waits)
    plain = op.send(False)
    assert isinstance(plain, steps.Pipeline)
    assert [(c.name, c.args) for c in plain.calls if isinstance(c, steps.Command)] == [
        ("xack", (s0.outcomes, "g", "1-0", "2-0")),
        ("xack", (s1.outcomes, "g", "3-0")),
        ("hdel", (s0.errors("g"), "2-0")),
    ]
    with pytest.raises(StopIteration) as done:
        op.send([2, 0, 1])
    assert done.value.value == 1  # 3-0 was not pending
    op = groups.ack_many(batch)
    op.send(None)
    waited = op.send(True)
    assert isinstance(waited, steps.Pipeline)
    assert [
        (c.script, c.keys, c.args) for c in waited.calls if isinstance(c, steps.ScriptCall)
    ] == [
        (ScriptName.ACK, [s0.outcomes, s0.errors("g")], ["g", 2, "1-0", "2-0", "2-0"]),
        (ScriptName.ACK, [s1.outcomes, s1.errors("g")], ["g", 1, "3-0"]),
    ]
    with pytest.raises(StopIteration) as done:
        op.send([2, 1])
    assert done.value.value == 0
