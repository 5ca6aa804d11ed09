"""Time you can control (#71), measured: the simulation's speed and the test kit's.
Prints one JSON document.

    python -m benchmarks.simulation            # 6 seeds of the simulation
    python -m benchmarks.simulation --quick    # 2 seeds

- ``simulation``: ``sim.machine.run`` over seeds 0..N-1 (no bug planted; each seed a
  campaign of hypothesis runs): its steps a second and seeds a minute, and whether every
  seed held every promise.
- ``time_skipping``: the testing guide's job timeout (an hour, two failed attempts, a dead
  letter: ``timer.testing.TimeSkipping``), its real seconds for an hour and three minutes
  of virtual time, best of ``--repeat``.
- ``kit_wait``: ``env.client.wait`` for a timer an hour out (ten minutes with --quick),
  its real seconds, best of ``--repeat``: as it polls now (straight to the next firing)
  and, side by side in the same run, once as it polled before trial 33 (a turn every
  100 ms of virtual time: a minute of real time for the hour).
(The exhaustive check counts its states itself: ``python -m sim.exhaustive``.)

No server: the simulation and the kit run on fakeredis and virtual time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from timer.handlers import Backoff, Handlers
from timer.testing import TimeSkipping
from timer.testing.driving import Driving

from .options import count


def time_skipping_job_timeout() -> float:
    """The testing guide's retries example: real seconds for it, set-up included."""
    began = time.perf_counter()
    with TimeSkipping() as env:
        attempts: list[int] = []
        handlers = env.handle(
            Handlers(group="timeouts", max_attempts=3, backoff=Backoff(initial_s=60, jitter=0))
        )

        @handlers.on("expired")
        def notify_the_owner(outcome: Any) -> None:
            attempts.append(outcome.attempt)
            raise RuntimeError("the mail server is down")

        env.client.schedule("job:{7}", delay_ms=3_600_000)
        env.run_until_idle()
        assert attempts == [1, 2, 3] and env.client.count_dead_letters("timeouts") == 1
    return time.perf_counter() - began


def kit_wait(virtual_s: int, *, every_poll: bool) -> float:
    """Real seconds for ``env.client.wait`` of a timer ``virtual_s`` out; ``every_poll``:
    as the kit's clients polled before (every poll a sleep of its backoff, at most 100 ms)."""
    began = time.perf_counter()
    with TimeSkipping() as env:
        client = env.client
        if every_poll:  # the old poll: Time.poll's default, a sleep of the poll's pause
            client = env.store.timer_client(env.namespace, time=_EveryPoll(env))
        client.schedule("job:{8}", delay_ms=virtual_s * 1000)
        assert client.wait("job:{8}", timeout=2 * virtual_s).outcome == "expired"
        if client is not env.client:
            client.close()
    return time.perf_counter() - began


class _EveryPoll(Driving):
    def poll(self, seconds: float, at_most: float) -> None:
        self.sleep(seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seeds", type=count("seeds"), default=None, help="default 6 (quick: 2)")
    p.add_argument("--repeat", type=count("repeats"), default=5, help="runs of the kit's example")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")  # for the processes it may start
    from sim.machine import run  # noqa: PLC0415 - the checkout's sim/, found from the root

    seeds = args.seeds or (2 if args.quick else 6)
    results = [run(seed, steps=150, examples=15, shrink=False) for seed in range(seeds)]
    seconds = sum(r.seconds for r in results)
    steps = sum(r.steps for r in results)
    out: dict[str, Any] = {
        "simulation": {
            "seeds": seeds,
            "failed": [r.seed for r in results if not r.ok],
            "steps": steps,
            "seconds": round(seconds, 1),
            "steps_per_s": round(steps / seconds, 1),
            "seeds_per_min": round(seeds / seconds * 60, 2),
        },
        "time_skipping": {
            "example": "1 h job timeout, 2 failed attempts, a dead letter (3,780 s virtual)",
            "best_s": round(min(time_skipping_job_timeout() for _ in range(args.repeat)), 3),
            "virtual_s": 3_780,
        },
    }
    virtual_s = 600 if args.quick else 3_600
    old = kit_wait(virtual_s, every_poll=True)
    new = min(kit_wait(virtual_s, every_poll=False) for _ in range(args.repeat))
    out["kit_wait"] = {
        "example": f"env.client.wait of a timer {virtual_s:,} s out (virtual)",
        "best_s": round(new, 3),
        "before_s": round(old, 3),
        "new_over_before": round(new / old, 4),
    }
    print(json.dumps(out, indent=2))
    return 1 if out["simulation"]["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
