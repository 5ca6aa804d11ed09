"""Any command line a user may type: a documented exit code, never a traceback, nothing
written when refused, never a secret printed (hypothesis)."""

from __future__ import annotations

import itertools
import json
import os
import re
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timer import TimerClient
from timer.acl import acl_rules
from timer.cli.main import main
from timer.testing import RedisServer, free_port

from ..integration.conftest import namespace_keys

pytestmark = pytest.mark.redis

FUZZ = settings(
    max_examples=int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The codes of the epilog of `tickwheel --help` a timer command line may end with (13: a
# reschedule or a heartbeat past a timer's --max-total-ms; 1, other errors, is a bug)
EXIT_CODES = {0, 2, 3, 4, 5, 6, 7, 8, 11, 13}

# What a person types: words, numbers of any size, durations, times, JSON and junk.
numbers = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.integers(0, 10**400).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "-0", "1.5", "0x10"]),
)
durations = st.one_of(
    numbers.map(lambda n: n + "s"),
    st.sampled_from(["30s", "500ms", "1h30m", "99999999999d", "1" * 400 + "s", "s", "1x"]),
)
instants = st.sampled_from([
    "2030-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01",
    "2030-13-01", "yesterday", "2030-01-01T00:00:00+25:00",
])  # fmt: skip
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
payloads = st.one_of(
    json_values.map(json.dumps),
    st.sampled_from(["[" * 2000 + "]" * 2000, "{", "'x'", "NaN", "1" * 500, '{"a": 1e999}']),
    st.text(max_size=12),
)
words = st.one_of(st.text(min_size=0, max_size=12), st.sampled_from(["job:{1}", "-", "--"]))
_ids = itertools.count()


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """One timer command with its arguments: each right, or anything a person might type."""
    tid = draw(st.one_of(st.builds(lambda: f"cli:{next(_ids)}"), words))
    commands = ["schedule", "schedule", "reschedule", "heartbeat", "cancel", "complete",
                "get", "wait", "notify", "trim"]  # fmt: skip
    command = draw(st.sampled_from(commands))
    args = [command] if command == "trim" else [command, tid]
    if command in ("schedule", "reschedule"):
        when = draw(st.sampled_from(["--in", "--at", "both", "none"]))
        if when in ("--in", "both"):
            args += ["--in", draw(durations)]
        if when in ("--at", "both"):
            args += ["--at", draw(instants)]
    if command == "schedule" and draw(st.booleans()):
        args += ["--payload", draw(payloads)]
    if command == "schedule" and draw(st.integers(0, 3)) == 0:
        args += ["--watch", draw(words)]
    if command == "heartbeat" and draw(st.integers(0, 4)) > 0:
        args += ["--extend", draw(durations)]
    if command == "schedule" and draw(st.integers(0, 4)) == 0:
        args += ["--max-total-ms", draw(numbers)]
    if command == "wait":
        args += ["--timeout", draw(st.one_of(numbers, st.just("0.01")))]
    if command == "trim":
        args += [draw(st.sampled_from(["--older-than", "--shard", "--bogus"])), draw(numbers)]
    return args


def run(url: str, namespace: str, args: list[str]) -> Result:
    return CliRunner().invoke(main, ["--redis-url", url, "--namespace", namespace, "--json", *args])


def cut_wait(args: list[str]) -> list[str]:
    """A wait the fuzzer made long is cut to 10 ms: the test is of the input's checks."""
    if args[0] == "wait":
        t = args[-1]
        try:
            if 0.01 < float(t) <= 1e9:
                return [*args[:-1], "0.01"]
        except ValueError:
            pass
    return args


@FUZZ
@given(args=command_lines())
def test_any_command_line(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, args: list[str]
) -> None:
    """Any timer command line exits with a documented code and no traceback; a refused
    one writes nothing; an accepted payload is read back by `get`."""
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
    args = cut_wait(args)
    before = namespace_keys(redis_client, namespace)
    result = run(redis_server.url, namespace, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert result.exit_code in EXIT_CODES, (args, result.output)
    assert "Traceback" not in result.output
    # refused: nothing written (a wait writes nothing anyway; a heartbeat past its cap
    # moves the timer to its cap, as its exit code says)
    if (
        result.exit_code != 0
        and args[0] != "wait"
        and (args[0], result.exit_code)
        != (
            "heartbeat",
            13,
        )
    ):
        assert namespace_keys(redis_client, namespace) == before, (args, result.output)
    if args[0] == "schedule" and result.exit_code == 0 and json.loads(result.stdout)["created"]:
        got = json.loads(run(redis_server.url, namespace, ["get", args[1]]).stdout)
        sent = args[args.index("--payload") + 1] if "--payload" in args else "null"
        assert json.dumps(got["payload"]) == json.dumps(json.loads(sent))


def test_the_exit_codes_allowed_are_the_ones_help_documents() -> None:
    """Each code the fuzz allows is in `tickwheel --help`'s epilog, with its meaning."""
    text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    said = text[text.index("Exit codes:") :]
    for code in EXIT_CODES:
        assert re.search(rf"[:,] {code} [A-Za-z]", said), (code, said)


def test_a_reschedule_past_the_cap_exits_13_and_moves_nothing(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """What a fuzz run found (its exit code was missing from the fuzz's list): a
    reschedule past --max-total-ms is refused with 13, and nothing moves."""
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
        c.schedule("-", 60_000, max_total_ms=120_000)
    before = namespace_keys(redis_client, namespace)
    result = run(redis_server.url, namespace, ["reschedule", "-", "--at", "2030-01-01T00:00:00Z"])
    assert result.exit_code == 13, result.output
    assert json.loads(result.stderr)["kind"] == "Capped"
    assert namespace_keys(redis_client, namespace) == before


SECRET = "S3CRETpw"


@st.composite
def secret_urls(draw: st.DrawFn) -> str:
    """A Redis URL with the secret in any place a credential goes, often broken."""
    port = draw(st.sampled_from([str(free_port()), "notaport", "99999", "", "0"]))
    host = draw(st.sampled_from(["127.0.0.1", "[::1", "", "127.0.0.1]"]))
    auth = draw(st.sampled_from([f"u:{SECRET}@", f"{SECRET}@", f":{SECRET}@", ""]))
    query = draw(st.sampled_from([
        f"?password={SECRET}", f"?username=u&password={SECRET}", f"?ssl_password={SECRET}",
        f"?bogus=1&password={SECRET}", f"?password={SECRET}&socket_timeout=x", "",
        f"?sentinel_password={SECRET}",
    ]))  # fmt: skip
    scheme = draw(st.sampled_from(["redis", "rediss", "unix", "http", "redis", "redis+sentinel"]))
    tail = draw(st.sampled_from(["/0", "/x", "", "/0#frag"]))
    netloc = f"{host}:{port}" if port else host
    url = f"{scheme}://{auth}{netloc}{tail}{query}"
    return url if SECRET in url else url + f"?password={SECRET}"


@FUZZ
@given(url=secret_urls(), command=st.sampled_from([["get", "x"], ["stats"], ["init"]]))
def test_no_url_prints_its_secret(workdir: Any, url: str, command: list[str]) -> None:
    """Whatever the URL, the CLI exits with a documented code and never prints the
    password, in text or JSON."""
    for json_flag in ([], ["--json"]):
        result = CliRunner().invoke(main, ["--redis-url", url, *json_flag, *command])
        assert result.exit_code in EXIT_CODES, (url, result.output, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert SECRET not in result.output, (url, result.output)


@FUZZ
@given(
    role=st.one_of(st.sampled_from(["client", "worker", "handlers", "operator"]), words),
    user=st.one_of(st.none(), words, st.just("x on >pw +@all"), st.just("ok_user-1.x")),
    namespace=st.one_of(st.just("jobs"), words),
)
def test_acl_any_role_user_and_namespace(role: str, user: str | None, namespace: str) -> None:
    """`tickwheel acl` of anything: the rules (exit 0), or a usage or input error, never
    a traceback; it needs no server and starts none. A line printed reads, split as
    redis-cli splits it, as the user's name as one word and the role's rules only: a
    name cannot add rules (trial 32: `--user 'x on >pw +@all'` did)."""
    args = ["--namespace", namespace, "acl", role, *(["--user", user] if user is not None else [])]
    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in {0, 2, 3}, (args, result.output)
    if result.exit_code == 0:
        assert (
            result.output.startswith("ACL SETUSER ") and f"~{{tw:{namespace}}}:*" in result.output
        )
        words_of = result.output.split()
        assert words_of[2] == (f"tw-{role}" if user is None else user), result.output
        assert words_of[3:5] == ["on", ">PASSWORD"] and words_of[5:] == acl_rules(role, namespace)


@st.composite
def schedule_lines(draw: st.DrawFn) -> list[str]:
    """A `tickwheel schedules` command line: each part right, or anything typed."""
    name = draw(st.one_of(st.builds(lambda: f"s{next(_ids)}"), st.just("s-known"), words))
    command = draw(st.sampled_from(["create", "create", "update", "backfill", "trigger",
                                    "pause", "resume", "delete", "get"]))  # fmt: skip
    args = ["schedules", command, name]
    if command in ("create", "update"):
        if draw(st.booleans()):
            args += ["--every", draw(st.one_of(durations, st.just("1s")))]
        if draw(st.booleans()):
            args += ["--cron", draw(st.one_of(words, st.just("0 8 * * *")))]
        for option, good in (("--tz", "Europe/Paris"), ("--jitter", "1s"),
                             ("--missed", "all"), ("--overlap", "skip"), ("--group", "g"),
                             ("--start", "2030-01-01T00:00:00Z")):  # fmt: skip
            if draw(st.integers(0, 4)) == 0:
                args += [option, draw(st.one_of(st.just(good), words, numbers, instants))]
        if draw(st.booleans()):
            args += ["--payload", draw(payloads)]
    if command == "backfill":
        args += ["--from", draw(instants), "--to", draw(instants)]
    if command == "delete":
        args.append("--yes")
    return args


@FUZZ
@given(args=schedule_lines())
def test_any_schedules_command_line(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, args: list[str]
) -> None:
    """Any `tickwheel schedules` line exits with a documented code and no traceback; a
    refused one writes nothing."""
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
        if c.schedules.get("s-known") is None:
            c.schedules.create("s-known", every="1h")
    before = namespace_keys(redis_client, namespace)
    result = run(redis_server.url, namespace, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert result.exit_code in EXIT_CODES | {1}, (args, result.output)
    assert "Traceback" not in result.output
    if result.exit_code not in (0, 1):
        assert namespace_keys(redis_client, namespace) == before, (args, result.output)


@st.composite
def timers_lines(draw: st.DrawFn) -> list[str]:
    """A `tickwheel timers` command line: each part right, or anything typed."""
    command = draw(st.sampled_from(["list", "count", "cancel", "complete", "notify", "reschedule"]))
    args = ["timers", command, draw(st.one_of(st.sampled_from(["f:*", "*", "f:[1-3]"]), words))]
    for option, good in (("--state", "decided"), ("--from", "2030-01-01T00:00:00Z"),
                         ("--to", "2031-01-01T00:00:00Z"), ("--page", "10"),
                         ("--limit", "5")):  # fmt: skip
        takes = command in ("list", "count") or option not in ("--state", "--limit")
        if takes and draw(st.integers(0, 3)) == 0:
            args += [option, draw(st.one_of(st.just(good), words, numbers, instants))]
    if command == "reschedule":
        option = draw(st.sampled_from(["--in", "--by", "--at", "none"]))
        if option != "none":
            args += [option, draw(st.one_of(durations, instants))]
    if command not in ("list", "count"):
        args.append(draw(st.sampled_from(["--yes", "--dry-run"])))
    return args


@FUZZ
@given(args=timers_lines())
def test_any_timers_command_line(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, args: list[str]
) -> None:
    """Any `tickwheel timers` line exits with a documented code and no traceback; a
    refused one, a dry run and a listing write nothing."""
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
        c.schedule_many([{"id": f"f:{i}", "delay_ms": 3_600_000} for i in range(5)])
    before = namespace_keys(redis_client, namespace)
    result = run(redis_server.url, namespace, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert result.exit_code in EXIT_CODES, (args, result.output)
    assert "Traceback" not in result.output
    if result.exit_code != 0 or args[1] in ("list", "count") or "--dry-run" in args:
        assert namespace_keys(redis_client, namespace) == before, (args, result.output)


@FUZZ
@given(lease=st.one_of(durations, words), fire=st.booleans())
def test_handle_fire_options_any_lease(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, lease: str, fire: bool
) -> None:
    """`handle --lease` (#55) with any text, with or without --fire (and --idle-exit,
    which --fire refuses): a usage error that says what to do, no traceback, nothing
    written."""
    with TimerClient.from_url(redis_server.url, namespace) as c:
        c.init(shards=2)
    before = namespace_keys(redis_client, namespace)
    args = ["handle", "json:dumps", "--lease", lease, "--idle-exit", *(["--fire"] if fire else [])]
    result = run(redis_server.url, namespace, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, (args, result.output)
    assert namespace_keys(redis_client, namespace) == before
