"""What a new user gives or pastes: a global option `tokens` would ignore, the token
file `tokens create` wrote, a worker's metrics URL given to `probe`, and the command a
namespace that is not initialised says to run."""

from __future__ import annotations

import json
import re
import shlex
from datetime import datetime
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from timer.cli.main import main
from timer.cli.serve_cmd import _created, default_tokens
from timer.durable.model.namespace import meta_from
from timer.errors import ConfigError, instant_text
from timer.testing import RedisServer, free_port

from .conftest import Run

URL = "redis://bob:s3cretpw@nohost:1/0"
SHOWN = "redis://bob:***@nohost:1/0"
WHY = "is ignored: tokens live in the file --tokens names, not in Redis"


@pytest.mark.parametrize("command", [["tokens"], ["tokens", "list"], ["tokens", "revoke"],
                                     ["tokens", "create"]])  # fmt: skip
def test_tokens_help_offers_no_redis_url_or_namespace_of_timers(command: list[str]) -> None:
    """`tickwheel tokens --help` offered --redis-url ("The Redis to use") and the
    namespace of timers, which no `tokens` command uses: they read and write a file."""
    shown = CliRunner().invoke(main, [*command, "--help"]).output
    options = shown.split("Options:")[1]
    assert "--redis-url" not in options and "--json" in options, shown
    assert "The namespace of timers" not in options, shown
    if command[-1] != "create":  # create's own --namespace: what the token may use
        assert "--namespace" not in options, shown


@pytest.mark.parametrize(
    ("args", "env", "given"),
    [
        (["--redis-url", URL, "tokens", "list"], {}, "--redis-url"),
        (["tokens", "--redis-url", URL, "list"], {}, "--redis-url"),
        (["tokens", "list", "--redis-url", URL], {}, "--redis-url"),
        (["tokens", "list"], {"TICKWHEEL_REDIS_URL": URL}, "TICKWHEEL_REDIS_URL"),
        (["tokens", "--redis-url", URL, "revoke", "nope"], {}, "--redis-url"),
        (["--redis-url", URL, "tokens", "revoke", "nope"], {}, "--redis-url"),
        (["tokens", "revoke", "nope"], {"TICKWHEEL_REDIS_URL": URL}, "TICKWHEEL_REDIS_URL"),
    ],
)  # fmt: skip
def test_tokens_say_they_ignore_a_redis_url_and_do_as_before(
    workdir: Path, args: list[str], env: dict[str, str], given: str
) -> None:
    """`tickwheel tokens --redis-url redis://nohost:1 list` ignored the URL without a
    word: given before or after the group's or the command's name, or in the
    environment, it is still ignored (a script that gives it keeps working) and one line
    on stderr says so, the password masked, as `tickwheel server` says it."""
    CliRunner().invoke(main, ["tokens", "create", "--scope", "read"], catch_exceptions=False)
    out = CliRunner().invoke(main, args, env=env)
    assert out.stderr.splitlines()[0] == f"Note: {given} {SHOWN} {WHY}", out.stderr
    plain = [a for a in args if a not in ("--redis-url", URL)]
    alone = CliRunner().invoke(main, plain, env={"TICKWHEEL_REDIS_URL": ""})
    assert (out.exit_code, out.stdout) == (alone.exit_code, alone.stdout), out.output
    assert out.stderr.splitlines()[1:] == alone.stderr.splitlines()
    assert "Note" not in alone.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--namespace", "billing", "tokens", "list"],
        ["tokens", "--namespace", "billing", "list"],
        ["tokens", "list", "--namespace", "billing"],
        ["tokens", "revoke", "nope", "--namespace", "billing"],
    ],
)
def test_tokens_list_and_revoke_say_they_ignore_a_namespace(workdir: Path, args: list[str]) -> None:
    """`tokens list` shows every token, `tokens revoke` names one by its id: a
    --namespace given to them is said to be ignored, wherever it was given."""
    out = CliRunner().invoke(main, args)
    assert out.stderr.splitlines()[0] == f"Note: --namespace billing {WHY}", out.stderr
    alone = CliRunner().invoke(main, [a for a in args if a not in ("--namespace", "billing")])
    assert (out.exit_code, out.stdout) == (alone.exit_code, alone.stdout), out.output


@pytest.mark.parametrize(
    "args", [["tokens", "list"], ["tokens", "revoke", "nope"], ["--json", "tokens", "list"]]
)
def test_tokens_list_and_revoke_do_not_call_an_exported_namespace_ignored(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """With a guide's `export TICKWHEEL_NAMESPACE=handlers-guide`, `tokens create` scoped
    the token to it without a word, and `tokens list` then said `Note:
    TICKWHEEL_NAMESPACE handlers-guide is ignored`: the variable is set for the other
    commands (create among them), so list and revoke say nothing of it either, as
    `tickwheel server` does not; a --namespace typed after them still gets the note."""
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", "handlers-guide")
    made = CliRunner().invoke(main, ["--json", "tokens", "create", "--scope", "read"])
    assert json.loads(made.stdout)["namespaces"] == ["handlers-guide"] and made.stderr == ""
    out = CliRunner().invoke(main, args)
    assert "Note" not in out.stderr and "ignored" not in out.stderr, out.stderr
    typed = CliRunner().invoke(main, [*args, "--namespace", "billing"])
    assert typed.stderr.splitlines()[0] == f"Note: --namespace billing {WHY}", typed.stderr


def test_tokens_list_shows_when_each_was_made_as_every_command_shows_an_instant(
    workdir: Path,
) -> None:
    """`tokens list` showed `2026-12-03T16:46:03+00:00` where every other command shows
    an instant as `2026-12-03T16:46:03.000Z`; --json keeps the text the file stores."""
    CliRunner().invoke(main, ["tokens", "create", "--scope", "read", "--name", "ci"])
    stored = json.loads(CliRunner().invoke(main, ["--json", "tokens", "list"]).stdout)
    created = stored[0]["created"]
    assert created.endswith("+00:00"), created  # --json: as before
    ms = round(datetime.fromisoformat(created).timestamp() * 1000)
    shown = CliRunner().invoke(main, ["tokens", "list"]).stdout.splitlines()
    assert shown[0].split() == ["id", "scope", "namespaces", "name", "created"], shown
    assert shown[2].split()[-1] == instant_text(ms), shown
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z", shown[2].split()[-1]), shown
    assert (_created(""), _created("last week")) == ("", "last week")  # an older file's


def test_tokens_create_still_takes_the_global_namespace_as_its_default(workdir: Path) -> None:
    """The global --namespace (before `tokens` or after it) is what a token may use when
    `create` names none: used, so not said to be ignored; a URL given beside it is."""
    for args in (["--namespace", "billing", "tokens"], ["tokens", "--namespace", "billing"]):
        out = CliRunner().invoke(
            main, [*args, "--redis-url", URL, "create", "--scope", "read", "--json"]
        )
        assert out.exit_code == 0, out.output
        assert json.loads(out.stdout)["namespaces"] == ["billing"]
        assert out.stderr == f"Note: --redis-url {SHOWN} {WHY}\n", out.stderr


def test_tokens_create_says_where_the_token_file_is_and_who_reads_it(workdir: Path) -> None:
    """`tickwheel tokens create` printed the token and never said where it stored it:
    it says the file, that `tickwheel serve` reads it and that `tickwheel dashboard
    --tokens PATH` can; --json adds the file to what it had. `tokens list` names the
    same file when it holds no token."""
    path = default_tokens().absolute()
    empty = CliRunner().invoke(main, ["tokens", "list"])
    assert f"No token file at {path} " in empty.stdout, empty.output
    made = CliRunner().invoke(main, ["tokens", "create", "--scope", "read"])
    assert made.exit_code == 0 and made.stdout.startswith("tw_"), made.output
    assert made.stderr.splitlines()[1] == (
        f"Stored hashed in {path}: `tickwheel serve` reads it; `tickwheel dashboard "
        f"--tokens {path}` signs users in with its tokens."
    ), made.stderr
    as_json = CliRunner().invoke(main, ["--json", "tokens", "create", "--scope", "write"])
    said = json.loads(as_json.stdout)
    assert set(said) == {"id", "token", "scope", "namespaces", "file"} and as_json.stderr == ""
    assert said["file"] == str(path)

    given = workdir / "my tokens.json"
    made = CliRunner().invoke(main, ["tokens", "create", "--scope", "read", "--tokens", given.name])
    quoted = shlex.quote(str(given))
    assert (
        f"Stored hashed in {given}: `tickwheel serve --tokens {quoted}` reads it; "
        f"`tickwheel dashboard --tokens {quoted}`"
    ) in made.stderr, made.stderr
    given.write_text('{"tokens": []}')
    listed = CliRunner().invoke(main, ["tokens", "list", "--tokens", given.name])
    assert listed.stdout == f"No tokens in {given}.\n", listed.output


def test_tokens_revoke_takes_the_whole_token_and_never_says_a_secret(workdir: Path) -> None:
    """`tokens revoke tw_<id>_<secret>` (the token `create` printed, pasted) said "no
    token" and echoed the whole secret: it revokes the token by the id in it, and an
    error about a token given shows its id, or its length, never the secret."""
    made = CliRunner().invoke(main, ["--json", "tokens", "create", "--scope", "read"])
    token = json.loads(made.stdout)
    bearer = token["token"]
    secret = bearer.split("_", 2)[2]  # tw_<id>_<secret>; a secret may hold "_" too
    revoked = CliRunner().invoke(main, ["tokens", "revoke", bearer])
    assert revoked.exit_code == 0, revoked.output
    assert revoked.stdout == f"Revoked token {token['id']}\n" and secret not in revoked.output
    again = CliRunner().invoke(main, ["tokens", "revoke", bearer])
    assert again.exit_code == 6 and secret not in again.output, again.output
    assert f'no token "{token["id"]}" (the id in the token given; see' in again.stderr
    alone = CliRunner().invoke(main, ["tokens", "revoke", secret])  # the secret part alone
    assert alone.exit_code == 6 and secret not in alone.output, alone.output
    assert "no token has the 43-character id given (not shown; an id is 12 hex" in alone.stderr
    short = CliRunner().invoke(main, ["tokens", "revoke", "nope"])
    assert 'no token "nope" (see `tickwheel tokens list`)' in short.stderr, short.output


@pytest.mark.parametrize("suffix", ["", "/", "/metrics"])
def test_probe_takes_a_workers_metrics_url(workdir: Path, suffix: str) -> None:
    """`tickwheel probe http://localhost:9100` said "more than one colon": the URL a
    user pastes, with or without /metrics, is taken as its HOST:PORT."""
    port = free_port()
    for host in ("localhost", "[::1]"):
        url = f"http://{host}:{port}{suffix}"
        result = CliRunner().invoke(main, ["probe", url, "--timeout", "1"])
        assert result.exit_code == 1, result.output  # asked, and nobody answers
        assert f"no worker answers at http://{host}:{port}/ready" in result.output


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("https://localhost:9100", "serves its metrics over http://, not https://"),
        ("ftp://localhost:9100/metrics", "not ftp://"),
        ("http://localhost:9100/ready", 'itself, not "/ready"'),
        ("http://localhost:9100/metrics?x=1", 'not "/metrics?x=1"'),
        ("http://localhost/metrics", "no port in the URL"),
        ("http://localhost:0/metrics", "the port must be a number from 1 to 65535"),
    ],
)
def test_probe_refuses_another_url_saying_to_give_host_port(
    workdir: Path, address: str, says: str
) -> None:
    result = CliRunner().invoke(main, ["probe", address])
    assert result.exit_code == 2, result.output
    assert says in result.output and "HOST:PORT" in result.output, result.output
    assert "no worker answers" not in result.output


def test_a_namespace_not_initialised_says_how_to_initialise_that_one(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """`tickwheel --namespace uninit worker` said to run `tickwheel init --shards N`,
    which initialised `default`: the command it says names the namespace, and run as
    said (pasted as it is: no N left to fill in) it initialises that one."""
    missing = tw("stats", expect=4)
    hint = f"`tickwheel --namespace {namespace} init`"
    assert hint in missing.output, missing.output
    pasted = shlex.split(hint.strip("`"))[1:]
    made = CliRunner().invoke(main, ["--redis-url", redis_server.url, *pasted])
    assert made.exit_code == 0, made.output
    tw("stats")


def test_the_librarys_not_initialised_error_names_a_namespace_but_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TICKWHEEL_NAMESPACE", raising=False)
    for name, command in (
        ("default", "`tickwheel init`"),
        ("billing.eu", "`tickwheel --namespace billing.eu init`"),
    ):
        with pytest.raises(ConfigError) as error:
            meta_from({}, name, "redis://h:1/0")
        assert (
            f"run {command} once (16 shards; --shards N for another count) or "
            "TimerClient.init()" in str(error.value)
        ), error.value


def test_the_not_initialised_hint_says_no_n_to_guess_and_the_count_it_gives() -> None:
    """The hint said `tickwheel init --shards N`, leaving N to guess, where a plain
    `tickwheel init` works: it says that, and the count it says is the one `init` and
    TimerClient.init() give."""
    from timer.cli.namespace_cmd import init  # noqa: PLC0415
    from timer.client import DEFAULT_SHARDS  # noqa: PLC0415
    from timer.durable.model.namespace import INIT_SHARDS  # noqa: PLC0415

    shards = next(p for p in init.params if p.name == "shards")
    assert shards.default == DEFAULT_SHARDS == INIT_SHARDS == 16


@pytest.mark.parametrize(("exported", "says"), [
    ("billing", "`tickwheel --namespace default init`"),
    ("default", "`tickwheel init`"),
    ("", "`tickwheel init`"),
])  # fmt: skip
def test_the_hint_for_default_names_it_when_the_shell_exports_another(
    monkeypatch: pytest.MonkeyPatch, exported: str, says: str
) -> None:
    """A user who followed a guide that exported TICKWHEEL_NAMESPACE=billing, told that
    `default` is not initialised, would paste `tickwheel init` and initialise billing:
    with another namespace in the environment the hint names `--namespace default`."""
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", exported)
    with pytest.raises(ConfigError) as error:
        meta_from({}, "default", "redis://h:1/0")
    assert f"run {says} once" in str(error.value), error.value


def test_pasting_the_hint_for_default_in_a_shell_that_exports_another_initialises_default(
    workdir: Path, server_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as the CLI runs it, on a server of its own (where `default` is not
    initialised): the hint's command, pasted in the shell that exported another
    namespace, initialises `default`, the one the error was about."""
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", "billing")
    with RedisServer(workdir / "own", binary=server_binary) as own:
        missing = CliRunner().invoke(
            main, ["--redis-url", own.url, "--namespace", "default", "stats"]
        )
        assert missing.exit_code == 4, missing.output
        hint = missing.output.split("run `")[1].split("`")[0]
        assert hint == "tickwheel --namespace default init", missing.output
        made = CliRunner().invoke(main, ["--redis-url", own.url, *shlex.split(hint)[1:]])
        assert made.exit_code == 0, made.output
        r = redis.Redis.from_url(own.url)
        assert (r.exists("{tw:default}:meta"), r.exists("{tw:billing}:meta")) == (1, 0)
        r.close()


def test_tokens_revoke_takes_yes_as_every_deleting_command(workdir: Path) -> None:
    """A script passing --yes to every deleting command got `No such option '--yes'`
    from `tokens revoke`: it takes it (and still never asks)."""
    made = CliRunner().invoke(main, ["--json", "tokens", "create", "--scope", "read"])
    token_id = json.loads(made.stdout)["id"]
    out = CliRunner().invoke(main, ["tokens", "revoke", token_id, "--yes"])
    assert out.exit_code == 0 and f"Revoked token {token_id}" in out.stdout, out.output
    assert json.loads(CliRunner().invoke(main, ["--json", "tokens", "list"]).stdout) == []
