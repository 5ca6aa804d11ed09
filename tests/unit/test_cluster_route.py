"""timer/redis/cluster_route.py: where a cluster's script calls go, round after round (no I/O)."""

from __future__ import annotations

import redis
from hypothesis import given
from hypothesis import strategies as st
from redis import exceptions

from timer import InvalidInput, TimerClient
from timer.redis.cluster_route import MAX_ROUNDS, RETRY_BUDGET_S, Refresh, Routing, Verdict, verdict


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def routing(owners: dict[str, str], budget_s: float = 1.0) -> tuple[Routing, Clock]:
    clock = Clock()
    keys = sorted(owners)
    return Routing(keys, lambda k: owners[k], budget_s=budget_s, clock=clock), clock


def test_verdicts_of_every_reply_kind() -> None:
    """Each reply maps to what the cluster client would do with it."""
    assert verdict(b"ok") is Verdict.DONE
    assert verdict(exceptions.ResponseError("WRONGTYPE x")) is Verdict.DONE
    assert verdict(exceptions.NoScriptError("x")) is Verdict.LOAD
    assert verdict(exceptions.MovedError("12 127.0.0.1:7001")) is Verdict.MOVED
    assert verdict(exceptions.AskError("12 127.0.0.1:7001")) is Verdict.WAIT
    assert verdict(exceptions.TryAgainError("x")) is Verdict.WAIT
    assert verdict(exceptions.ClusterDownError("x")) is Verdict.WAIT
    assert (
        verdict(
            exceptions.ResponseError(
                "Script attempted to access a non local key in a cluster node script"
            )
        )
        is Verdict.WAIT
    )
    assert verdict(redis.ConnectionError("refused")) is Verdict.GONE
    assert verdict(redis.TimeoutError("slow")) is Verdict.TIMEOUT


def test_moved_goes_at_once_to_the_named_node_and_others_are_kept() -> None:
    """A MOVED call is sent next round to the node it names, with no pause; the other
    node's replies stay as they were."""
    route, _ = routing({"a": "n1:1", "b": "n2:2"})
    assert route.groups() == {"n1:1": [0], "n2:2": [1]}
    route.record("n1:1", [0], [exceptions.MovedError("1 n3:3")])
    route.record("n2:2", [1], [b"fine"])
    assert route.refresh and route.pause_s() == 0.0
    assert route.groups() == {"n3:3": [0]}
    route.record("n3:3", [0], [b"done"])
    assert route.pause_s() == 0.0 and route.groups() == {}
    assert route.replies == [b"done", b"fine"]


def test_waits_back_off_within_the_budget_then_the_error_stays() -> None:
    """A migrating slot's call is retried after growing pauses, only while the budget
    lasts; then its error is the reply."""
    route, clock = routing({"a": "n1:1"}, budget_s=0.1)
    pauses = []
    while route.groups():
        route.record("n1:1", [0], [exceptions.TryAgainError("x")])
        pause = route.pause_s()
        pauses.append(pause)
        clock.t += pause
    assert pauses[:3] == [0.02, 0.04, 0.0] and isinstance(
        route.replies[0], exceptions.TryAgainError
    )
    worker, _ = routing({"a": "n1:1"}, budget_s=0.0)  # a worker's: no wait at all
    worker.groups()
    worker.record("n1:1", [0], [exceptions.TryAgainError("x")])
    assert worker.pause_s() == 0.0 and worker.groups() == {}


def test_a_timeout_is_retried_only_on_another_owner() -> None:
    """After a timeout (the call may have run) the call goes again only if the slot map
    now names another master; a refused connection waits for one."""
    owners = {"a": "n1:1", "b": "n1:1"}
    route, _ = routing(owners)
    route.groups()
    route.record("n1:1", [0, 1], [redis.TimeoutError("t"), redis.TimeoutError("t")])
    assert route.pause_s() == 0.0 and route.groups() == {}  # same owner: not again
    route2, _ = routing(owners)
    route2.groups()
    route2.record("n1:1", [0, 1], [redis.TimeoutError("t"), redis.ConnectionError("c")])
    owners["a"] = owners["b"] = "n2:2"  # the map read again: a replica was promoted
    route2.pause_s()
    assert route2.groups() == {"n2:2": [0, 1]}


def test_rounds_are_bounded() -> None:
    """A call MOVED back and forth forever stops after MAX_ROUNDS rounds."""
    route, _ = routing({"a": "n1:1"})
    rounds = 0
    while groups := route.groups():
        rounds += 1
        (node,) = groups
        route.record(node, [0], [exceptions.MovedError("1 n2:2" if node != "n2:2" else "1 n1:1")])
        route.pause_s()
    assert rounds == MAX_ROUNDS and isinstance(route.replies[0], exceptions.MovedError)


def test_refreshes_are_rate_limited() -> None:
    """However many callers ask at once, the slot map is read once per interval."""
    refresh = Refresh(every_s=60)
    assert refresh.due() and not refresh.due() and refresh.count == 1


def test_a_redirect_parsed_as_a_plain_error_is_followed() -> None:
    """On a plain node connection redis-py < 6 parses MOVED as a bare ResponseError (only
    its cluster parser knows the word): it is typed as the cluster client would type it,
    and followed."""
    route, _ = routing({"a": "n1:1"})
    route.groups()
    route.record("n1:1", [0], [exceptions.ResponseError("MOVED 7 n2:2")])
    route.pause_s()
    assert route.groups() == {"n2:2": [0]}
    route.record("n2:2", [0], [exceptions.ResponseError("WRONGTYPE not ours")])
    assert route.pause_s() == 0.0 and route.groups() == {}
    assert type(route.replies[0]) is exceptions.ResponseError  # an error of the call's own: kept


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                 st.text(max_size=8), st.lists(st.integers(), max_size=2)))  # fmt: skip
def test_cluster_retry_s_takes_seconds_or_says_why(value: object) -> None:
    """Any value given to ``TimerClient.cluster_retry_s``: a number of seconds from 0 to 60
    is kept; anything else is InvalidInput and the budget stays as it was (no I/O)."""
    c = TimerClient(redis.Redis(port=1))  # never contacted
    try:
        c.cluster_retry_s = value  # type: ignore[assignment]
    except InvalidInput:
        assert c.cluster_retry_s == RETRY_BUDGET_S
    else:
        assert isinstance(value, int | float) and not isinstance(value, bool)
        assert 0 <= value <= 60 and c.cluster_retry_s == float(value)
    finally:
        c.close()


@given(st.text(max_size=12))
def test_a_seconds_option_takes_a_number_or_a_duration_or_says_why(text: str) -> None:
    """The CLI's seconds options (``wait --timeout``) on any text: seconds from 0 to ten
    years, or a ValueError naming both forms (click turns it into a usage error)."""
    from timer.cli.durations import parse_seconds  # noqa: PLC0415

    try:
        value = parse_seconds(text)
    except ValueError as exc:
        said = str(exc)  # both forms: a duration's, and what a bare number is
        duration = "not a duration" in said and "a bare number is seconds" in said
        assert duration or "ten years" in said
    else:
        assert 0 <= value <= 316_224_000
