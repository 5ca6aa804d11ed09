"""``tickwheel bench NAME``: run one benchmark of ``benchmarks/`` (from a source checkout)."""

from __future__ import annotations

import importlib

import click

NAMES = {
    "engine": "benchmarks.engine",
    "register": "benchmarks.register",
    "worker": "benchmarks.worker",
    "spark": "benchmarks.spark",
    "memory": "benchmarks.memory",
    "recovery": "benchmarks.recovery",
    "peers": "benchmarks.peers",
    "handlers": "benchmarks.handlers",
    "all": "benchmarks.run_all",
}


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name", type=click.Choice(sorted(NAMES)))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def bench(name: str, args: tuple[str, ...]) -> None:
    """Run benchmark NAME and print its JSON; extra ARGS go to it (try: bench engine --help).

    The benchmarks compare side by side in one run (ratios). They live in benchmarks/ of
    the source tree: run this from a checkout.
    """
    try:
        module = importlib.import_module(NAMES[name])
    except ImportError:
        raise click.ClickException(
            "the benchmarks are not installed with the package; run this from a source "
            "checkout (where benchmarks/ is)"
        ) from None
    raise SystemExit(module.main(list(args)))
