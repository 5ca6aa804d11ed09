"""What every command's --help and option errors say, checked over the whole command
tree (no server needed): a default said once, and a duration refused in one set of words
whatever the option's bare number means."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from timer.cli.durations import Duration, Millis, Seconds
from timer.cli.main import main

# a default as click says it ("[default: 1]", "[env X; default: Y]") or as a help does
SAYS_DEFAULT = r"\(default:? [^)]*\)|\[default: |[;,] default: |\bby default\b"
DURATION_WORDS = (
    "is not a duration; write numbers with units ms, s, m, h or d, e.g. 500ms, 1.5s, 2m, "
    "1h30m or 10d"
)


def _commands(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, [*path, name])


def _options() -> Iterator[tuple[list[str], click.Context, click.Option]]:
    for path, command in _commands(main, ["tickwheel"]):
        ctx = click.Context(command, info_name=path[-1])
        for param in command.get_params(ctx):
            if isinstance(param, click.Option):
                yield path, ctx, param


def _choices() -> Iterator[tuple[list[str], click.Context, click.Parameter]]:
    """Every option and argument of every command that takes a choice."""
    for path, command in _commands(main, ["tickwheel"]):
        ctx = click.Context(command, info_name=path[-1])
        for param in command.get_params(ctx):
            if isinstance(param.type, click.Choice):
                yield path, ctx, param


def test_no_options_help_says_its_default_twice() -> None:
    """`schedule --help` showed `(default 1).  [default: 1]` for --need (the shared field
    help said it, and click's show_default again): no option of any command says its
    default more than once, in its words or in click's brackets."""
    doubled = []
    for path, ctx, option in _options():
        record = option.get_help_record(ctx)
        if record is None:
            continue
        said = " ".join(record[1].split())
        times = len(
            re.findall(r"\(default:? [^)]*\)|\[default: |[;,] default: |\bby default\b", said)
        )
        if times > 1:
            doubled.append(f"{' '.join(path)} {option.opts[0]}: {said}")
    assert not doubled, "\n".join(doubled)


def test_every_duration_option_refuses_in_the_same_words() -> None:
    """`wait --timeout 5x` said "not a number of seconds" and `--max-total 5x` "not a
    number of milliseconds", though both take 30s or 5m as `schedule --in` does: every
    duration option says what `--in` says, and what its bare number means."""
    checked = 0
    for path, ctx, option in _options():
        if not isinstance(option.type, Duration | Millis | Seconds):
            continue
        with pytest.raises(click.BadParameter) as refused:
            option.type.convert("5x", option, ctx)
        said = str(refused.value.message)
        assert said.startswith(f'"5x" {DURATION_WORDS}'), (path, option.opts, said)
        if not isinstance(option.type, Duration):
            unit = "seconds" if isinstance(option.type, Seconds) else "milliseconds"
            assert f"a bare number is {unit}" in said, (path, option.opts, said)
        checked += 1
    assert checked > 20
    out = CliRunner().invoke(main, ["wait", "x", "--timeout", "5x"])
    assert out.exit_code == 2
    assert f'"5x" {DURATION_WORDS} (a bare number is seconds)' in out.output, out.output


# what a help says, word by word, without click's truncated command summaries ("that...")
WIDTHS = (*range(60, 81), 100, 120, 160, 200)


def _help_words(path: list[str], columns: int) -> list[str]:
    # the width given as the terminal's (click's 80-column cap lifted, as a wide
    # terminal and an unwrapped help need)
    out = CliRunner().invoke(
        main, [*path[1:], "--help"], terminal_width=columns, max_content_width=columns
    )
    assert out.exit_code == 0, (path, out.output)
    return [w for w in out.output.split() if not w.endswith("...")]


def test_no_help_splits_a_word_at_any_width() -> None:
    """`handle --help` at 80 columns showed `(see https://tickwheel.readthedo` /
    `cs.io/guides/http/#webhooks)` and `acl --help` `redis://tw-` /
    `ROLE:PASSWORD@host:port/0.`: copied, neither is the address. Every command's help,
    at every width from 60 to 200, has only words its unwrapped help has (a long one
    overflows its line instead)."""
    checked = 0
    for path, _command in _commands(main, ["tickwheel"]):
        whole = set(_help_words(path, 10_000))
        for columns in WIDTHS:
            split = [w for w in _help_words(path, columns) if w not in whole]
            assert not split, f"{' '.join(path)} --help at {columns} columns splits: {split}"
            checked += 1
    assert checked > 50 * len(WIDTHS)


def test_a_missing_choice_is_refused_in_one_line() -> None:
    """`tokens create` without --scope said `Missing option '--scope'. Choose from:` then
    `read,`, `write,` and `admin` on tab-indented lines of their own. Every option and
    argument of every command that takes a choice says what it takes on the error's
    line."""
    checked = 0
    for path, ctx, param in _choices():
        assert isinstance(param.type, click.Choice)
        said = click.MissingParameter(ctx=ctx, param=param).format_message()
        assert "\n" not in said and "\t" not in said, (path, param.name, said)
        for choice in param.type.choices:
            assert re.search(rf"[ ,]{re.escape(str(choice))}[,.]? ", f"{said} "), said
        checked += 1
    assert checked >= 8
    out = CliRunner().invoke(main, ["tokens", "create"])
    assert out.exit_code == 2
    assert out.output.splitlines()[-1] == (
        "Error: Missing option '--scope'. Choose read, write or admin."
    ), out.output


def test_every_help_fits_80_columns() -> None:
    """At COLUMNS=80, `tickwheel --help` had lines of 86 to 88 characters ("Without
    --redis-url…", the exit codes), `dashboard --help` one of 98 (its `export
    TICKWHEEL_DASHBOARD_TOKEN=…`), `acl --help` 82 to 83, `schedules create`/`preview
    --help` 81 to 87 (the DST text), `serve --help` 85 to 88 (its curl example): a terminal
    wrapped them mid-word. Every line of every command's help fits in 80 columns, but
    for a line that is one word longer than that (a URL), indented."""
    wide = []
    for path, _command in _commands(main, ["tickwheel"]):
        out = CliRunner().invoke(main, [*path[1:], "--help"], env={"COLUMNS": "80"})
        assert out.exit_code == 0, (path, out.output)
        for line in out.output.splitlines():
            if len(line) > 80 and len(line.split()) > 1:
                wide.append(f"{' '.join(path)} ({len(line)}): {line}")
    assert not wide, "\n".join(wide)


def test_a_wrong_choice_is_quoted_as_json_as_every_value_said_back() -> None:
    """`worker --log-level verbose` said `'verbose' is not one of 'debug', 'info'…`, in
    Python's quotes, where every other message quotes what it was given as JSON does:
    every choice of every command says a wrong value back so, and its choices too."""
    checked = 0
    for path, ctx, param in _choices():
        assert isinstance(param.type, click.Choice)
        with pytest.raises(click.BadParameter) as refused:
            param.type.convert("it's", param, ctx)
        said = str(refused.value.message)
        listed = ", ".join(f'"{c}"' for c in param.type.choices)
        assert said == f'"it\'s" is not one of {listed}.', (path, param.name, said)
        checked += 1
    assert checked >= 8
    out = CliRunner().invoke(main, ["tokens", "create", "--scope", "it's"])
    assert out.exit_code == 2
    assert out.output.splitlines()[-1] == (
        """Error: Invalid value for '--scope': "it's" is not one of "read", "write", "admin"."""
    ), out.output


def test_a_mistyped_choice_says_the_nearest_one() -> None:
    """`acl wrker` listed the roles with no did-you-mean, as a mistyped command has."""
    out = CliRunner().invoke(main, ["acl", "wrker"])
    assert out.exit_code == 2
    assert out.output.splitlines()[-1].endswith('. Did you mean "worker"?'), out.output
    far = CliRunner().invoke(main, ["acl", "zzzz"])
    assert "Did you mean" not in far.output, far.output


def test_an_option_named_ms_says_it_takes_a_duration_too() -> None:
    """`worker --lease-ms 2s` is taken (2 s), but its help read `--lease-ms MS  The lease
    TTL in milliseconds, e.g. 5000`: every option named `-ms` says what it takes, a
    duration such as 5s or a bare number of milliseconds, and shows no `MS` to fill in."""
    checked = 0
    for path, ctx, option in _options():
        if not any(o.endswith("-ms") for o in option.opts):
            continue
        assert isinstance(option.type, Millis), (path, option.opts)
        record = option.get_help_record(ctx)
        assert record is not None, (path, option.opts)
        said = " ".join(record[1].split())
        assert not record[0].endswith(" MS"), (path, record[0])
        assert re.search(r"(e\.g\.|such as) \d+(ms|s|m|h)\b", said), (path, option.opts, said)
        assert re.search(r"bare number (is|of) milliseconds", said), (path, option.opts, said)
        checked += 1
    assert checked >= 4
    out = CliRunner().invoke(main, ["worker", "--help"], terminal_width=200)
    line = next(s for s in out.output.splitlines() if s.lstrip().startswith("--lease-ms"))
    assert " ".join(line.split()) == (
        "--lease-ms DURATION The lease TTL, instead of --lease: a duration such as 5s, or a "
        "bare number of milliseconds, e.g. 5000."
    ), line
