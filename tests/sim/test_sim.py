"""The simulation itself (sim/): a budget of seeds keeps every promise; each bug planted in
sim/plants.py is found within that budget, and the same seed finds it again; a failure
comes back shrunk, with the steps that replay it. The simulation runs on fakeredis and
virtual time: no server, no sleep."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim import plants
from sim.checks import Violation
from sim.machine import Result, run
from sim.world import World
from timer.client import driver
from timer.durable import scripts

ROOT = Path(__file__).resolve().parents[2]
# CI's budget: seeds of up to STEPS steps, EXAMPLES runs each (about a minute here);
# TICKWHEEL_SIM_SEEDS=1000 for a long run. No server and no timing: they run with the
# parallel part of make test.
SEEDS = range(int(os.environ.get("TICKWHEEL_SIM_SEEDS", "5")))
STEPS, EXAMPLES = 150, 15


def first_failure(seeds: range) -> Result | None:
    for seed in seeds:
        result = run(seed, steps=STEPS, examples=EXAMPLES, shrink=False)
        if not result.ok:
            return result
    return None


def headline(result: Result) -> str:
    """The failure's first line, its numbers (ids, times, epochs) masked."""
    return re.sub(r"\d+", "N", result.failure.splitlines()[0])


def test_a_budget_of_seeds_keeps_every_promise() -> None:
    """No planted bug: every seed of the budget runs to the end with every check held."""
    failed = first_failure(SEEDS)
    assert failed is None, f"seed {failed.seed}:\n{failed.failure}"


@pytest.mark.parametrize("name", sorted(plants.PLANTS))
def test_each_planted_bug_is_found_and_found_again_from_its_seed(name: str) -> None:
    """Within the budget, and the same seed fails the same way on a second run."""
    with plants.planted(name):
        found = first_failure(SEEDS)
        assert found is not None, f"planted bug {name!r} ({plants.PLANTS[name].what}) not found"
        again = run(found.seed, steps=STEPS, examples=EXAMPLES, shrink=False)
    assert not again.ok
    assert headline(again) == headline(found)
    assert again.failure == found.failure  # replayed exactly: the same steps, the same ids


def test_a_failure_is_shrunk_to_fewer_steps_that_still_fail() -> None:
    """The backoff plant, found at once: its shrunk run is shorter and still breaks the
    backoff check."""
    with plants.planted("backoff"):
        raw = run(0, steps=STEPS, examples=EXAMPLES, shrink=False)
        shrunk = run(0, steps=STEPS, examples=EXAMPLES, shrink_s=60)
    assert not raw.ok and not shrunk.ok
    steps = [line for line in shrunk.failure.splitlines() if re.match(r"\s+\d+ \w+\(", line)]
    raw_steps = [line for line in raw.failure.splitlines() if re.match(r"\s+\d+ \w+\(", line)]
    assert 0 < len(steps) < len(raw_steps)
    assert "before its backoff ended" in shrunk.failure
    assert "python -m sim --seed 0" in shrunk.failure


def test_a_plant_changes_the_script_only_while_planted() -> None:
    """Each script plant's text is in its script (else it would plant nothing), and the
    drivers get the whole script back after."""
    for name, plant in plants.PLANTS.items():
        if plant.script is not None:
            assert plant.old in scripts.source(plant.script), name
            with plants.planted(name):
                assert plant.old not in driver.source(plant.script)  # type: ignore[attr-defined]
            assert driver.source(plant.script) == scripts.source(plant.script)  # type: ignore[attr-defined]


def test_the_command_refuses_bad_options_and_a_plant_run_says_it_found_it() -> None:
    """``python -m sim``: a usage error for a bad number; with a plant it finds, exit 0
    and the seed to replay on stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run(
        [sys.executable, "-m", "sim", "--seeds", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "give at least 1" in bad.stderr
    planted = subprocess.run(
        [sys.executable, "-m", "sim", "--seeds", "2", "--plant", "backoff",
         "--shrink-seconds", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert planted.returncode == 0, planted.stdout + planted.stderr
    assert "python -m sim --seed 0 --plant backoff" in planted.stderr
    assert '"failed": [0]' in planted.stdout


def stalled_leader_scenario() -> tuple[int, str]:
    """A worker leads every shard; timers fall due; it takes them from its wheel and
    stalls past its lease while the others take its shards; then it fires."""
    world = World()
    try:
        for _ in range(2):
            for slot in range(3):
                world.step_worker(slot)
            world.advance(300)
        for n in range(8):
            world.schedule(1_000 + 10 * n, 0, 0)
        for slot in range(3):
            world.step_worker(slot)
        world.advance(1_000)
        leader = next(p for p in world.workers if p is not None and p.held())
        try:
            world.stall_worker(leader.slot, 5_000)
        except Violation as v:
            return len(world.ledger.outcomes), str(v)
        return len(world.ledger.outcomes), ""
    finally:
        world.close()


def test_a_stalled_leaders_fire_is_fenced_and_without_the_fence_it_lands() -> None:
    """The fence refuses the stale leader's fire (nothing decided by it); with the fence
    planted away, its fire lands and the check names it."""
    assert stalled_leader_scenario() == (0, "")
    with plants.planted("fence"):
        decided, violation = stalled_leader_scenario()
    assert decided > 0 and "a stale leader's write landed" in violation
