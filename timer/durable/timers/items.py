"""The gate a timer passes before it is sent: each field of
:mod:`timer.durable.model.fields` checked, and the timer packed as ``schedule.lua`` takes
it (a :class:`ScheduleItem`).

:func:`schedule_item` walks the declaration: a field given is checked by its entry in
:data:`CHECKS` and put in its slot; the spec is cut after its last slot that does not
hold the stored default. What ties fields together (``need`` within the watch keys,
the watch keys on the timer's shard) is checked after. Everything raises
:class:`~timer.errors.InvalidInput` and nothing is sent.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import InvalidInput, quoted
from ..model.checks import check_bool, check_instant, check_int, check_ms, too_long
from ..model.codec import encode_payload
from ..model.fields import (
    FIELDS,
    FIRST_STORED,
    MAX_DEADLINE_MS,
    MAX_PRIORITY,
    MAX_URL_BYTES,
    MAX_WATCH_KEYS,
    MIN_PRIORITY,
    NAMES,
    STORED,
    STORED_DEFAULTS,
)
from ..model.keys import check_name

if TYPE_CHECKING:
    from ..model.namespace import Namespace


class ScheduleItem(NamedTuple):
    """One validated timer for ``schedule.lua``, with what its parser needs (a tuple:
    built per item of ``schedule_many``, it must be cheap)."""

    timer_id: str
    shard: int
    spec: tuple[Any, ...]  # (id, mode, value, payload[, need, rearm, watch, trace, url])


def check_watch(watch: object) -> list[str]:
    """A timer's watch keys, sorted and without repeats; InvalidInput otherwise."""
    if watch is None or (type(watch) is tuple and not watch):  # the default: cheap
        return []
    if isinstance(watch, str | bytes | bytearray | Mapping) or not isinstance(watch, Iterable):
        raise InvalidInput(
            f"watch must be a list of keys (text), got {type(watch).__name__}: {quoted(watch, 80)}"
        )
    keys: set[str] = set()
    for key in watch:
        keys.add(check_name("watch key", key))
        if len(keys) > MAX_WATCH_KEYS:
            raise InvalidInput(
                f"watch holds more than {MAX_WATCH_KEYS} keys, the most a timer may wait on "
                "(notify one key that stands for the group instead)"
            )
    return sorted(keys)


def check_origin(origin: object) -> str:
    """``schedule_many``'s origin token: text of at most 256 bytes (may be empty)."""
    return "" if origin == "" else check_name("origin", origin)


def url_shape(scheme: str, host: str | None) -> str:
    """What a refused URL is, for its error, without the URL itself (it may hold a
    password): its scheme and whether it has a host."""
    said = f"scheme {quoted(scheme)}" if scheme else "no scheme"
    return said if host else f"{said} and no host"


_C0_AND_SPACE = "".join(map(chr, range(33)))


def url_problem(url: str) -> str | None:
    """What is wrong with a URL an outcome is POSTed to, said without the URL (it may
    hold a password), or None: it must be http(s) with a host, a port that is a
    number, and no credentials."""
    try:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:  # an invalid IPv6 literal
        scheme, host = "", None
    # u:pass@host parses with scheme "u", a user's name: a scheme is said only before //
    # (the parse lower-cases it and drops the control characters and spaces before it)
    if not url.lower().lstrip(_C0_AND_SPACE).startswith(f"{scheme}://"):
        scheme = ""
    if scheme not in ("http", "https") or not host:
        return f"must be http:// or https:// with a host, got {url_shape(scheme, host)}"
    # Any @ is taken for the end of a userinfo, wherever the parse puts it: a password
    # holding a / ? or # ends the parse's host early (https://u:pa/ss@host parses as
    # host u, port "pa"), and such a URL would go to another host than meant.
    if "@" in url:
        return (
            "must not carry credentials (a user or password before an @; write an @ in "
            "a path as %40): receivers check the signature instead"
        )
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    return "must have a port that is a number from 1 to 65535" if port == 0 else None


def check_callback_url(value: object) -> str:
    """An http(s) URL with a host, a port that is a number and no credentials, at most
    2048 bytes."""
    # a refusal never shows the URL (it may hold a password), only what is wrong with it
    if not isinstance(value, str):
        raise InvalidInput(f"callback_url must be an http(s) URL, got {type(value).__name__}")
    size = len(value.encode("utf-8", "replace"))
    if size > MAX_URL_BYTES:
        raise InvalidInput(
            f"callback_url must be an http(s) URL of at most {MAX_URL_BYTES} bytes, got {size}"
        )
    problem = url_problem(value)
    if problem is not None:
        raise InvalidInput(f"callback_url {problem}")
    return value


TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


def check_traceparent(value: object) -> str:
    """A W3C ``traceparent`` header value (``00-<trace id>-<span id>-<flags>``)."""
    if not isinstance(value, str) or not TRACEPARENT.match(value) or value.startswith("ff"):
        raise InvalidInput(
            f"traceparent must be a W3C trace context such as "
            f'"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", got {quoted(value, 100)}'
        )
    return value


def _check_flag(name: str) -> Callable[[object], int]:
    """A flag field's check: True or False, stored as 1 or 0."""
    return lambda value: int(check_bool(name, value))


def check_text(name: str, schema: Mapping[str, Any]) -> Callable[[object], object]:
    """The check of a text field its JSON Schema says enough of: text of at most
    ``maxLength`` characters that UTF-8 can hold (so msgpack can)."""
    most = schema.get("maxLength")

    def check(value: object) -> object:
        if not isinstance(value, str):
            raise InvalidInput(f"{name} must be text, got {type(value).__name__}")
        if most is not None and len(value) > most:
            raise too_long(name, len(value), most)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"{name} is not valid text ({exc.reason} at {exc.start})") from None
        return value

    return check


# The check of each optional field with a slot of its own: the value it stores. A text
# field the declaration says enough of (its type and maxLength) needs no entry here.
CHECKS: dict[str, Callable[[object], object]] = {
    "need": lambda value: check_int("need", value, 1),  # and within the watch keys
    "rearm": _check_flag("rearm"),
    "watch": check_watch,
    "traceparent": check_traceparent,
    "callback_url": check_callback_url,
    "max_total_ms": lambda value: check_ms("max_total_ms", value, 1, MAX_DEADLINE_MS),
    "debounce": _check_flag("debounce"),
    "priority": lambda value: check_int("priority", value, MIN_PRIORITY, MAX_PRIORITY),
}
for _slot, _name in STORED:
    if _name not in CHECKS and FIELDS[_name].schema.get("type") == "string":
        CHECKS[_name] = check_text(_name, FIELDS[_name].schema)
# Given but not a field of the spec's tail: the id, the time and the payload.
_HEAD = frozenset(n for n, f in FIELDS.items() if f.slot is None or f.slot < FIRST_STORED)
# name -> (its place after the payload, its default as given, its check): one lookup
_STEPS = {name: (slot - FIRST_STORED, FIELDS[name].default, CHECKS[name]) for slot, name in STORED}
_NEED, _WATCH = _STEPS["need"][0], _STEPS["watch"][0]


def check_when(ns: Namespace, delay_ms: object, deadline_ms: object) -> tuple[str, int]:
    if (delay_ms is None) == (deadline_ms is None):
        raise InvalidInput("give exactly one of delay_ms (relative) or deadline_ms (absolute)")
    if delay_ms is not None:
        return "in", check_int("delay_ms", delay_ms, 0, ns.settings.max_delay_ms)
    return "at", check_instant("deadline_ms", deadline_ms, MAX_DEADLINE_MS)


def schedule_item(ns: Namespace, spec: Mapping[str, object]) -> ScheduleItem:
    """Validate one timer (a :class:`~timer.durable.model.fields.TimerSpec`) for
    ``schedule_call``; InvalidInput, nothing sent."""
    if not NAMES.issuperset(spec):
        extra = sorted(quoted(k, 80) for k in set(spec) - NAMES)
        raise InvalidInput(
            f"unknown field(s) [{', '.join(extra)}] in timer {quoted(spec.get('id'), 200)}; a "
            f"timer takes {', '.join(FIELDS)}"
        )
    get = spec.get
    tid = check_name("timer id", get("id"))
    mode, value = check_when(ns, get("delay_ms"), get("deadline_ms"))
    data = encode_payload(get("payload"), ns.settings.max_payload_bytes)
    shard = ns.shard_of(tid)
    given = [name for name in spec if name not in _HEAD]
    if not given:  # the common timer: nothing after its payload
        return ScheduleItem(tid, shard, (tid, mode, value, data))
    tail = list(STORED_DEFAULTS)
    end = 0  # the spec ends after the last slot that is not its stored default
    for name in given:
        raw = spec[name]
        place, default, check = _STEPS[name]
        if raw is not None and raw is not default:
            stored = tail[place] = check(raw)
            if place >= end and stored != STORED_DEFAULTS[place]:
                end = place + 1
    _check_together(ns, tid, shard, tail)
    return ScheduleItem(tid, shard, (tid, mode, value, data, *tail[:end]))


def _check_together(ns: Namespace, tid: str, shard: int, tail: list[Any]) -> None:
    """``need`` within the watch keys, and every watch key on the timer's shard."""
    need, keys = tail[_NEED], tail[_WATCH]
    if keys and need > len(keys):
        raise InvalidInput.about(
            "{0} {need}, but only {count} {1} key{s} given",
            "need",
            "watch",
            need=need,
            count=len(keys),
            s=" was" if len(keys) == 1 else "s were",
        )
    if not keys and need != 1:
        raise InvalidInput.about(
            "{0} {need} makes no sense without {1} keys (leave it at 1)", "need", "watch", need=need
        )
    for key in keys:
        if ns.shard_of(key) != shard:
            raise InvalidInput(
                f"watch key {quoted(key)} routes to shard {ns.shard_of(key)} but timer "
                f"{quoted(tid)} routes to shard {shard}; give both the same hash tag, e.g. "
                'id "job:{42}" and key "job:{42}:done"'
            )


def timer_spec(
    timer_id: object, delay_ms: object, deadline_ms: object, options: Mapping[str, object]
) -> dict[str, object]:
    """``schedule(timer_id, delay_ms, deadline_ms=..., **options)`` as one spec (what
    :func:`schedule_item` takes); an ``id`` among the options is refused, not dropped."""
    if "id" in options:
        raise InvalidInput(
            f"give the timer id once, as the first argument (not id={quoted(options['id'], 80)})"
        )
    return {"id": timer_id, "delay_ms": delay_ms, "deadline_ms": deadline_ms, **options}


def schedule_item_of(ns: Namespace, item: object) -> ScheduleItem:
    """``schedule_item`` for one item of ``schedule_many`` (a mapping with an ``id``).

    Whatever the item is, this returns its ScheduleItem or raises InvalidInput, so a bad
    item costs only its own slot: nothing of a batch is sent while an item can still fail.
    """
    if type(item) is not dict and not isinstance(item, Mapping):  # the ABC check is slow
        raise InvalidInput(f"each item must be a mapping with an 'id', got {quoted(item, 200)}")
    try:
        return schedule_item(ns, item)
    except InvalidInput:
        raise
    except Exception as exc:
        raise InvalidInput(f"item could not be read ({type(exc).__name__}: {exc})") from None
