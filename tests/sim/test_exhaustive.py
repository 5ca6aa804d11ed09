"""The exhaustive check (sim.exhaustive): on the real code no state within its bounds
breaks a promise; with a planted bug it finds the shortest path that does."""

from __future__ import annotations

import json

import pytest

from sim import exhaustive, fingerprint
from sim.exhaustive import Action, Bounds, explore
from sim.plants import planted


def test_every_state_of_the_small_world_keeps_the_promises() -> None:
    result = explore(Bounds(depth=3))
    assert result.violations == []
    assert result.depth == 3
    assert result.states > 100  # leases taken, lost and taken over, timers fired
    assert result.states == sum(result.by_depth)
    assert result.transitions >= result.states - 1


def test_the_fingerprint_merges_paths_that_reach_the_same_state() -> None:
    replayer = exhaustive.Replayer(Bounds())
    keys = []
    for path in [
        (Action("step", 0), Action("step", 0), Action("step", 1)),
        (Action("step", 0), Action("step", 1), Action("step", 0)),
        (Action("step", 1), Action("step", 0), Action("step", 0)),
    ]:
        world, start_ms = replayer.replay(path)
        try:
            keys.append(fingerprint.fingerprint(world, start_ms))
        finally:
            world.close()
    assert keys[0] == keys[1]  # a second turn at the same instant changes nothing
    assert keys[0] != keys[2]  # the other worker came first: it leads


def test_forking_and_replaying_find_the_same_states() -> None:
    forked = explore(Bounds(depth=2), fork=True)
    replayed = explore(Bounds(depth=2), fork=False)
    assert (forked.states, forked.transitions, forked.by_depth) == (
        replayed.states,
        replayed.transitions,
        replayed.by_depth,
    )


def test_a_lease_without_a_new_epoch_is_found() -> None:
    with planted("epoch"):
        result = explore(Bounds(depth=4), stop_at_first=True)
    assert result.violations, "the planted bug was not found"
    cx = result.violations[0]
    assert "led at epoch" in cx.error
    # the shortest: one leads, its lease runs out, the other takes it at the same epoch
    assert cx.steps() == ["step_worker(0)", "advance(2250)", "step_worker(1)"]


def test_a_fire_not_fenced_is_found(capsys: pytest.CaptureFixture[str]) -> None:
    with planted("fence"):
        code = exhaustive.main(["--depth", "5", "--kills", "0", "--plant", "fence", "--first"])
    out, err = capsys.readouterr()
    assert code == 0  # found
    assert json.loads(out)["violations"] == 1
    # a process cut off after its first turn, a new one under its id takes the shards
    # at a new epoch, and the old one fires on its lease alone before its next sweep
    assert "counterexample in 5 steps" in err
    assert "a stale leader's write landed" in err
    for line in ("partition_worker(0)", "step_zombie(0)"):
        assert line in err


def test_bounds_out_of_range_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert exhaustive.main(["--depth", "0"]) == 2
    assert "--depth is at least 1" in capsys.readouterr().err
