"""Entry point of the ``tickwheel`` console script.

The commands of DESIGN §6 arrive with the CLI issue; today only the group, ``--version``
and an honest ``demo`` exist.
"""

from __future__ import annotations

import click

from timer import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tickwheel")
def main() -> None:
    """tickwheel: a crash-tolerant, Redis-persisted distributed timer."""


@main.command()
def demo() -> None:
    """Run the main job: a job-timeout service surviving a worker crash (not built yet)."""
    click.echo(
        "tickwheel demo is not built yet: the workers and CLI issues add it.\n"
        "Today tickwheel ships its in-memory engine; see README.md."
    )
