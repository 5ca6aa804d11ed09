"""``tickwheel demo``: the main job, end to end, with a crash in the middle.

A job-timeout service: N jobs start, each schedules its timeout watching its job's key;
half finish in time and notify their key (the timeout completes early), some are
cancelled, the rest hang and expire. Meanwhile one of the worker processes is killed with
SIGKILL and a new one started. The service reacts to each timeout with a handler run by
timer.Handlers (one flaky downstream retried, one poison outcome dead-lettered). At the
end every timer must have exactly one outcome, none decided before its deadline. With
``--sentinel`` it runs on a Sentinel set of its own and kills the master too
(``timer.cli.demo.sentinel``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import click
import redis

from timer import TimerClient, TimerError
from timer.worker.settings import WorkerSettings

from .. import embedded
from ..app import App, errors, pass_app, require_extra, starts_server
from ..durations import DURATION, MILLIS, typed_name
from ..output import emit, pairs
from .parts import (
    Kill,
    bad_delays,
    drop_namespace,
    plan,
    register_with_spark,
    run_prefix,
    start_worker,
    summarise,
)
from .progress import Progress
from .reaction import Reaction
from .sentinel import DURABILITY, KILL_AT, MasterKill, sentinel_set
from .stop import Terminated, starting, stopped_by


class Driver(threading.Thread):
    """Plays the jobs: notifies finished jobs' keys and cancels some, each at its time."""

    def __init__(self, c: TimerClient, actions: list[tuple[float, str, str]]) -> None:
        super().__init__(name="demo-driver", daemon=True)
        self.c, self.actions = c, sorted(actions)
        self.done = Counter[str]()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        start = time.monotonic()
        try:
            for at, kind, name in self.actions:
                if self.stop.wait(max(0.0, at - (time.monotonic() - start))):
                    return
                self._act(kind, name)
        except BaseException as exc:
            self.error = exc

    def _act(self, kind: str, name: str, ride_out_s: float = 60.0) -> None:
        """One notify or cancel, sent again while Redis fails over (both are idempotent:
        a second notify completes nothing more, a second cancel cancels nothing)."""
        end = time.monotonic() + ride_out_s
        while True:
            try:
                if kind == "notify":
                    self.done["completed"] += self.c.notify(name)
                else:
                    self.done["cancelled"] += int(self.c.cancel(name))
                return
            except TimerError:
                if time.monotonic() > end:
                    raise
                if self.stop.wait(0.1):  # a failover's pace; the demo may end meanwhile
                    return


@starts_server
@click.command()
@click.option(
    "--timers",
    type=click.IntRange(1, 1_000_000),
    default=20_000,
    show_default=True,
    help="How many job timeouts to schedule.",
)
@click.option(
    "--workers",
    "n_workers",
    type=click.IntRange(1, 32),
    default=3,
    show_default=True,
    help="Worker processes sharing the shards (one of them is killed once 40% of the "
    "timers have ended).",
)
@click.option(
    "--min-delay",
    type=DURATION,
    default="5s",
    show_default=True,
    help="The shortest job timeout scheduled (at least 1s).",
)
@click.option(
    "--max-delay",
    type=DURATION,
    default="15s",
    show_default=True,
    help="The longest job timeout scheduled.",
)
@click.option(
    "--lease-ms",
    "--lease",
    "lease_ms",
    type=MILLIS,
    metavar="DURATION",
    default="2000ms",
    show_default=True,
    help="Worker lease TTL (bounds the failover time), e.g. 2s; a bare number is milliseconds.",
)
@click.option(
    "--no-kill", is_flag=True, help="Do not kill a worker (once 40% of the timers have ended)."
)
@click.option("--seed", type=int, default=None, help="Random seed (for a repeatable run).")
@click.option(
    "--spark",
    "use_spark",
    is_flag=True,
    help="Register the timeouts from a Spark DataFrame (local[2]; needs the spark "
    "extra and Java 17).",
)
@click.option(
    "--sentinel",
    is_flag=True,
    help="Run on a Sentinel set of its own (a master, 2 replicas and 3 Sentinels on "
    "loopback, from the embedded server's binary; removed afterwards) with durability "
    "replicas:1, and kill -9 its master too, at 60%: the Sentinels promote a replica and "
    "no timer is lost. Takes no --redis-url.",
)
@pass_app
def demo(
    app: App,
    timers: int,
    n_workers: int,
    min_delay: int,
    max_delay: int,
    lease_ms: int,
    no_kill: bool,
    seed: int | None,
    use_spark: bool,
    sentinel: bool,
) -> None:
    """Run the main job: job timeouts that survive a worker's kill -9.

    Starts the workers and a handler process (`tickwheel handle`, reacting to each
    timeout: one flaky downstream it retries, one poison job it dead-letters), schedules
    the timeouts (delays between --min-delay and --max-delay; half of the jobs finish
    early and notify, 5% are cancelled), kills one worker with SIGKILL once 40% of the
    timers have ended and starts a new one, waits for every outcome, and prints the
    summary. Exits non-zero if any timer was lost, decided twice or fired early. It runs
    in a namespace of its own (demo-<time>), dropped when it ends or is stopped;
    --namespace NAME runs in NAME and keeps it.
    """
    if refused := bad_delays(min_delay, max_delay):
        raise click.UsageError(refused)
    if sentinel and app.redis_url:
        raise click.UsageError(
            "--sentinel starts its own Sentinel set: drop --redis-url (and TICKWHEEL_REDIS_URL)"
        )

    lease = next(p for p in click.get_current_context().command.params if p.name == "lease_ms")
    with errors(
        {"lease_ms": typed_name(lease, unknown="--lease")}
    ):  # the workers' own check, before any starts
        WorkerSettings(lease_ms=lease_ms)
    with errors():  # its logs go beside the embedded server's data, given a URL or not
        embedded.home()
    if use_spark:  # a missing extra is said before any worker or namespace is made
        require_extra("spark", "demo --spark (with Java 17)")

    def say(msg: str) -> None:
        if not app.json:
            click.echo(msg, err=True)

    try:
        with stopped_by(signal.SIGTERM):
            _with_sentinel(
                app,
                timers,
                n_workers,
                min_delay,
                max_delay,
                lease_ms,
                no_kill,
                seed,
                use_spark,
                sentinel,
                say,
            )
    except Terminated:
        # Every process the demo started is stopped (the finally blocks ran); it ends as
        # SIGTERM ends a process, so whoever sent it sees the status it expects.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM) from None


def _with_sentinel(
    app: App,
    timers: int,
    n_workers: int,
    min_delay: int,
    max_delay: int,
    lease_ms: int,
    no_kill: bool,
    seed: int | None,
    use_spark: bool,
    sentinel: bool,
    say: Callable[[str], None],
) -> None:
    with contextlib.ExitStack() as stack:
        master_kill = None
        if sentinel:
            with errors():
                s = stack.enter_context(sentinel_set(say))
            master_kill = MasterKill(s)
        _demo(
            app,
            s.url if sentinel else app.url,
            timers,
            n_workers,
            min_delay,
            max_delay,
            lease_ms,
            no_kill,
            seed,
            use_spark,
            master_kill,
            say,
        )


def _demo(
    app: App,
    url: str,
    timers: int,
    n_workers: int,
    min_delay: int,
    max_delay: int,
    lease_ms: int,
    no_kill: bool,
    seed: int | None,
    use_spark: bool,
    master_kill: MasterKill | None,
    say: Callable[[str], None],
) -> None:
    rng = random.Random(seed)
    # A namespace the user did not name is the run's own: nobody will look at it again
    # (its summary is printed), so it is dropped at the end, however the run ends, not
    # left behind in the dashboard's list with its 20,000 outcomes. One given is kept. A
    # Sentinel set is removed whole.
    made = app.namespace == "default"
    ns = f"demo-{int(time.time())}" if made else app.namespace
    durability = DURABILITY if master_kill is not None else "none"
    with errors():
        c = TimerClient.from_url(url, ns, durability=durability)
        c.init(shards=16)
    where = "the demo's Sentinel set" if master_kill is not None else app.safe_url
    kept = " (dropped at the end; give --namespace NAME to keep it)" if made else ""
    workers = f"{n_workers} worker" + ("s" if n_workers != 1 else "")
    say(f"Namespace {ns!r}{kept} at {where}; starting {workers} (lease {lease_ms} ms)")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(n_workers):
            with starting():
                procs[f"w{i}"] = start_worker(url, ns, f"w{i}", lease_ms, durability)
        summary = _run(
            app,
            c,
            ns,
            url,
            procs,
            timers,
            min_delay,
            max_delay,
            lease_ms,
            no_kill,
            rng,
            say,
            use_spark,
            durability,
            master_kill,
        )
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()  # reaped, or Popen warns it is still running
        if made and master_kill is None:  # after its processes: none writes to it again
            _drop(c, say)
        c.close()
    ok = summary["lost"] == 0 and summary["duplicates"] == 0 and summary["early"] == 0
    emit(app.json, {**summary, "ok": ok}, pairs(summary))
    if not app.json:
        click.echo(
            "OK: every timer ended exactly once, none early."
            if ok
            else "FAILED: timers were lost, doubled or early (see above)."
        )
    if not ok:
        raise SystemExit(1)


def _drop(c: TimerClient, say: Callable[[str], None]) -> None:
    """Drop the run's own namespace; one that cannot be dropped is said, with the error
    the run may be ending with left to show."""
    try:
        drop_namespace(c)
    except (redis.RedisError, OSError) as exc:
        say(f"Could not drop namespace {c.namespace!r}: {type(exc).__name__}: {exc}")
    else:
        say(f"Dropped namespace {c.namespace!r}")


def _run(
    app: App,
    c: TimerClient,
    ns: str,
    url: str,
    procs: dict[str, Any],
    n: int,
    min_delay: int,
    max_delay: int,
    lease_ms: int,
    no_kill: bool,
    rng: random.Random,
    say: Any,
    use_spark: bool = False,
    durability: str = "none",
    master_kill: MasterKill | None = None,
) -> dict[str, Any]:
    jobs, actions, acted = plan(n, min_delay, max_delay, rng, run_prefix(c, say))
    # The reaction starts first: its process is up and reading before any timer is due.
    hanging = [j["id"] for j in jobs if j["id"] not in acted]
    reaction = Reaction(url, c, poison=hanging[0] if hanging else "", durability=durability)
    try:
        with starting():
            reaction.start()
        reaction.wait_ready()
        base = c.outcomes_total()  # a kept namespace's earlier runs' outcomes
        _register(app, c, url, jobs, use_spark=use_spark, say=say)
        driver = Driver(c, actions)
        driver.start()
        kill = Kill()
        deadline = time.monotonic() + max_delay / 1000 + 120
        with Progress("Waiting for outcomes", n, hidden=app.json) as bar:
            shown = 0
            while True:
                if master_kill is not None:
                    master_kill.step(shown >= KILL_AT * n)
                try:  # (a failover answers StoreError for a moment: asked again next round)
                    done = c.outcomes_total() - base
                    bar.update(done)
                    shown = done
                    if done >= n:
                        break
                    if not no_kill:
                        killed = kill.at is not None
                        kill.step(
                            c,
                            procs,
                            done >= 0.4 * n,
                            url=url,
                            ns=ns,
                            lease_ms=lease_ms,
                            durability=durability,
                        )
                        if not killed and kill.at is not None:  # said as it happens
                            bar.note(
                                f"Killed worker {kill.victim} (SIGKILL) once 40% of the "
                                f"timers had ended, with shards {kill.shards}; started "
                                f"{kill.victim}-new"
                            )
                except TimerError:
                    pass
                if time.monotonic() > deadline:
                    break  # the summary will show what is missing
                time.sleep(0.1)
        driver.stop.set()
        driver.join(10)
        if driver.error is not None:
            raise driver.error
        reaction.finish()
    finally:
        reaction.stop()  # also when the run failed: no handler process left behind
    if master_kill is not None and master_kill.killed is not None:
        promoted = (
            f"the Sentinels promoted {master_kill.new} after {master_kill.promoted_ms} ms"
            if master_kill.promoted_ms is not None
            else "no new master was seen"
        )
        say(f"Killed the Redis master {master_kill.old} (SIGKILL) at 60%; {promoted}")
    return {
        **summarise(c, jobs, kill.at, kill.untaken_at, kill.shards, lease_ms),
        **reaction.summary({j["id"] for j in jobs}),
        **(master_kill.summary() if master_kill is not None else {}),
    }


def _register(
    app: App, c: TimerClient, url: str, jobs: list[dict[str, Any]], *, use_spark: bool, say: Any
) -> None:
    if use_spark:
        say("Registering the timeouts from a Spark DataFrame (local[2])")
        with errors():
            register_with_spark(url, c.namespace, jobs)
        return
    with (
        errors(),
        Progress("Scheduling", len(jobs), hidden=app.json) as bar,
    ):
        for start in range(0, len(jobs), 2_000):
            res = c.schedule_many(jobs[start : start + 2_000])
            bad = [r for r in res if isinstance(r, Exception)]
            if bad:
                raise bad[0]
            bar.update(start + len(res))
