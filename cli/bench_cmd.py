"""``tickwheel bench NAME``: run one benchmark of ``benchmarks/`` (from a source checkout)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import click

from timer.errors import ConfigError, quoted

from .app import TimerCommandError

NAMES = {
    "engine": "benchmarks.engine",
    "register": "benchmarks.register",
    "worker": "benchmarks.worker",
    "spark": "benchmarks.spark",
    "memory": "benchmarks.memory",
    "capacity": "benchmarks.capacity",
    "server_cost": "benchmarks.server_cost",
    "recovery": "benchmarks.recovery",
    "peers": "benchmarks.peers",
    "handlers": "benchmarks.handlers",
    "schedules": "benchmarks.schedules",
    "peer_cron": "benchmarks.peer_cron",
    "http_api": "benchmarks.http_api",
    "runner": "benchmarks.runner",
    "debounce": "benchmarks.debounce",
    "heartbeat": "benchmarks.heartbeat",
    "limits": "benchmarks.limits",
    "priority": "benchmarks.priority",
    "dashboard": "benchmarks.dashboard",
    "cluster_scale": "benchmarks.cluster_scale",
    "redis_faults": "benchmarks.redis_faults",
    "simulation": "benchmarks.simulation",
    "all": "benchmarks.run_all",
}

# The checkout this package runs from (an editable install): benchmarks/ sits beside cli/.
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _find_benchmarks() -> None:
    """Make ``benchmarks`` importable here and in the processes a benchmark starts."""
    if not (SOURCE_ROOT / "benchmarks" / "__init__.py").is_file():
        raise TimerCommandError(  # a missing part, as a missing extra is: exit 4
            ConfigError(
                "the benchmarks are not installed with the package: they come with "
                "tickwheel's source, where `pip install -e .` and then `tickwheel bench` "
                "or `make bench` run them (a clone of its repository); their figures are "
                "at https://tickwheel.readthedocs.io/measured/"
            )
        )
    root = str(SOURCE_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


class _NoOptions(click.Command):
    """A command that parses no option of its own, --help neither: `bench --help` is read
    as NAME (and answered), `bench NAME --help` is the benchmark's own help, and its help
    shows no Options section. Its help option is still there for click's usage errors,
    which add "Try 'tickwheel bench --help' for help." only for a command that has one
    (add_help_option=False, as bench was, left the line out)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        return list(self.params)


@click.command(
    cls=_NoOptions,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    options_metavar="",  # it has none of its own: ARGS go to the benchmark
)
@click.argument("name", required=False, metavar="NAME")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def bench(ctx: click.Context, name: str | None, args: tuple[str, ...]) -> None:
    """Run benchmark NAME and print its JSON; ARGS go to the benchmark.

    NAME is one of: engine, register, worker, spark, memory, capacity, server_cost (needs
    valgrind), recovery, peers, handlers, schedules, peer_cron, http_api (uses wrk),
    runner, debounce, heartbeat, limits, priority, dashboard (uses Chromium),
    cluster_scale, redis_faults, simulation (the deterministic simulation's speed), or
    all of them.
    `tickwheel bench NAME --help` shows that benchmark's own options. The benchmarks
    compare side by side in one run (ratios). They come with tickwheel's source, not
    with the wheel: in a clone of the repository, `pip install -e .` and run them
    there. Their last figures are at https://tickwheel.readthedocs.io/measured/
    """
    if name in {"--help", "-h"}:
        click.echo(ctx.get_help())
        ctx.exit(0)
    if name is None:
        raise click.UsageError(f"Missing argument NAME: one of {', '.join(NAMES)}.")
    if name not in NAMES:
        raise click.UsageError(f"No benchmark {quoted(name)}: choose one of {', '.join(NAMES)}.")
    _find_benchmarks()
    module = importlib.import_module(NAMES[name])
    sys.argv[0] = f"tickwheel bench {name}"  # the benchmark's usage and errors name it so
    raise SystemExit(module.main(list(args)))
