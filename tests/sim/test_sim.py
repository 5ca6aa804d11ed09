"""The simulation itself (sim/): a budget of seeds keeps every promise; each bug planted in
sim/plants.py is found within that budget, and the same seed finds it again; a failure
comes back shrunk, with the steps that replay it. The simulation runs on fakeredis and
virtual time: no server, no sleep."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim import plants
from sim.checks import Violation
from sim.crossings import Crossings
from sim.world import RunnerProc, World
from timer.client import driver
from timer.durable.model import scripts

ROOT = Path(__file__).resolve().parents[2]
# CI's budget: seeds of up to 150 steps, 15 runs each (half a minute here);
# TICKWHEEL_SIM_SEEDS=1000 for a long run. No server and no timing: they run with the
# parallel part of make test.
SEEDS = int(os.environ.get("TICKWHEEL_SIM_SEEDS", "2"))


def sim(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python -m sim ARGS`` as ``make sim`` runs it (under PYTHONHASHSEED=0: a seed
    replays exactly only under one hash seed, and this test's process has its own)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "sim", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def violations(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("sim.checks.Violation")]


def steps_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.match(r"\s+\d+ \w+\(", line)]


def test_a_budget_of_seeds_keeps_every_promise() -> None:
    """No planted bug: every seed of the budget runs to the end with every check held."""
    done = sim("--seeds", str(SEEDS), "--steps", "150", "--examples", "15", "--no-shrink")
    assert done.returncode == 0, done.stderr[-5000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["seeds"] == SEEDS and figures["failed"] == [] and figures["steps"] > 0


@pytest.mark.parametrize("name", sorted(n for n, p in plants.PLANTS.items() if not p.scenario_only))
def test_each_planted_bug_is_found_by_its_seed_and_shrunk(name: str) -> None:
    """By its seed (the first to find it: a search of make sim's seeds finds it there), as
    make sim's seeds run it; that failing run comes back shrunk, failing at the same check
    (the same line of the same promise), with the command that replays it. (That the seed
    replays the same run in another process: the next test, for one plant; every seed is
    run the same way.)"""
    plant = plants.PLANTS[name]
    assert plant.seed < 50  # within make sim's default seeds (each seed runs on its own)
    found = sim("--start", str(plant.seed), "--seeds", "1", "--shrink-seconds", "2",
                "--steps", "150", "--examples", "15", "--plant", name)  # fmt: skip
    assert found.returncode == 0, f"{name} ({plant.what}) not found by seed {plant.seed}"
    assert f"seed {plant.seed} FAILED" in found.stderr, found.stderr[-3000:]
    first = re.search(r"found in a run of (\d+) steps: (.*) \(raised at (\S+)\)", found.stderr)
    assert first is not None, found.stderr[-3000:]
    assert first.group(2).startswith("sim.checks.Violation"), first.group(2)
    assert f"reported (raised at {first.group(3)}):" in found.stderr
    # shrunk is hypothesis's order (fewer and simpler choices), not always fewer steps;
    # and how far it gets in its seconds is the machine's (the fence plant's came out
    # shorter on a quiet machine, and as long as it was found beside a trial), no test
    shrunk = steps_of(found.stderr)
    assert len(shrunk) > 0
    assert f"python -m sim --seed {plant.seed} --plant {name}" in found.stderr


def test_a_planted_bugs_seed_replays_the_same_failing_run_in_another_process() -> None:
    """``make sim SEED=…`` in a process of its own draws the run the seeds' search drew, to
    the ids, the ms and the steps: the same error, raised at the same place."""
    plant = plants.PLANTS["slot"]
    common = ("--no-shrink", "--steps", "150", "--examples", "15", "--plant", "slot")
    searched = sim("--start", str(plant.seed), "--seeds", "1", *common)
    again = sim("--seed", str(plant.seed), *common)
    for run in (searched, again):
        assert run.returncode == 0 and f"seed {plant.seed} FAILED" in run.stderr, run.stderr[-3000:]
    [violation] = violations(searched.stderr)
    assert violations(again.stderr) == [violation]
    raw = steps_of(searched.stderr)
    assert len(raw) > 0 and steps_of(again.stderr) == raw
    found = re.search(r"found in a run of (\d+) steps: .* \(raised at (\S+)\)", again.stderr)
    assert found is not None and int(found.group(1)) == len(raw), again.stderr[-3000:]
    assert f"reported (raised at {found.group(2)}):" in searched.stderr


def test_a_plant_changes_the_script_only_while_planted() -> None:
    """Each script plant's text is in its script (else it would plant nothing), and the
    drivers get the whole script back after."""
    for name, plant in plants.PLANTS.items():
        if plant.script is not None:
            assert plant.old in scripts.source(plant.script), name
            with plants.planted(name):
                assert plant.old not in driver.source(plant.script)  # type: ignore[attr-defined]
            assert driver.source(plant.script) == scripts.source(plant.script)  # type: ignore[attr-defined]


def test_the_command_refuses_bad_options() -> None:
    """A usage error (exit 2) naming what to give, before anything runs."""
    for args, says in [
        (("--seeds", "0"), "give at least 1"),
        (("--seed", "-1"), "a seed is 0 or more"),
        (("--minutes", "nan"), "above 0"),
        (("--plant", "nothing"), "invalid choice"),
    ]:
        done = sim(*args, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)


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


# -- the store's faults ---------------------------------------------------------------------


def failing_to_the_end(world: World) -> None:
    """A timer whose handler fails every attempt, fired, and handled up to its last."""
    for slot in range(3):
        world.step_worker(slot)
    world.schedule(100, 5, 0)
    for _ in range(40):
        world.advance(700)
        for slot in range(3):
            world.step_worker(slot)
        runs = world.ledger.runs.get(next(iter(world.ledger.by_key), ""), [])
        if (
            len(runs) == world.config.max_attempts - 1
            and world.ledger.next_event_in_ms(keep_leases=False) < 0 + 10**9
        ):
            world.step_runner(0)
            if len(world.ledger.runs.get(next(iter(world.ledger.by_key), ""), [])) == 2:
                continue
        else:
            world.step_runner(0)
        if len(world.ledger.runs.get(next(iter(world.ledger.by_key), ""), [])) == 2:
            return
    raise AssertionError(f"not at the last attempt: {world.ledger.runs}")


def last_attempt_with_its_reply_lost() -> str:
    """The last failing attempt's dead letter is written, its reply lost (redis-py sends
    it again); the dead letters are read: the violation, or ''."""
    world = World()
    try:
        failing_to_the_end(world)
        for _ in range(20):
            world.advance(1_000)
            world.cut("r0", "dead", "after", False)
            if world.ledger.dead_keys():
                return ""
        raise AssertionError(f"never dead-lettered: {world.ledger.runs}")
    except Violation as v:
        return str(v)
    finally:
        world.close()


def overlap_scenario() -> tuple[list[tuple[str, int]], int, str]:
    """One outcome for the limited runners: its handler starts and runs past its timeout
    (released for a retry, still running); its retry falls due and is read. Returns the
    handlers running then (timer, attempt), the outcomes waiting for a slot, and the
    violation found, if any."""
    world = World()
    x = Crossings(world)
    try:
        world.schedule(60_000, 0, 0)
        world.cancel(0)  # decided now: an outcome for every group
        x.limited_turn(0, 0)  # read; a handler thread starts its handler, which runs on
        x.limited_turn(1_100, 0)  # past its timeout: released for a retry (backoff 0.5 s)
        try:
            x.limited_turn(600, 0)  # the retry is read, and asks for the key's one slot
        except Violation as v:
            return [], 0, str(v)
        running = [(r.timer_id, r.attempt) for r in x.runs if not r.ended]
        return running, x.runners[0].handlers.waiting_for_limit, ""
    finally:
        world.close()


def test_a_dead_letter_sent_again_after_its_lost_reply_is_written_once() -> None:
    """dead.lua run again by redis-py after a lost reply finds the entry acknowledged and
    writes nothing; planted without that check (dead_twice), the cut finds it: a bug only
    a fault of the store shows."""
    assert last_attempt_with_its_reply_lost() == ""
    with plants.planted("dead_twice"):
        assert "dead-lettered twice" in last_attempt_with_its_reply_lost()


def faulty_run(fsync: str) -> World:
    """Timers scheduled around an fsync, cuts of every kind, a restart, then settled."""
    world = World()
    world.fsync = fsync  # type: ignore[assignment]
    for slot in range(3):
        world.step_worker(slot)
    world.schedule(2_000, 0, 0)  # t0
    world.schedule(2_500, 1, 0)  # t1
    for who, script, kind, out in [
        ("schedule", "schedule", "after", False),  # t2, sent again by redis-py
        ("schedule", "schedule", "before", True),  # t3: the caller sees it, tries again
        ("w0", "any", "after", True),
        ("w1", "lease_renew", "before", False),
        ("r0", "any", "after", True),
    ]:
        world.cut(who, script, kind, out)  # type: ignore[arg-type]
    world.advance(1_000)
    world.step_worker(0)  # a step boundary a second on: everysec's fsync
    world.schedule(3_000, 0, 0)  # t4: acknowledged after the fsync
    world.restart_store(500)
    world.settle()
    return world


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_a_restart_loses_only_what_came_after_the_last_fsync(fsync: str) -> None:
    """appendfsync always: every acknowledged timer decided and handled after the restart.
    everysec (durability none): the ones acknowledged after the last fsync may be lost, the
    ones before it never are (settle() checks each is decided and handled)."""
    world = faulty_run(fsync)
    try:
        lost = world.ledger.faults.lost_timers
        assert {"t0", "t1"} <= set(world.ledger.outcomes)
        if fsync == "always":
            assert lost == [] and {"t2", "t3", "t4"} <= set(world.ledger.outcomes)
        else:
            assert lost == ["t4"] and {"t2", "t3"} <= set(world.ledger.outcomes)
    finally:
        world.close()


def test_the_same_faults_replay_the_same_store() -> None:
    """The faults are the run's choices: two runs of the same steps end with the same
    keyspace, to the ids and the ms, and the same notes."""
    one, two = faulty_run("everysec"), faulty_run("everysec")
    try:
        assert one.store.snapshot() == two.store.snapshot()
        assert one.ledger.notes == two.ledger.notes and one.ledger.notes
    finally:
        one.close()
        two.close()


def test_a_group_lost_in_a_restart_is_created_again() -> None:
    """A timer fires before any runner joined; the store fsyncs (the outcome, no group);
    a runner joins and handles it; the store restarts from the fsync and loses the group.
    The runner's next poll gets NOGROUP and creates the group again (before, it never
    did: a timer fired after it was never handled until the runner process restarted)."""
    world = World()
    try:
        world.fsync = "everysec"
        raw = world.raw
        for shard in range(world.config.shards):  # as if no runner had joined yet
            raw.xgroup_destroy(world.keys.shard(shard).outcomes, "sim")
        world.store.fsync()
        world.schedule(100, 0, 0)
        world.advance(1_000)
        for slot in range(world.config.workers):
            world.step_worker(slot)  # fired, and fsynced at this step's end
        assert world.synced_ms == world.time.wall_ms() and world.ledger.outcomes
        fresh = RunnerProc(world, 0, "r9")
        world.runners = [fresh]
        world.step_runner(0)  # joins and handles it; the group is newer than the fsync
        world.restart_store(500)
        world.schedule(100, 0, 0)
        world.settle()  # every timer handled: a Violation if not
    finally:
        world.close()


def test_a_handler_past_its_timeout_keeps_its_slot_and_without_that_two_run() -> None:
    """The timed-out attempt still runs and holds the key's slot, so its retry waits for
    it; with the slot given back at the timeout (the plant), the retry runs beside it and
    the check names the two."""
    assert overlap_scenario() == ([("t0", 1)], 1, "")
    with plants.planted("slot"):
        _, _, violation = overlap_scenario()
    assert "2 handlers of key half=" in violation and "t0 attempt 1" in violation
    assert "t0 attempt 2" in violation


def test_an_occurrence_lost_is_named() -> None:
    """A schedule of one a second, fired by the workers for a few seconds: every
    occurrence accounted for; planned from the one after (the plant), one is lost."""

    def run() -> str:
        world = World()
        x = Crossings(world)
        try:
            x.create_schedule(1, "all")
            for _ in range(12):
                world.tick(500, 0)
            return ""
        except Violation as v:
            return str(v)
        finally:
            world.close()

    assert run() == ""
    with plants.planted("occurrence"):
        assert "lost" in run()


def test_an_outcome_handed_out_again_while_it_runs_is_not_started_again() -> None:
    """A limited runner reads an outcome and its handler runs; the store restarts from an
    fsync before that read (durability none) and hands the outcome out again, as the same
    delivery. The runner already has it in hand: it does not start it beside itself
    (before, a second handler of it ran at once, under the one slot of the first)."""
    world = World()
    x = Crossings(world)
    try:
        world.fsync = "everysec"
        world.schedule(60_000, 0, 0)
        world.cancel(0)  # decided now: an outcome for every group
        world._fsync()
        x.limited_turn(0, 0)  # read after the fsync; its handler runs
        world.restart_store(500)  # the read (and the group) lost
        for _ in range(3):  # the group created again, the outcome read again
            x.limited_turn(100, 0)
        assert [(r.timer_id, r.attempt) for r in x.runs if not r.ended] == [("t0", 1)]
    finally:
        world.close()


def stalled_after_claims() -> str:
    """A failed outcome's retry comes due; runner 0's turn claims it and then stalls past
    reclaim_idle_ms before its next round trip, the look for its own entries gone idle
    (due too): the entry it just claimed is that idle on the store's clock. The
    violation, if one."""
    world = World()
    try:
        world.schedule(100, 1, 0)  # its first attempt fails
        world.tick(1_000, 0)  # fired; runner 0 handles attempt 1: a retry in 0.5 s
        assert [
            (r.attempt, r.result) for r in world.ledger.runs[next(iter(world.ledger.runs))]
        ] == [(1, "failed")]
        world.advance(1_500)  # the retry is due, and so is the look for its own
        world.stall_runner(0, "claim", world.config.reclaim_idle_ms + 500)
        world.settle()
        return ""
    except Violation as v:
        return str(v)
    finally:
        world.close()


def test_a_runner_stalled_after_its_claims_runs_each_once() -> None:
    """What a poll claimed, its look for its own lost entries in the same poll leaves
    alone, however long the process stalled between the two; without that (the plant)
    the retry runs twice in one runner, and the check says so. (A CI run on a busy core:
    4 outcomes claimed from a dead consumer each ran twice in the one live one.)"""
    assert stalled_after_claims() == ""
    with plants.planted("own"):
        assert "handled again after it succeeded" in stalled_after_claims()
