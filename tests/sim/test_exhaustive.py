"""The exhaustive check (sim.exhaustive): on the real code no state within its bounds
breaks a promise; with a planted bug it finds the shortest path that does."""

from __future__ import annotations

import json
import re

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


def test_a_lease_without_a_new_epoch_is_found(capsys: pytest.CaptureFixture[str]) -> None:
    """The command, with a bug planted: the shortest counterexample, printed as steps
    (one leads, its lease runs out, the other takes it at the same epoch). The random
    simulation finds the fence plant too (tests/sim/test_sim.py); the exhaustive
    search for it (five steps deep, about 500 states) is the Measured table's."""
    with planted("epoch"):
        code = exhaustive.main(["--depth", "4", "--kills", "0", "--plant", "epoch", "--first"])
    out, err = capsys.readouterr()
    assert code == 0  # found
    assert json.loads(out)["violations"] == 1
    assert "counterexample in 3 steps" in err
    assert "led at epoch" in err
    steps = [line.split(". ", 1)[1] for line in err.splitlines() if re.match(r"\s+\d+\. ", line)]
    assert steps == ["step_worker(0)", "advance(2250)", "step_worker(1)"], err


def test_bounds_out_of_range_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert exhaustive.main(["--depth", "0"]) == 2
    assert "--depth is at least 1" in capsys.readouterr().err
