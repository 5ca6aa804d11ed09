"""When a recurring schedule's occurrences fall: cron or interval, in any time zone.

A :class:`Recurrence` is pure arithmetic on epoch milliseconds (no I/O, no clock):
``next_after(t)`` is the first occurrence strictly after ``t``. The worker that fires an
occurrence computes the next one with it and arms it in the same script call.

**Intervals** (``every``) are absolute time: occurrences at ``anchor + offset + k *
every``, where the anchor is ``start`` if given, else the Unix epoch (so ``every=30s``
falls on :00 and :30 of each minute). Daylight saving time does not move them.

**Cron** expressions (5 fields ``minute hour day month weekday``, or 6 with the
seconds first; parsed by ``cronsim``, which also takes ``L``, ``LW``, ``#`` and names)
match local wall-clock time in the schedule's time zone (IANA, ``zoneinfo``):

- a wall time that happens twice (the autumn repeat) fires once, at its first instant;
- a wall time that does not exist (the spring gap) fires at the first minute after the
  jump (Debian cron's rule); every skipped time together fires once there;
- leap days, month ends and ``L`` are the parser's (``0 9 29 2 *`` fires on leap years).

So a cron that fires every minute or hour leaves a hole in the autumn repeat (its wall
times were already fired); use ``every=`` for what must run at a steady pace.

**Jitter** delays an occurrence by up to ``jitter`` ms, never advances it: a fixed
amount per (schedule, occurrence), so every computation of it agrees. An occurrence is
named by its nominal time (``occurrence_id``); its deadline is that time plus jitter.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from ...errors import InvalidInput, instant_text, quoted
from ..model.durations import MAX_DURATION_MS, format_duration_ms, parse_duration_ms

MINUTE = timedelta(minutes=1)
MAX_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z: what datetime can name
MAX_EVERY_MS = MAX_DURATION_MS  # ten years, the longest a timer may wait


def duration_ms(name: str, value: object, *, minimum: int, maximum: int = MAX_EVERY_MS) -> int:
    """A duration given as whole milliseconds or as text (``30s``)."""
    if isinstance(value, str):
        try:
            value = parse_duration_ms(value)
        except ValueError as exc:
            raise InvalidInput.about("{0}: {error}", name, error=exc) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput.about(
            '{0} must be whole milliseconds or a duration such as "30s", got {got}',
            name,
            got=quoted(value, 40),
        )
    if value < minimum:
        raise InvalidInput.about(
            "{0} must be at least {least} (got {got})", name, least=_ms(minimum), got=_ms(value)
        )
    if value > maximum:
        raise InvalidInput.about(
            "{0} must be at most {most} (got {got})", name, most=_ms(maximum), got=_ms(value)
        )
    return value


def _ms(value: int) -> str:
    """A number of ms as a duration is written (``1s``, ``3660d``, ``0s``); below 0, its
    ms the same way (``-5ms``)."""
    if value < 0:
        return f"{value}ms"
    return format_duration_ms(value) if value else "0s"


def _instant(name: str, value: object) -> int | None:
    """An instant as epoch ms, or an aware datetime; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(f"{name} must be an aware datetime (with a time zone)")
        value = round(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        got = quoted(value)
    elif 0 <= value <= MAX_MS:
        return value
    else:
        got = instant_text(value)  # a time, as the CLI's --start was given: not -315619200000
    raise InvalidInput.about(
        "{0} must be a time from {least} to {most} (epoch ms 0 to {ms}, or an aware "
        "datetime), got {got}",
        name,
        least=instant_text(0),
        most=instant_text(MAX_MS),
        ms=MAX_MS,
        got=got,
    )


def zone(tz: object) -> ZoneInfo:
    """The IANA time zone named ``tz``; InvalidInput naming it if there is none."""
    if not isinstance(tz, str) or not tz or len(tz) > 64:
        raise InvalidInput(
            f'tz must be an IANA time zone name such as "Europe/Paris", got {quoted(tz)}'
        )
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        pass
    zones = sorted(available_timezones())  # europe/paris: Europe/Paris meant
    near = [z for z in zones if z.lower() == tz.lower()] or difflib.get_close_matches(
        tz, zones, n=1
    )
    said = 'an IANA name such as "Europe/Paris" or "UTC"'
    said = f"did you mean {quoted(near[0])}? ({said})" if near else f"give {said}"
    raise InvalidInput(f"no time zone {quoted(tz)}: {said}")


@dataclass(frozen=True)
class Recurrence:
    """When a schedule's occurrences fall; build one with :meth:`of` (it checks)."""

    cron: str | None = None
    every_ms: int | None = None
    offset_ms: int = 0
    tz: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None
    jitter_ms: int = 0

    @classmethod
    def of(
        cls,
        *,
        cron: object = None,
        every: object = None,
        offset: object = 0,
        tz: object = "UTC",
        start: object = None,
        end: object = None,
        jitter: object = 0,
    ) -> Recurrence:
        """Check and build: exactly one of ``cron`` (an expression) or ``every`` (ms or
        ``"30s"``); ``offset`` (intervals only) and ``jitter`` as durations; ``start``
        and ``end`` as epoch ms or aware datetimes; ``tz`` an IANA name."""
        cron, every = _as_listed(cron, every)
        if (cron is None) == (every is None):
            raise InvalidInput(
                "a schedule takes exactly one of cron or every (--cron or --every "
                'on the command line, "cron" or "every" in JSON)'
            )
        zone(tz)
        assert isinstance(tz, str)
        every_ms = None if every is None else duration_ms("every", every, minimum=1000)
        offset_ms = duration_ms("offset", offset, minimum=0)
        if cron is not None:
            _check_cron(cron)
            if offset_ms:
                raise InvalidInput.about(  # its fields named: the CLI says --offset, --every
                    "{0} is for {1:*} schedules; shift the cron fields", "offset", "every"
                )
        elif every_ms is not None and offset_ms >= every_ms:
            raise InvalidInput.about(
                "{0} ({got}) must be shorter than {1} ({every})",
                "offset",
                "every",
                got=_ms(offset_ms),
                every=_ms(every_ms),
            )
        start_ms, end_ms = _instant("start", start), _instant("end", end)
        if start_ms is not None and end_ms is not None and end_ms < start_ms:
            raise InvalidInput("end is before start: the schedule would never fire")
        jitter_ms = duration_ms("jitter", jitter, minimum=0, maximum=86_400_000)
        if every_ms is not None and jitter_ms >= every_ms:
            raise InvalidInput.about(
                "{0} ({got}) must be shorter than {1} ({every})",
                "jitter",
                "every",
                got=_ms(jitter_ms),
                every=_ms(every_ms),
            )
        assert cron is None or isinstance(cron, str)
        return cls(cron, every_ms, offset_ms, tz, start_ms, end_ms, jitter_ms)

    def next_after(self, after_ms: int) -> int | None:
        """The first occurrence (nominal time, epoch ms) strictly after ``after_ms``, or
        None when the schedule has ended (or a cron expression never matches again)."""
        if self.start_ms is not None and after_ms < self.start_ms:
            after_ms = self.start_ms - 1
        nxt = self._next_interval(after_ms) if self.every_ms else self._next_cron(after_ms)
        if nxt is None or nxt > MAX_MS or (self.end_ms is not None and nxt > self.end_ms):
            return None
        return nxt

    def preview(self, after_ms: int, count: int) -> list[int]:
        """The next ``count`` occurrences after ``after_ms`` (fewer if it ends)."""
        out: list[int] = []
        t = after_ms
        while len(out) < count:
            nxt = self.next_after(t)
            if nxt is None:
                break
            out.append(nxt)
            t = nxt
        return out

    def deadline(self, schedule: str, occurrence_ms: int) -> int:
        """When the occurrence fires: its nominal time plus its jitter (never earlier)."""
        if not self.jitter_ms:
            return occurrence_ms
        digest = hashlib.blake2b(f"{schedule}@{occurrence_ms}".encode(), digest_size=8).digest()
        return occurrence_ms + int.from_bytes(digest) % (self.jitter_ms + 1)

    def _next_interval(self, after_ms: int) -> int:
        assert self.every_ms is not None
        anchor = (self.start_ms or 0) + self.offset_ms
        if after_ms < anchor:
            return anchor
        return anchor + ((after_ms - anchor) // self.every_ms + 1) * self.every_ms

    def _next_cron(self, after_ms: int) -> int | None:
        assert self.cron is not None
        tz = ZoneInfo(self.tz)
        wall = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(tz).replace(tzinfo=None)
        # cronsim walks naive wall-clock time; each match is resolved to its instant here.
        matches = CronSim(self.cron, wall)
        for _ in range(10_000):  # a repeated hour's matches are behind ``after_ms``
            try:
                match = next(matches)
            except StopIteration:  # no match in fifty years
                return None
            at = _instant_of(match, tz)
            if at > after_ms:
                return at
        return None  # unreachable for any real zone: a repeat lasts hours, not years


def _instant_of(wall: datetime, tz: ZoneInfo) -> int:
    """The epoch ms a naive local wall time names: its first instant when it happens
    twice; the first minute after the jump when it does not exist."""
    while True:
        aware = wall.replace(tzinfo=tz, fold=0)
        back = aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
        if back == wall:
            return round(aware.timestamp() * 1000)
        wall = (wall + MINUTE).replace(second=0)  # in a gap: on to the minute after it


# an interval as a schedule's list shows it ("every 10s in UTC"), typed back as its spec
EVERY_AS_LISTED = re.compile(r"\s*every\s+(\S+)\s*", re.IGNORECASE)


def _as_listed(cron: object, every: object) -> tuple[object, object]:
    """``every 1m`` as ``1m``: given as the cron (the dashboard's one spec field, the
    CLI's --cron, the HTTP API's "cron") it is the interval, not a cron of two fields."""
    if isinstance(every, str) and (listed := EVERY_AS_LISTED.fullmatch(every)):
        every = listed.group(1)
    if every is None and isinstance(cron, str) and (listed := EVERY_AS_LISTED.fullmatch(cron)):
        return None, listed.group(1)
    return cron, every


# the macros some crons take, as the five fields that say the same
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = (
    'write 5 fields "minute hour day month weekday" (e.g. "0 8 * * MON-FRI"), or 6 with '
    'the seconds first; for an interval, write "every 30s" (--every 30s on the command line)'
)


def _check_cron(cron: object) -> None:
    if not isinstance(cron, str) or len(cron) > 256:
        raise InvalidInput(f"cron must be a cron expression (text), got {quoted(cron)}")
    if cron.strip().startswith("@"):
        same = MACROS.get(cron.strip().lower())
        raise InvalidInput(
            f"cron {quoted(cron)}: macros such as @daily are not taken; "
            + (
                f'write its 5 fields, "{same}"'
                if same
                else 'write 5 fields (@daily is "0 0 * * *", @hourly "0 * * * *", @weekly '
                '"0 0 * * 0", @monthly "0 0 1 * *", @yearly "0 0 1 1 *")'
            )
        )
    try:
        CronSim(cron, datetime(2000, 1, 1))
    except (CronSimError, ValueError, IndexError) as exc:
        raise InvalidInput(f"cron {quoted(cron)} is not valid ({exc}): {FIELDS}") from None


def occurrence_id(schedule: str, occurrence_ms: int) -> str:
    """The timer id of an occurrence: ``{<schedule>}@<epoch ms>``. The name is the hash
    tag (schedule names hold no braces), so every occurrence lives in its shard."""
    return f"{{{schedule}}}@{occurrence_ms}"
