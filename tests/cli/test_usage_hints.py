"""Usage errors that say what was meant, for mistakes a new user makes: a Redis URL where
the command goes, a count option under another command's name for it. No server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from timer.cli.main import main

NO_URL = {"TICKWHEEL_REDIS_URL": "", "TICKWHEEL_NAMESPACE": ""}


def usage_error(*args: str) -> str:
    """The last line of what ``tickwheel ARGS`` says, which must be a usage error."""
    out = CliRunner().invoke(main, list(args))
    assert out.exit_code == 2, out.output
    return out.output.splitlines()[-1]


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("redis://bob:s3cretpw@127.0.0.1:6379/0", "redis://bob:***@127.0.0.1:6379/0"),
        ("rediss://:s3cretpw@cache.example:6380", "rediss://:***@cache.example:6380"),
        ("redis+sentinel://s1:26379,s2:26379/mymaster", "redis+sentinel://s1:26379,s2:26379/mymaster"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ("127.0.0.1:6379", "127.0.0.1:6379"),
        ("localhost:6379", "localhost:6379"),
    ],
)  # fmt: skip
def test_a_url_given_as_the_command_is_said_to_go_in_redis_url(given: str, shown: str) -> None:
    """`tickwheel redis://127.0.0.1:6379 get 'job:{1}'` said only "No such command
    'redis://127.0.0.1:6379'": a URL (or host:port) where the command goes is said to be
    one, to give as --redis-url, its password never shown."""
    give = "--redis-url URL" if "://" in given else f"--redis-url redis://{given}"
    said = usage_error(given, "get", "job:{1}")
    assert said == (
        f"Error: No such command {shown!r}: it looks like a Redis URL. Give it as {give}, "
        "before or after the command (or set TICKWHEEL_REDIS_URL)."
    ), said
    assert "s3cretpw" not in said


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("bob:s3cretpw@localhost:6379", "bob:***@localhost:6379"),
        (":s3cretpw@cache.example:6379/0", ":***@cache.example:6379/0"),
        ("s3cretpw@127.0.0.1:6379", "***@127.0.0.1:6379"),
    ],
)
def test_a_url_with_a_password_and_no_scheme_is_told_redis_masked(given: str, shown: str) -> None:
    """`--redis-url user:pass@localhost:6379` was `unsupported Redis URL scheme "" in …`
    where `localhost:6379` is told "did you mean redis://localhost:6379?"; given as the
    command, click's "No such command" showed the password. Both say redis://, and never
    the password."""
    meant = f"redis://{shown}? (with the password where *** is)"
    out = CliRunner().invoke(main, ["--redis-url", given, "get", "job:{1}"], env=NO_URL)
    assert out.exit_code == 4, out.output
    assert f"{shown} has no scheme: did you mean {meant}" in out.output, out.output
    said = usage_error(given, "get", "job:{1}")
    assert said.startswith(f"Error: No such command {shown!r}: it looks like a Redis URL"), said
    assert f"--redis-url redis://{shown} (with the password where *** is)" in said
    assert "s3cretpw" not in out.output + said


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("s3cretpw", "the Redis URL has no scheme (no redis:// or the like); use redis://"),
        ("redis:/bob:s3cretpw@127.0.0.1:6379/0",
         'the Redis URL starts "redis:/": a scheme is followed by two slashes (redis://…)'),
        ("rediss:bob:s3cretpw@h:1", 'starts "rediss:": a scheme is followed by two slashes'),
        ("REDIS://:s3cretpw@127.0.0.1:6379/0", "write the Redis URL's scheme in lower case"),
    ],
)  # fmt: skip
def test_a_url_mistyped_is_told_what_to_fix_and_no_secret_said_back(given: str, says: str) -> None:
    """Trial 20: `--redis-url s3cretPW` (a password pasted) was said back whole; `redis:/bob:
    pw@host` was told "did you mean redis://redis:***@…"; `REDIS://` was refused as an
    unsupported scheme. Each says what to fix, and never the secret."""
    out = CliRunner().invoke(main, ["--redis-url", given, "get", "job:{1}"], env=NO_URL)
    assert out.exit_code == 4, out.output
    assert says in out.output, out.output
    assert "s3cretpw" not in out.output and "did you mean redis://redis" not in out.output


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/-1",
        "redis://:s3cretpw@127.0.0.1:6379/-1",
        "redis://127.0.0.1:6379?db=-1",
        "redis://127.0.0.1:6379/\u0661",  # an Arabic-Indic 1: str.isdigit takes it
        "redis+sentinel://127.0.0.1:26379/mymaster?db=-1",
    ],
)
def test_a_database_below_zero_is_refused_as_a_number_from_0(url: str) -> None:
    """`/-1` must be said to be no database number; `?db=-1` was taken (redis-py reads
    it), to fail later at SELECT."""
    out = CliRunner().invoke(main, ["--redis-url", url, "get", "job:{1}"], env=NO_URL)
    assert out.exit_code == 4, out.output
    assert "the database must be a number from 0 (/0)" in out.output, out.output
    assert "s3cretpw" not in out.output


def test_another_unknown_command_keeps_clicks_suggestion() -> None:
    """A typo of a command is still told the command it is near."""
    assert usage_error("gett", "x") == "Error: No such command 'gett'. Did you mean 'get'?"


@pytest.mark.parametrize(
    ("command", "given", "meant"),
    [
        (["demo"], "--count", "--timers"),
        (["demo"], "--n", "--timers"),
        (["demo"], "--number", "--timers"),
        (["demo"], "-n", "--timers"),
        (["tail"], "--n", "--count"),
        (["tail"], "--limit", "--count"),
        (["schedules", "preview"], "--number", "--count"),
        (["timers", "list"], "--count", "--limit"),
        (["dead", "list"], "--count", "--limit"),
        (["schedules", "backfill", "hb"], "--count", "--limit"),
        (["heartbeat", "x"], "--in", "--extend"),
        (["schedule", "x"], "--delay", "--in"),
        (["reschedule", "x"], "--extend", "--in"),
    ],
)
def test_a_synonym_of_a_count_option_is_told_the_commands_own(
    command: list[str], given: str, meant: str
) -> None:
    """`tickwheel demo --count 10` said "Did you mean '--json'?" (click's nearest spelling),
    where the option meant is --timers: a synonym of a command's count option is told
    that option; so is a sibling command's word (heartbeat's --extend is schedule's
    --in: `heartbeat x --in 30s` said "Did you mean '--json'?")."""
    said = usage_error(*command, given, "10")
    assert said == f"Error: No such option {given!r}. Did you mean {meant!r}?", said


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["demo", "--jsn"], "Error: No such option '--jsn'. Did you mean '--json'?"),
        (["handle", "x", "--count", "3"], "Error: No such option '--count'. "
         "(Did you mean one of: '--json', '--on', '--timeout'?)"),
        (["get", "x", "--n", "3"], "Error: No such option '--n'. Did you mean '--json'?"),
    ],
)  # fmt: skip
def test_other_unknown_options_keep_clicks_suggestion(args: list[str], said: str) -> None:
    """A typo, or a count word where the command takes no count, keeps click's words."""
    assert usage_error(*args) == said


@pytest.mark.parametrize(
    ("given", "module"),
    [
        ("./handlers.py", "handlers:on_timeout (the file handlers.py in the current directory)"),
        ("handlers.py", "handlers:on_timeout (the file handlers.py in the current directory)"),
        ("app/jobs.py", "app.jobs:on_timeout (the file app/jobs.py under the current directory)"),
        ("./app/jobs", "app.jobs:on_timeout (the file app/jobs.py under the current directory)"),
    ],
)
def test_a_file_given_as_a_handler_is_told_its_module_path(
    given: str, module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`handle ./handlers.py:on_timeout` said "cannot import module './handlers.py':
    ValueError: invalid format": a file's path given for the module is told the module
    path to give instead (before anything connects or starts)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "handlers.py").write_text("def on_timeout(outcome):\n    pass\n")
    said = usage_error("handle", f"{given}:on_timeout", "--idle-exit")
    assert said == (
        f"Error: Invalid value for '[SPEC]': \"{given}\" is a file, not a module: give a "
        f"module path, e.g. {module}"
    ), said


def test_a_file_outside_the_directory_is_told_where_to_run() -> None:
    """An absolute path: run `handle` where the file is, and give its module's name."""
    said = usage_error("handle", "/srv/app/handlers.py:on_timeout", "--idle-exit")
    assert said.endswith(
        '"/srv/app/handlers.py" is a file, not a module: run `tickwheel handle` in /srv/app '
        "and give its module path, handlers:on_timeout"
    ), said


@pytest.mark.parametrize(
    ("args", "env", "given"),
    [
        (["--redis-url", "redis://bob:s3cretpw@127.0.0.1:1/0", "server", "status"], {},
         "--redis-url"),
        (["server", "stop", "--redis-url", "redis://bob:s3cretpw@127.0.0.1:1/0"], {},
         "--redis-url"),
        (["server", "status", "--json"],
         {"TICKWHEEL_REDIS_URL": "redis://bob:s3cretpw@127.0.0.1:1/0"}, "TICKWHEEL_REDIS_URL"),
    ],
)  # fmt: skip
def test_server_commands_say_they_ignore_a_redis_url(
    args: list[str], env: dict[str, str], given: str, tmp_path: Path
) -> None:
    """`tickwheel --redis-url redis://bob:…@127.0.0.1:1/0 server status` reported the
    embedded server with no word that the URL was not the one it spoke of: a `server`
    command given a URL (option or environment) says on stderr, in one line, that it
    ignores it, the password redacted; its output is as without it."""
    home = {"TICKWHEEL_HOME": str(tmp_path / "home")}
    out = CliRunner().invoke(main, args, env={**home, **env})
    assert out.stderr.splitlines() == [
        f"Note: {given} redis://bob:***@127.0.0.1:1/0 is ignored: `tickwheel server` "
        "manages the embedded server only"
    ], out.stderr
    plain = [a for a in args if not a.startswith("redis://") and a != "--redis-url"]
    alone = CliRunner().invoke(main, plain, env={**home, "TICKWHEEL_REDIS_URL": ""})
    assert (out.exit_code, out.stdout) == (alone.exit_code, alone.stdout)
    assert alone.stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        ["--namespace", "foo", "server", "status"],
        ["server", "--namespace", "foo", "status"],
        ["server", "status", "--namespace", "foo"],
        ["server", "stop", "--namespace", "foo"],
        ["server", "status", "--json", "--namespace", "foo"],
    ],
)
def test_server_commands_say_they_ignore_a_namespace(args: list[str], tmp_path: Path) -> None:
    """`tickwheel server status --namespace foo` said nothing, where a --redis-url is
    said to be ignored: a --namespace given on the command line (before or after the
    subcommand's name) gets the same one-line note; the output is as without it."""
    home = {**NO_URL, "TICKWHEEL_HOME": str(tmp_path / "home")}
    out = CliRunner().invoke(main, args, env=home)
    assert out.stderr.splitlines() == [
        "Note: --namespace foo is ignored: `tickwheel server` manages the embedded server only"
    ], out.stderr
    alone = CliRunner().invoke(main, [a for a in args if a not in ("--namespace", "foo")], env=home)
    assert (out.exit_code, out.stdout) == (alone.exit_code, alone.stdout)


def test_server_commands_are_silent_about_tickwheel_namespace(tmp_path: Path) -> None:
    """TICKWHEEL_NAMESPACE is exported for the other commands (a guide's `export`): a
    `server` command run in that shell says nothing of it."""
    env = {**NO_URL, "TICKWHEEL_HOME": str(tmp_path / "home"), "TICKWHEEL_NAMESPACE": "foo"}
    out = CliRunner().invoke(main, ["server", "status"], env=env)
    assert out.exit_code == 5 and out.stderr == "", out.output


LOOKS_ONLY = [
    ["get", "job:{1}"],
    ["wait", "job:{1}"],
    ["stats"],
    ["timers", "list", "job:*"],
    ["schedules", "list"],
    ["dead", "list"],
    ["tail", "--idle-exit"],
    ["server", "status"],
    ["server", "stop"],
]


@pytest.mark.parametrize("args", LOOKS_ONLY, ids=" ".join)
def test_a_command_that_only_looks_for_a_server_makes_no_file(
    args: list[str], tmp_path: Path
) -> None:
    """`TICKWHEEL_HOME=/tmp/x/none tickwheel …` with no server there made the directory
    and its server.lock (`server stop` did): a command that finds no server to act on
    leaves the file system as it was."""
    home = tmp_path / "x" / "none"
    out = CliRunner().invoke(
        main, args, env={"TICKWHEEL_HOME": str(home), "TICKWHEEL_REDIS_URL": ""}
    )
    assert out.exit_code in (0, 5), out.output
    assert list(tmp_path.iterdir()) == [], out.output


@pytest.mark.parametrize(
    ("args", "example"),
    [
        (["--cron", "bad"], '(e.g. "0 8 * * MON-FRI")'),
        (["--cron", "0 8 * * *", "--tz", "Nowhere/X"], 'such as "Europe/Paris" or "UTC"'),
    ],
)
def test_an_example_in_an_error_is_quoted_as_json_quotes_it(
    args: list[str], example: str, tmp_path: Path
) -> None:
    """The example an error gives was in single quotes ('Europe/Paris') where the value it
    is about is in JSON's double quotes ("Nowhere/X"): one way of quoting."""
    env = {**NO_URL, "TICKWHEEL_HOME": str(tmp_path)}
    out = CliRunner().invoke(main, ["schedules", "preview", *args], env=env)
    assert out.exit_code == 3, out.output
    assert example in out.output, out.output
    assert "'" not in out.output, out.output


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (["probe", "127.0.0.1:1", "--timeout", "5000"],
         "Warning: --timeout 5000 is 5000 seconds (1h23m20s); write 5000s to say so, "
         "or 5s if you meant 5000 ms"),
        (["probe", "127.0.0.1:1", "--timeout", "1"], None),
        (["probe", "127.0.0.1:1", "--timeout", "5000ms"], None),
        (["worker", "--lease-ms", "50"], None),  # its name says milliseconds
        (["demo", "--lease", "50"],  # (refused: under 300 ms)
         "Warning: --lease-ms/--lease 50 is 50 milliseconds; write 50ms to say so, "
         "or 50s if you meant seconds"),  # a test's argv is not the command line's
        # refused as a unit left out (shorter than --in): one message, no warning too
        (["schedule", "x", "--in", "1s", "--max-total", "50"], None),
        (["worker", "--lease-ms", "250"], None),
        (["worker", "--lease-ms", "50ms"], None),
    ],
)  # fmt: skip
def test_a_bare_number_in_the_unit_less_likely_meant_is_taken_and_said_back(
    args: list[str], warned: str | None
) -> None:
    """A bare number is seconds for some options and milliseconds for others (`wait
    --timeout 5000` waited 83 minutes; `demo --lease 2000` is 2 s): taken as before (a
    script relying on it keeps working), and one far from the other unit's sense is
    said back with its unit, with the other reading's spelling."""
    out = CliRunner().invoke(main, args)
    warnings = [line for line in out.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == ([warned] if warned else []), out.output
    assert out.exit_code != 0  # nothing answers at port 1; a lease under 300 ms is refused


def test_worker_lease_as_a_bare_number_is_told_its_ms_sibling() -> None:
    """`worker --lease 2000` said only that 2000 is not a duration, while `demo --lease
    2000` takes it as milliseconds: it says where a number of milliseconds goes."""
    for option in ("--lease", "--horizon"):
        said = usage_error("worker", option, "2000")
        assert said.endswith(f"; or give {option}-ms 2000 for milliseconds"), said
    assert "-ms" not in usage_error("worker", "--lease", "2x")
    small = usage_error("worker", "--lease", "2")  # 2 ms is no lease anyone means
    assert small.endswith("; did you mean 2s? (--lease-ms takes milliseconds)"), small


def test_handle_fire_lease_as_a_bare_number_is_told_its_ms_sibling_as_workers_is() -> None:
    """`handle --fire --lease 2000` asked "did you mean 2000s?" (a 33-minute lease) where
    `worker --lease 2000` says where milliseconds go: it says so too, and takes
    --lease-ms, with --fire only, not with --lease."""
    said = usage_error("handle", "json:dumps", "--fire", "--lease", "2000")
    assert said.endswith("; or give --lease-ms 2000 for milliseconds"), said
    assert "2000s" not in said
    small = usage_error("handle", "json:dumps", "--fire", "--lease", "2")
    assert small.endswith("; did you mean 2s? (--lease-ms takes milliseconds)"), small
    alone = usage_error("handle", "json:dumps", "--lease-ms", "2000")
    assert alone.endswith("--lease-ms is the worker's: give it with --fire"), alone
    both = usage_error("handle", "json:dumps", "--fire", "--lease", "2s", "--lease-ms", "2000")
    assert both.endswith("give --lease or --lease-ms, not both"), both


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--fair-by", "tenant"],
         '--fair-by must be id, outcome, payload or payload.<field>[.<field>…] (letters, '
         'digits, _ and -), got "tenant"; did you mean payload.tenant?'),
        (["--limit", "payload.tenant=0"],
         '--limit "payload.tenant=0": the count after = must be between 1 and 10000, got 0'),
        (["--limit", "tenant=2"],
         '--limit "tenant=2": the KEY before = must be id, outcome, payload or '
         'payload.<field>[.<field>…] (letters, digits, _ and -), got "tenant"; did you mean '
         "payload.tenant?"),
        (["--rate", "payload.tenant=0/m"],
         '--rate "payload.tenant=0/m": the rate after = must be a number from 1e-05 (one a '
         "day) to 100000 a second, got 0.0"),
    ],
)  # fmt: skip
def test_handles_key_options_are_refused_in_their_own_words(args: list[str], said: str) -> None:
    """`handle --fair-by tenant` was told fair_by may be "a function of the outcome" (none
    can be given on the command line), `--limit payload.tenant=0` of "a limit's at_most":
    each names the flag and the part of its text that is wrong, as the CLI takes it."""
    out = CliRunner().invoke(main, ["handle", "json:dumps", *args], env=NO_URL)
    assert out.exit_code == 3, out.output
    assert out.stderr.strip() == f"Error: {said}", out.stderr


@pytest.mark.parametrize(
    ("args", "said", "help_of"),
    [
        (["get", "--json", "--bogus", "x"], "No such option '--bogus'.", "get"),
        (["--json", "get"], "Missing argument 'TIMER_ID'.", "get"),
        (["--json", "schedule", "x", "--in", "5q"], "Invalid value for '--in'", "schedule"),
        (["--json", "bogus"], "No such command 'bogus'.", ""),
        (["--bogus", "--json"], "No such option '--bogus'.", ""),
        (["heartbeat", "x", "--in", "5s", "--json"], "Did you mean '--extend'?", "heartbeat"),
        (["--json", "dead", "list", "--bogus"], "No such option '--bogus'.", "dead list"),
        (["--json", "redis://bob:s3cretpw@h:1", "get"], "redis://bob:***@h:1", ""),
    ],
)  # fmt: skip
def test_a_usage_error_under_json_is_one_json_object(
    args: list[str], said: str, help_of: str
) -> None:
    """Every error of a command asked for `--json` was one JSON object on stderr except a
    usage error, click's three lines of text a script could not parse: it is one object
    too (error, kind, exit_code, and the --help to run), exit 2, nothing on stdout, no
    password. Without --json the text is as it was; `-- --json` is an argument."""
    out = CliRunner().invoke(main, args, env=NO_URL)
    assert out.exit_code == 2 and out.stdout == "", out.output
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    error = json.loads(lines[0])
    assert error["kind"] == "UsageError" and error["exit_code"] == 2
    assert said in error["error"] and "s3cretpw" not in out.stderr
    assert error["help"].split()[1:-1] == help_of.split(), error["help"]
    text = CliRunner().invoke(main, [a for a in args if a != "--json"], env=NO_URL)
    assert text.exit_code == 2 and text.stderr.startswith("Usage: "), text.stderr
    argument = CliRunner().invoke(main, ["get", "--bogus", "--", "--json"], env=NO_URL)
    assert argument.exit_code == 2 and argument.stderr.startswith("Usage: ")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["schedule", "j", "--in", "5"],
         '"5" is not a duration (no unit: did you mean 5s?); write'),
        (["schedule", "j", "--in", "1.5"], "(no unit: did you mean 1.5s?)"),
        (["schedule", "j", "--in", "5min"], '"5min" is not a duration (did you mean 5m?)'),
        (["schedule", "j", "--in", "2 hours"], "(did you mean 2h?)"),
        (["schedule", "j", "--in", "5", "minutes"],
         '"5 minutes" is two words; write the duration as one, 5m'),
        (["reschedule", "j", "--in", "90", "sec"],
         '"90 sec" is two words; write the duration as one, 90s'),
        (["wait", "j", "--timeout", "10", "minutes"],
         "Got unexpected extra argument (minutes): write a duration as one word, 10m "
         "(not 10 minutes)"),
        (["timers", "cancel", "*", "--state", "expired"],
         "No such option '--state': timers cancel acts on pending timers only (an ended one "
         "cannot be cancelled): drop --state."),
    ],
)  # fmt: skip
def test_a_duration_without_its_unit_or_in_two_words_is_told_what_was_meant(
    args: list[str], said: str
) -> None:
    """`schedule --in 5` said only that 5 is not a duration, and `--in 5 minutes` blamed
    the 5 alone; `timers cancel --state` was asked whether it meant --page."""
    assert said in usage_error(*args)


def test_a_plain_mistake_gets_no_hint() -> None:
    assert usage_error("schedule", "j", "--in", "5q").endswith('"5q" is not a duration; write '
                                                                "numbers with units ms, s, m, h "
                                                                "or d, e.g. 500ms, 1.5s, 2m, 1h30m "
                                                                "or 10d")  # fmt: skip
    assert "'--json'" in usage_error("timers", "cancel", "*", "--jsn")  # click's own


def test_log_level_takes_warn_as_logging_does_in_any_case() -> None:
    for given in ("WARN", "warn", "Warning", "ERROR"):
        out = CliRunner().invoke(main, ["worker", "--log-level", given, "--lease", "2"])
        assert "--log-level" not in out.output, out.output  # refused for --lease, not it
    assert '"verbose" is not one of "debug",' in usage_error("worker", "--log-level", "verbose")


def test_version_answers_in_json_when_asked_before_or_after() -> None:
    for args in (["--json", "--version"], ["--version", "--json"]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0 and json.loads(out.stdout)["name"] == "tickwheel", out.output
        assert json.loads(out.stdout)["version"]
    out = CliRunner().invoke(main, ["--version"])
    assert out.exit_code == 0 and out.stdout.startswith("tickwheel, version ")
