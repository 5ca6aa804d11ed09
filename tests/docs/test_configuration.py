"""The configuration page names every environment variable the command line reads or
its help names (a new user's trial: `serve`'s `TICKWHEEL_TOKENS` and `handle`'s
`TICKWHEEL_WEBHOOK_SECRET` were in `--help` and not on the page)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .examples import ROOT

PAGE = ROOT / "docs" / "reference" / "configuration.md"
NAMED = re.compile(r"\bTICKWHEEL_[A-Z_]*[A-Z]")


def environment_names(
    command: object, prog: str, parent: object = None
) -> Iterator[tuple[str, str]]:
    """(prog, a variable) for each command of the tree: every option's ``envvar`` (its
    automatic one too, when a context sets a prefix), hidden options' included, and every
    ``TICKWHEEL_…`` its whole --help names."""
    import click  # noqa: PLC0415

    assert isinstance(command, click.Command)
    assert parent is None or isinstance(parent, click.Context)
    ctx = click.Context(command, info_name=prog.rsplit(" ", 1)[-1], parent=parent,
                        terminal_width=10_000, max_content_width=10_000,
                        **command.context_settings)  # fmt: skip
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        envvar = param.envvar
        names = [envvar] if isinstance(envvar, str) else list(envvar or ())
        if not names and ctx.auto_envvar_prefix and param.allow_from_autoenv and param.name:
            names = [f"{ctx.auto_envvar_prefix}_{param.name.upper()}"]
        yield from ((f"{prog} {param.opts[0]}", name) for name in names)
    texts = [command.get_help(ctx), command.short_help or ""]
    yield from ((prog, name) for text in texts for name in NAMED.findall(text))
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from environment_names(sub, f"{prog} {name}", ctx)


def test_the_configuration_page_names_every_variable_the_cli_reads() -> None:
    from timer.cli.main import main  # noqa: PLC0415

    page = PAGE.read_text()
    found = list(environment_names(main, "tickwheel"))
    names = {name for _, name in found}
    missing = sorted({(name, where) for where, name in found
                      if not re.search(rf"\b{name}\b", page)})  # fmt: skip
    assert missing == [], f"{PAGE.relative_to(ROOT)} does not name {missing}"
    assert {"TICKWHEEL_REDIS_URL", "TICKWHEEL_TOKENS", "TICKWHEEL_WEBHOOK_SECRET"} <= names
    assert len(names) >= 10, sorted(names)
