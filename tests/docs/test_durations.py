"""Where a reader meets durations (the README's tour, the CLI reference), the pages say
the one rule the command line keeps (a new user's trial: the README said `500ms, 30s, 2m,
1h30m`, and bare numbers were refused, taken as seconds or as milliseconds, by option): a
bare number is refused but on the options that took one before, each named with its
unit."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from .examples import ROOT

PAGES = ("README.md", "docs/reference/cli.md")
NAMED = r"((?:`[^`\n]+`(?:,\s+|\s+and\s+)?)+)"  # `a`, `b` and `c`


def duration_options(
    command: object, prog: str = "", parent: object = None
) -> Iterator[tuple[str, object]]:
    """(`command --option`, as the pages name it: its alias without a unit if it has one)
    and the option's type, for each option of the tree that takes a duration."""
    import click  # noqa: PLC0415

    from timer.cli import durations  # noqa: PLC0415

    kinds = (durations.Duration, durations.Millis, durations.Seconds)
    assert isinstance(command, click.Command)
    assert parent is None or isinstance(parent, click.Context)
    ctx = click.Context(command, info_name=prog or "tickwheel", parent=parent)
    for param in command.get_params(ctx):
        if isinstance(param, click.Option) and isinstance(param.type, kinds):
            plain = [o for o in param.opts if not o.endswith("-ms")] or param.opts
            yield f"{prog} {plain[0]}".strip(), param.type
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from duration_options(sub, f"{prog} {name}".strip(), ctx)


def taking_bare_numbers() -> dict[str, set[str]]:
    """The unit -> the options that take a bare number in it, but those whose name says
    it (`--lease-ms`)."""
    from timer.cli import durations  # noqa: PLC0415
    from timer.cli.main import main  # noqa: PLC0415

    found: dict[str, set[str]] = {"seconds": set(), "milliseconds": set()}
    for name, kind in duration_options(main):
        if isinstance(kind, durations.Seconds):
            found["seconds"].add(name)
        elif isinstance(kind, durations.Millis) and not name.endswith("-ms"):
            found["milliseconds"].add(name)
    return found


def test_every_other_duration_option_refuses_a_bare_number() -> None:
    """What the pages say of every option they do not name: `5` is refused."""
    import click  # noqa: PLC0415

    from timer.cli import durations  # noqa: PLC0415
    from timer.cli.main import main  # noqa: PLC0415

    refusing = 0
    for name, kind in duration_options(main):
        if isinstance(kind, durations.Duration):
            refusing += 1
            try:
                kind.convert("5", None, None)
            except click.BadParameter:
                continue
            raise AssertionError(f"{name} takes a bare 5: the pages say it is refused")
    assert refusing > 20, refusing


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_each_option_that_takes_a_bare_number_with_its_unit(page: str) -> None:
    text = (ROOT / page).read_text()
    assert "write the unit" in text and "A bare number is refused" in " ".join(text.split())
    for unit, options in taking_bare_numbers().items():
        said = re.search(rf"\b{unit} for {NAMED}", text)
        assert said, f"{page}: no '{unit} for `…`'"
        named = set(re.findall(r"`([^`]+)`", said.group(1)))
        assert named == options, f"{page}: {unit} for {sorted(named)}; the CLI: {sorted(options)}"
