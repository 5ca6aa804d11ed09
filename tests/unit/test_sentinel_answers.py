"""Which Sentinel's answer a client follows (timer.redis.connections): the decision, on
the answers real Sentinels gave (flags and config-epoch as SENTINEL MASTERS reports them
through a split and its heal). The Sentinels themselves: tests/chaos/test_sentinel.py."""

from __future__ import annotations

from typing import Any

from timer.redis.connections import _Answers

OLD, NEW = ("127.0.0.1", 7000), ("127.0.0.1", 7001)


def _state(address: tuple[str, int], flags: str, epoch: int) -> dict[str, Any]:
    return {"ip": address[0], "port": address[1], "flags": flags, "config-epoch": epoch}


def _good(state: dict[str, Any]) -> bool:
    """redis-py's own check: a master, not flagged down."""
    flags = state["flags"].split(",")
    return "master" in flags and "s_down" not in flags and "o_down" not in flags


def _discover(
    newest: int, states: list[dict[str, Any]], sentinels: int = 3
) -> tuple[tuple[Any, Any] | None, int]:
    """What FollowingSentinel.discover_master decides: (address or None, newest epoch)."""
    answers = _Answers(newest, [])
    for st in states:
        address = answers.offer(st, _good(st))
        if address is not None:
            return address, answers.newest
    agreed = answers.agreed(sentinels)
    return (agreed[0], agreed[1]) if agreed else (None, answers.newest)


def test_the_leader_of_a_failover_is_not_followed_once_the_old_master_answers_it() -> None:
    # seen ~1 s after a split healed: the leader names the old master, no down flag
    leader = _state(OLD, "master,failover_in_progress", 1)
    assert _good(leader)  # redis-py's check lets it through
    assert _discover(1, [leader, _state(NEW, "master", 1)]) == (NEW, 1)
    assert _discover(0, [leader]) == (None, 1)


def test_a_sentinel_that_missed_the_failover_is_not_followed() -> None:
    stale = _state(OLD, "master", 0)
    assert _discover(1, [stale, _state(NEW, "master", 1)]) == (NEW, 1)
    # the others unreachable: only the stale one answers, and it is not a majority
    assert _discover(1, [stale]) == (None, 1)
    # while the leader promotes: the others still name the old master at the old epoch
    promoting = _state(OLD, "s_down,o_down,master,failover_in_progress", 1)
    assert _discover(0, [promoting, stale, stale]) == (None, 1)


def test_sentinels_redeployed_at_a_lower_epoch_are_followed_when_a_majority_agree() -> None:
    again = _state(NEW, "master", 0)
    assert _discover(4, [again, again]) == (NEW, 0)
    assert _discover(4, [again, _state(OLD, "master", 0)]) == (None, 4)  # they disagree
    assert _discover(4, [again]) == (None, 4)  # one of three is not a majority


def test_a_fresh_client_follows_the_first_good_answer_as_redis_py_does() -> None:
    assert _discover(-1, [_state(OLD, "master", 0), _state(NEW, "master", 1)]) == (OLD, 0)
    assert _discover(-1, [_state(OLD, "s_down,master", 0), _state(NEW, "master", 1)]) == (NEW, 1)
