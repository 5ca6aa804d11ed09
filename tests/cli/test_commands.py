"""Every CLI command through click's CliRunner against the real test server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import click
import pytest
import redis
from click.testing import CliRunner

from timer.cli.durations import INSTANT, format_ms
from timer.cli.main import main
from timer.cli.output import against_deadline, age_text
from timer.durable.model.codec import FORMAT_VERSION
from timer.durable.model.durations import format_duration_ms
from timer.testing import RedisServer, free_port

from .conftest import Run, as_json
from .stub_http import answering

COMMANDS = [
    [], ["server"], ["server", "start"], ["server", "stop"], ["server", "status"], ["init"],
    ["worker"], ["schedule"], ["cancel"], ["reschedule"], ["heartbeat"], ["notify"],
    ["complete"], ["get"], ["wait"], ["tail"], ["trim"], ["stats"], ["shards"], ["probe"],
    ["demo"], ["bench"],
    ["handle"], ["groups"], ["groups", "delete"], ["groups", "pause"], ["groups", "resume"],
    ["dead"], ["dead", "list"], ["dead", "show"],
    ["dashboard"],
    ["dead", "redeliver"], ["dead", "drop"], ["acl"], ["timers"], ["timers", "list"],
    ["timers", "count"], ["timers", "cancel"], ["timers", "complete"], ["timers", "notify"],
    ["timers", "reschedule"], ["serve"], ["tokens"], ["tokens", "create"], ["tokens", "list"],
    ["tokens", "revoke"],
]  # fmt: skip


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "tickwheel")
def test_help(path: list[str]) -> None:
    """Every command explains itself with --help and exits 0."""
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="tickwheel")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: tickwheel {' '.join(path)}".rstrip())
    description = result.output.split("Options:")[0].splitlines()[2:]
    assert sum(1 for line in description if line.strip()) >= 2, "explain the command"


def test_the_redis_url_help_says_what_a_sentinel_url_reaches() -> None:
    """The top-level --redis-url help read "…/<service>[/db] for the master Sentinels
    name" (garbled): it says the URL reaches the master of <service> through them."""
    helped = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert (
        "redis+sentinel://host:port[,host:port…]/<service>[/db] for the master of "
        "<service>, asked of the Sentinels at those addresses" in helped
    ), helped
    assert "master Sentinels name" not in helped


def _every_command(cmd: click.Command, path: list[str]) -> Iterator[list[str]]:
    yield path
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _every_command(sub, [*path, name])


def test_every_help_has_no_blank_space_lines_and_its_examples_line_up() -> None:
    """No line of any command's --help is whitespace only, and an Examples block reads as
    every command's does: "Example(s):" at the text's indent, each command line under it
    two further in (not 8 spaces in, as a docstring with text appended after it was)."""
    found = []
    for path in _every_command(main, []):
        result = CliRunner().invoke(main, [*path, "--help"], prog_name="tickwheel")
        lines = result.output.splitlines()
        found += [(path, i) for i, line in enumerate(lines) if line and not line.strip()]
        for i, line in enumerate(lines):
            if line.lstrip().startswith(("Example:", "Examples:")):
                assert line.startswith("  Example"), (path, line)
                if line.rstrip().endswith(":"):  # the examples on the lines below it
                    assert lines[i + 1].startswith("    tickwheel "), (path, lines[i + 1])
    assert found == [], "whitespace-only lines in --help"


def test_every_option_says_its_default_and_range_in_one_bracket() -> None:
    """`handle --help` read `[default: 5]  [1<=x<=1000]` (a default written in the help,
    the range click adds) where others read `[default: 8; 1<=x<=10000]`; and it gave
    `--group`'s and `--max-attempts`' defaults as if a Handlers object did not set its
    own (trial 19: the Celery sender ran as group celery, 1000 attempts)."""
    two = []
    for path in _every_command(main, []):
        shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=400).output
        two += [(path, line.strip()) for line in shown.splitlines() if "]  [" in line]
    assert two == []
    shown = CliRunner().invoke(main, ["handle", "--help"], terminal_width=400).output
    rows = {line.split()[0]: line for line in shown.splitlines() if line.startswith("  --")}
    assert rows["--max-attempts"].endswith(
        "[default: 5, or the Handlers object's own; 1<=x<=1000]"
    ), rows["--max-attempts"]
    for option in ("--group", "--backoff", "--max-backoff", "--reclaim-idle", "--timeout"):
        assert rows[option].endswith("or the Handlers object's own]"), rows[option]


def test_heartbeat_extends_within_the_cap(tw: Run) -> None:
    """`tickwheel heartbeat` pushes a deadline later; past `--max-total-ms` it exits 13
    (the timer falls due at its cap); an ended timer is left as it is."""
    tw("init", "--shards", "2")
    t = as_json(tw("--json", "schedule", "job:{4}", "--in", "1m", "--max-total-ms", "120000"))
    beat = as_json(tw("--json", "heartbeat", "job:{4}", "--extend", "90s"))
    assert beat["extended"] is True and beat["deadline_ms"] > t["deadline_ms"]
    capped = tw("--json", "heartbeat", "job:{4}", "--extend", "5m", expect=13)
    assert json.loads(capped.stderr)["kind"] == "HeartbeatCapped", capped.output
    info = as_json(tw("--json", "get", "job:{4}"))
    assert info["max_total_ms"] == 120000 and info["deadline_ms"] == info["created_ms"] + 120000
    # the cap as a time, not epoch ms ("at its cap, 1796302114856 (epoch ms)": trial)
    cap = info["deadline_ms"]
    beat_said = tw("heartbeat", "job:{4}", "--extend", "5m", expect=13).stderr
    assert f"it falls due at its cap, {format_ms(cap)}, and no" in beat_said, beat_said
    # the cap named as it was given, --max-total, not the library's max_total_ms
    assert "would pass its cap (created + --max-total): refused" in beat_said, beat_said
    move_said = tw("reschedule", "job:{4}", "--in", "10m", expect=13).stderr
    assert f"after its cap, {format_ms(cap)} (created + --max-total)," in move_said, move_said
    assert "max_total_ms" not in beat_said + move_said
    assert str(cap) not in beat_said + move_said
    assert as_json(tw("--json", "cancel", "job:{4}"))["cancelled"] is True
    ended = as_json(tw("--json", "heartbeat", "job:{4}", "--extend", "1s"))
    assert ended["extended"] is False and ended["state"] == "cancelled"


def test_a_time_in_a_refusal_or_a_question_is_written_as_a_time(tw: Run) -> None:
    """`trim --drop-unread` asked "older than 3600000 ms", `schedule --at` a time before
    1970 or past ten years ahead was refused naming it in epoch ms (-315619200000,
    4070908800000): each says a duration or a UTC time now, as it was typed."""
    tw("init", "--shards", "2")
    asked = tw("trim", "--older-than", "1h", "--drop-unread", expect=2).stderr
    assert "Drop outcomes older than 1h even where a consumer group" in asked, asked
    early = tw("schedule", "x:{1}", "--at", "1960-01-01T00:00:00Z", expect=3).stderr
    assert early.strip() == (
        "Error: --at must be 1970-01-01T00:00:00.000Z (epoch ms 0) or later, "
        "got 1960-01-01T00:00:00.000Z"
    )
    far = tw("schedule", "x:{1}", "--at", "2099-01-01T00:00:00Z", expect=3).stderr
    assert "Error: deadline 2099-01-01T00:00:00.000Z is more than" in far, far
    assert "4070908800000" not in far
    listed = tw("timers", "list", "x:*", "--from", "1960-01-01T00:00:00Z", expect=3).stderr
    assert "--from must be 1970-01-01T00:00:00.000Z (epoch ms 0) or later" in listed, listed


def test_a_heartbeat_that_moves_nothing_says_so_in_json(tw: Run) -> None:
    """A heartbeat on a timer due later than --extend from now said "stays due" in text
    but ``"extended": true`` in --json, as if it had moved (trial 17). ``extended`` keeps
    its meaning (taken: the timer is pending; false: it ended, stop the job); ``moved``
    says whether the deadline moved, as the text does."""
    tw("init", "--shards", "2")
    t = as_json(tw("--json", "schedule", "hb:{1}", "--in", "1h"))
    stayed = as_json(tw("--json", "heartbeat", "hb:{1}", "--extend", "1s"))
    assert (stayed["extended"], stayed["moved"]) == (True, False), stayed
    assert stayed["deadline_ms"] == t["deadline_ms"]
    assert "stays due" in tw("heartbeat", "hb:{1}", "--extend", "1s").output
    moved = as_json(tw("--json", "heartbeat", "hb:{1}", "--extend", "2h"))
    assert (moved["extended"], moved["moved"]) == (True, True), moved
    assert moved["deadline_ms"] > t["deadline_ms"]
    sooner = as_json(tw("--json", "heartbeat", "hb:{1}", "--extend", "1m", "--earlier"))
    assert sooner["moved"] is True and sooner["deadline_ms"] < t["deadline_ms"], sooner
    assert "now falls due" in tw("heartbeat", "hb:{1}", "--extend", "3h").output
    tw("cancel", "hb:{1}")
    ended = as_json(tw("--json", "heartbeat", "hb:{1}", "--extend", "1s"))
    assert (ended["extended"], ended["moved"], ended["state"]) == (False, False, "cancelled")


def test_timer_lifecycle_json(tw: Run) -> None:
    """init, schedule, get, notify, cancel, complete, reschedule, wait, stats, shards."""
    assert as_json(tw("--json", "init", "--shards", "4"))["shards"] == 4
    t = as_json(tw("--json", "schedule", "job:{1}", "--in", "30s", "--watch", "job:{1}:done",
                   "--payload", '{"job": 1}'))  # fmt: skip
    assert t["created"] is True and t["state"] == "pending"
    again = as_json(tw("--json", "schedule", "job:{1}", "--in", "30s", "--watch", "job:{1}:done",
                       "--payload", '{"job": 1}'))  # fmt: skip
    assert again["created"] is False
    info = as_json(tw("--json", "get", "job:{1}"))
    assert info["state"] == "pending" and info["payload"] == {"job": 1}
    assert as_json(tw("--json", "notify", "job:{1}:done"))["completed"] == 1
    out = as_json(tw("--json", "wait", "job:{1}", "--timeout", "5"))
    assert out["outcome"] == "completed" and out["payload"] == {"job": 1}

    tw("schedule", "job:{2}", "--in", "1h")
    moved = as_json(tw("--json", "reschedule", "job:{2}", "--in", "2h"))
    assert moved["rescheduled"] is True and moved["deadline_ms"] > t["deadline_ms"]
    beat = as_json(tw("--json", "heartbeat", "job:{2}", "--extend", "3h"))
    assert beat["extended"] is True and beat["deadline_ms"] > moved["deadline_ms"]
    assert as_json(tw("--json", "cancel", "job:{2}"))["cancelled"] is True
    assert as_json(tw("--json", "cancel", "job:{2}"))["cancelled"] is False
    tw("schedule", "job:{3}", "--at", "2030-01-01T00:00:00Z")
    assert as_json(tw("--json", "complete", "job:{3}"))["completed"] is True

    st = as_json(tw("--json", "stats"))
    assert st["pending"] == 0 and st["outcomes"] == 3 and len(st["per_shard"]) == 4
    assert "bytes_per_decided_timer" not in st  # only with --memory
    assert st["data_format"] == FORMAT_VERSION
    held = as_json(tw("--json", "stats", "--memory"))
    # three outcomes are too few to say bytes each (an empty stream costs kilobytes)
    assert held["bytes_per_pending_timer"] is None and held["bytes_per_decided_timer"] is None
    assert held["retained_outcomes"] == 3  # job:{1}, {2} and {3}, in the results tables
    assert len(as_json(tw("--json", "shards"))) == 4
    human = tw("shards").output
    assert human.splitlines()[0].split() == ["shard", "leader", "epoch", "pending", "outcomes",
                                             "lag_ms"]  # fmt: skip
    assert tw("--json", "tail", "--idle-exit").output == ""  # only new ones: none came
    lines = tw("--json", "tail", "--idle-exit", "--history").output.strip().splitlines()
    assert sorted(line.split('"outcome": "')[1].split('"')[0] for line in lines) == [
        "cancelled",
        "completed",
        "completed",
    ]
    # tail left no consumer group behind: a trim of everything older than 0s drops them
    asked = tw("trim", "--older-than", "0s", "--drop-unread", expect=2)  # asks; no answer
    assert "even where a consumer group has not handled them" in asked.output
    trimmed = as_json(tw("--json", "trim", "--older-than", "0s"))
    assert trimmed == {
        "removed": 3,
        "held_by_group": [],
        "shards": 4,
        "results_dropped": 0,
        "held_by": [],
    }
    assert as_json(tw("--json", "stats"))["outcomes"] == 0


def test_human_output(tw: Run) -> None:
    """Without --json the output is sentences and aligned tables."""
    tw("init", "--shards", "2")
    assert "Scheduled: a on shard" in tw("schedule", "a", "--in", "10m").output
    assert "Already pending" in tw("schedule", "a", "--in", "10m").output
    table = tw("get", "a").output.splitlines()
    assert table[0].split() == ["field", "value"] and table[1].startswith("-----")
    assert "Cancelled a" in tw("cancel", "a").output


def test_get_shows_a_payload_as_json_so_none_and_a_dash_read_apart(tw: Run) -> None:
    """`get` showed no payload and the string "-" both as `-`: the payload is shown as
    JSON (`null`, `"-"`), its text unescaped for people; --json is unchanged."""
    tw("init", "--shards", "2")
    given = {"none": None, "dash": '"-"', "obj": '{"who": "Zoë"}', "num": "7"}
    for tid, payload in given.items():
        tw("schedule", tid, "--in", "10m", *(["--payload", payload] if payload else []))
    shown = {
        tid: dict(line.split(None, 1) for line in tw("get", tid).output.splitlines()[2:])
        for tid in given
    }
    payloads = {tid: rows["payload"].strip() for tid, rows in shown.items()}
    assert payloads == {"none": "null", "dash": '"-"', "obj": '{"who": "Zoë"}', "num": "7"}
    assert shown["none"]["note"].strip() == "-"  # other unset fields read as before
    assert as_json(tw("--json", "get", "obj"))["payload"] == {"who": "Zoë"}


def test_get_shows_every_instant_with_its_time(tw: Run) -> None:
    """`get` showed deadline_ms with its ISO time but created_ms and decided_ms as epoch
    ms only: every instant reads as the deadline does; --json keeps the numbers."""
    tw("init", "--shards", "2")
    tw("schedule", "a", "--in", "10m")
    tw("cancel", "a")
    rows = dict(line.split(None, 1) for line in tw("get", "a").output.splitlines()[2:])
    got = as_json(tw("--json", "get", "a"))
    for field in ("deadline_ms", "created_ms", "decided_ms"):
        assert rows[field].strip() == f"{got[field]} ({format_ms(got[field])})", field
    assert isinstance(got["created_ms"], int) and isinstance(got["decided_ms"], int)
    tw("schedule", "b", "--in", "10m")
    pending = dict(line.split(None, 1) for line in tw("get", "b").output.splitlines()[2:])
    assert pending["decided_ms"].strip() == "-"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["schedule", "x", "--in", "5q"], 2, "not a duration"),
        (["trim"], 2, "Missing option '--older-than'"),
        (["trim", "--older-than", "a week"], 2, "not a duration"),
        (["schedule", "x"], 2, "exactly one of --in"),
        (["schedule", "x", "--at", "yesterday"], 2, "ISO-8601"),
        (["schedule", "x", "--in", "1s", "--payload", "{bad"], 2, "not valid JSON"),
        (["schedule", "", "--in", "1s"], 3, "must not be empty"),
        (["schedule", "j:{1}", "--in", "1s", "--watch", "j:{2}:k"], 3, "same hash tag"),
        (["cancel", "missing"], 6, "no timer"),
        (["get", "missing"], 6, "no timer"),
        (["wait", "missing", "--timeout", "0.1"], 6, "no timer"),
    ],
)
def test_errors_have_distinct_codes(tw: Run, args: list[str], code: int, message: str) -> None:
    """Each error is one line with a distinct exit code; usage errors exit 2."""
    tw("init", "--shards", "16")
    result = tw(*args, expect=code)
    assert message in result.output
    assert "Traceback" not in result.output


def test_json_errors_are_json_on_stderr(tw: Run) -> None:
    """With --json an error is one JSON object on stderr, with the same exit code."""
    tw("init", "--shards", "2")
    cases = [
        (["get", "missing"], 6, "TimerNotFound", 'no timer "missing"'),
        (["schedule", "", "--in", "1s"], 3, "InvalidInput", "must not be empty"),
    ]
    for args, code, kind, message in cases:
        result = tw("--json", *args, expect=code)
        assert result.stdout == ""
        error = json.loads(result.stderr)
        assert (error["exit_code"], error["kind"]) == (code, kind)
        assert message in error["error"]


def test_conflict_and_wait_timeout_codes(tw: Run) -> None:
    """A conflicting schedule exits 7; a wait that times out exits 8."""
    tw("init", "--shards", "2")
    tw("schedule", "c", "--in", "1h", "--payload", "1")
    assert (
        "other parameters" in tw("schedule", "c", "--in", "1h", "--payload", "2", expect=7).output
    )
    assert "still pending" in tw("wait", "c", "--timeout", "0.1", expect=8).output


def test_a_conflicting_schedule_names_what_differs_and_what_to_type(tw: Run) -> None:
    """Another payload or another --at: the error names the field and the command that
    changes it (reschedule for a deadline, cancel then schedule for the rest), exit 7."""
    tw("init", "--shards", "2")
    tw("schedule", "dup:{1}", "--in", "1h", "--payload", '{"a":1}')
    payload = tw("schedule", "dup:{1}", "--in", "1h", "--payload", '{"a":2}', expect=7).output
    assert 'timer "dup:{1}" is pending with other parameters: its payload differs' in payload
    assert "tickwheel cancel 'dup:{1}', then schedule it again" in payload
    assert "add --debounce" in payload and "reschedule" not in payload
    at = "2030-01-01T00:00:00Z"
    deadline = tw("schedule", "dup:{1}", "--at", at, "--payload", '{"a":1}', expect=7).output
    assert "its deadline differs" in deadline
    assert "To move it: tickwheel reschedule 'dup:{1}' --at 2030-01-01T00:00:00.000Z" in deadline
    assert "cancel" not in deadline
    error = json.loads(
        tw("--json", "schedule", "dup:{1}", "--at", at, "--watch", "k:{1}", expect=7).stderr
    )
    assert (
        error["kind"] == "DuplicateTimer"
        and "its payload, deadline and watch differ" in (error["error"])
    )


def test_migrate_asks_then_moves_the_format(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """A new namespace is at the newest format; an old one moves once asked, one way."""
    assert as_json(tw("--json", "init", "--shards", "2"))["format"] == FORMAT_VERSION
    assert "already uses format" in tw("migrate").output
    r = redis.Redis.from_url(redis_server.url)
    r.hset(f"{{tw:{namespace}}}:meta", "version", 4)  # what the previous release made
    refused = CliRunner().invoke(
        main, ["--redis-url", redis_server.url, "--namespace", namespace, "migrate"], input="n\n"
    )
    assert refused.exit_code == 1 and "workers must be stopped" in refused.output
    assert r.hget(f"{{tw:{namespace}}}:meta", "version") == b"4"
    moved = as_json(tw("--json", "migrate", "--yes"))
    assert moved == {"namespace": namespace, "before": 4, "after": FORMAT_VERSION}
    assert r.hget(f"{{tw:{namespace}}}:meta", "version") == str(FORMAT_VERSION).encode()
    r.close()


def test_uninitialised_namespace(tw: Run) -> None:
    """Using a namespace nobody initialised exits 4 and says how to fix it."""
    result = tw("schedule", "a", "--in", "1s", expect=4)
    assert "`tickwheel --namespace t" in result.output and " init` once (16 shards" in result.output


def test_unreachable_redis_hides_password(workdir: object) -> None:
    """An unreachable server exits 5, names host:port and never prints the password."""
    url = f"redis://me:hunter2@127.0.0.1:{free_port()}/0"
    result = CliRunner().invoke(main, ["--redis-url", url, "stats"])
    assert result.exit_code == 5, result.output
    assert "cannot reach Redis at redis://me:***@127.0.0.1" in result.output
    assert "hunter2" not in result.output


def test_env_vars_configure_url_and_namespace(tw: Run, redis_server: object, namespace: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """TICKWHEEL_REDIS_URL and TICKWHEEL_NAMESPACE stand in for the global options."""
    monkeypatch.setenv("TICKWHEEL_REDIS_URL", redis_server.url)  # type: ignore[attr-defined]
    monkeypatch.setenv("TICKWHEEL_NAMESPACE", namespace)
    assert as_json(tw("--json", "init", "--shards", "3", base=False))["namespace"] == namespace


def test_probe_without_a_worker_says_so(workdir: object) -> None:
    """`tickwheel probe` with no worker listening exits 1 and says where it looked, and
    why in words (it printed Python's `<urlopen error [Errno 111] Connection refused>`)."""
    port = str(free_port())
    result = CliRunner().invoke(main, ["probe", "--port", port, "--timeout", "1"])
    assert result.exit_code == 1
    said = f"no worker answers at http://127.0.0.1:{port}/ready: connection refused"
    assert said in result.output and "urlopen" not in result.output and "Errno" not in result.output


@pytest.fixture
def ready_worker() -> Iterator[int]:
    """A port where a worker's /ready answers 200 (a stand-in HTTP server)."""

    def ready(path: str) -> tuple[int, bytes, str]:
        body = json.dumps({"path": path}).encode()
        return (200 if path == "/ready" else 404), body, "application/json"

    with answering(ready) as port:
        yield port


def test_probe_takes_host_port_as_its_help_reads(workdir: object, ready_worker: int) -> None:
    """`tickwheel probe HOST:PORT` (and :PORT, PORT, [::1]:PORT) asks that address, as
    --host/--port do; before, HOST:PORT was "unexpected extra argument"."""
    port = ready_worker
    for args in (
        [f"127.0.0.1:{port}"],
        [f"localhost:{port}"],
        [f":{port}"],
        [str(port)],
        ["--host", "127.0.0.1", "--port", str(port)],
    ):
        result = CliRunner().invoke(main, ["--json", "probe", *args, "--timeout", "5"])
        assert result.exit_code == 0, (args, result.output)
        assert json.loads(result.output)["path"] == "/ready", args
    free = free_port()
    result = CliRunner().invoke(main, ["probe", f"localhost:{free}", "--timeout", "1"])
    assert result.exit_code == 1, result.output
    assert f"no worker answers at http://localhost:{free}/ready" in result.output
    result = CliRunner().invoke(main, ["probe", f"[::1]:{free}", "--timeout", "1"])
    assert f"no worker answers at http://[::1]:{free}/ready" in result.output


@pytest.mark.parametrize(
    "url",
    [
        "redis://bob:a/b#c@d@127.0.0.1:6390/0",  # trial 9's: "the port must be a number"
        "redis://bob:p?w@127.0.0.1:6390/0",
        "redis://:se/cret@127.0.0.1:6390/0",
        "rediss://bob:pa#ss@127.0.0.1:6390/0",
    ],
)
def test_a_password_holding_a_reserved_character_is_said_to_need_encoding(
    workdir: object, url: str
) -> None:
    """A / ? # or @ in a URL's password ends its host part early: the parse read a piece
    of the password as the port and the refusal said the port was wrong, of a URL
    whose port is fine. It says to percent-encode, exit 4, without the password."""
    result = CliRunner().invoke(main, ["--redis-url", url, "stats"])
    assert result.exit_code == 4, result.output
    # each character it holds is named, with its code (an @ alone parses, so it is only
    # said to be safest encoded: trial 11 read "must" of a URL with one that worked)
    codes = {"/": "%2F", "?": "%3F", "#": "%23"}
    held = [c for c in codes if c in url.split("://", 1)[1].rpartition("@")[0]]
    assert f"holds {' '.join(held)}, which must be percent-encoded there" in result.output
    assert f"({' '.join(codes[c] for c in held)})" in result.output, result.output
    assert "the port must be" not in result.output
    secret = url.split("://", 1)[1].rpartition("@")[0].partition(":")[2]
    assert secret not in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("localhost:", "no port after the colon"),
        ("localhost:http", 'the port must be a number from 1 to 65535, not "http"'),
        ("localhost:0", 'from 1 to 65535, not "0"'),
        ("localhost:65536", 'from 1 to 65535, not "65536"'),
        ("host:1:2", "an IPv6 address goes in brackets"),
        ("[::1", "an IPv6 address goes in brackets"),
        ("[example.com]:9100", "an IPv6 address goes in brackets"),
        ("a b:9100", 'not a host name or address: "a b"'),
        ("user@host:9100", "not a host name or address"),
    ],
)
def test_probe_says_what_is_wrong_with_an_address(workdir: object, address: str, says: str) -> None:
    """A bad HOST:PORT is a usage error (exit 2) naming the fault and the form, and
    nothing is asked of anyone; --host/--port beside HOST:PORT is one too."""
    result = CliRunner().invoke(main, ["probe", address])
    assert result.exit_code == 2, result.output
    assert says in result.output and "e.g. localhost:9100" in result.output, result.output
    assert "no worker answers" not in result.output
    both = CliRunner().invoke(main, ["probe", "localhost:9100", "--port", "9101"])
    assert both.exit_code == 2 and "give HOST:PORT or --port, not both" in both.output
    bad_host = CliRunner().invoke(main, ["probe", "--host", "a:b:c"])
    assert bad_host.exit_code == 2 and "not a host name or address" in bad_host.output


def test_a_past_at_is_accepted_and_said(tw: Run) -> None:
    """--at in the past schedules a timer due at once, and the output says so."""
    tw("init", "--shards", "2")
    result = tw("schedule", "late", "--at", "2001-01-01T00:00:00Z")
    assert "in the past: the timer is due at once" in result.output
    assert "in the past" not in tw("schedule", "soon", "--in", "1h").output


def test_a_past_at_on_reschedule_is_said_as_schedule_says_it(tw: Run) -> None:
    """`reschedule --at` a past time said only "Rescheduled ... to 2020-...": it notes
    the timer is due at once, as `schedule` does (on stderr, --json too)."""
    tw("init", "--shards", "2")
    tw("schedule", "job:{90}", "--in", "1h")
    moved = tw("reschedule", "job:{90}", "--at", "2020-01-01T00:00:00Z")
    assert moved.stdout.startswith("Rescheduled job:{90} to 2020-01-01T00:00:00.000Z")
    said = "Note: 2020-01-01T00:00:00.000Z is in the past: the timer is due at once."
    assert said in moved.stderr, moved.output
    assert said in tw("--json", "reschedule", "job:{90}", "--at", "2020-01-01T00:00:00Z").stderr
    assert "in the past" not in tw("reschedule", "job:{90}", "--in", "1h").output


def test_schedule_rearm_flag(tw: Run) -> None:
    """`schedule --rearm` arms an ended id again; without it the outcome is shown."""
    tw("init", "--shards", "2")
    tw("schedule", "job:{9}", "--in", "1h")
    tw("cancel", "job:{9}")
    assert "Already decided (cancelled)" in tw("schedule", "job:{9}", "--in", "1h").output
    assert "Scheduled" in tw("schedule", "job:{9}", "--in", "1h", "--rearm").output
    assert as_json(tw("--json", "get", "job:{9}"))["state"] == "pending"


MISSING = [
    (["get", "nope"], "TimerNotFound"),
    (["wait", "nope", "--timeout", "0.1"], "TimerNotFound"),
    (["cancel", "nope"], "TimerNotFound"),
    (["complete", "nope"], "TimerNotFound"),
    (["reschedule", "nope", "--in", "1s"], "TimerNotFound"),
    (["dead", "show", "0/1-0"], "NotFound"),
    (["dead", "redeliver", "0/1-0"], "NotFound"),
    (["dead", "drop", "0/1-0", "--yes"], "NotFound"),
    (["groups", "delete", "nope", "--yes"], "NotFound"),
    (["schedules", "get", "nope"], "ScheduleNotFound"),
    (["schedules", "update", "nope", "--every", "1m"], "ScheduleNotFound"),
    (["schedules", "pause", "nope"], "ScheduleNotFound"),
    (["schedules", "resume", "nope"], "ScheduleNotFound"),
    (["schedules", "trigger", "nope"], "ScheduleNotFound"),
    (
        [
            "schedules",
            "backfill",
            "nope",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-01T00:01:00Z",
        ],
        "ScheduleNotFound",
    ),
    (["schedules", "delete", "nope", "--yes"], "ScheduleNotFound"),
]


def test_every_command_with_a_missing_object_exits_6_in_one_shape(tw: Run) -> None:
    """Whatever is missing (timer, schedule, group, dead letter), the command exits 6 with
    one line on stderr, or with --json (given after the command) one JSON error object on
    stderr and nothing on stdout; and the wording of each kind is the same everywhere."""
    tw("init", "--shards", "2")
    wordings: dict[str, set[str]] = {}
    for args, kind in MISSING:
        human = tw(*args, expect=6)
        assert human.stdout == "" and human.stderr.count("\n") == 1, (args, human.output)
        assert human.stderr.startswith("Error: no "), (args, human.stderr)
        result = tw(*args, "--json", expect=6)
        assert result.stdout == "", (args, result.stdout)
        error = json.loads(result.stderr)
        assert (error["kind"], error["exit_code"]) == (kind, 6), (args, error)
        wordings.setdefault(kind, set()).add(error["error"].replace("nope", "X"))
    assert all(len(w) == 1 for k, w in wordings.items() if k != "NotFound"), wordings


def test_global_options_go_before_or_after_the_command(
    tw: Run, redis_server: RedisServer, namespace: str
) -> None:
    """--redis-url, --namespace and --json mean the same after the command's name; after
    it they win over what came before."""
    tw("init", "--shards", "2")
    tw("schedule", "here", "--in", "1h")
    after = tw("get", "here", "--json", base=False, expect=None)
    assert after.exit_code != 0  # no URL: no server for a read (none was started)
    placed = tw("get", "here", "--redis-url", redis_server.url, "--namespace", namespace,
                "--json", base=False)  # fmt: skip
    assert as_json(placed)["state"] == "pending"
    other = tw("--namespace", "elsewhere", "get", "here", "--namespace", namespace, "--json")
    assert as_json(other)["id"] == "here"
    nested = tw("schedules", "list", "--json")
    assert as_json(nested) == []


def test_messages_count_and_place_a_decision_in_words(tw: Run) -> None:
    """One timer is "1 timer"; an outcome decided before its deadline says so (no negative
    lateness), in wait and in tail, in words a person reads (about an hour: 59m59s, not
    3599284 ms, #56); the --help of every subcommand says what --redis-url is."""
    tw("init", "--shards", "2")
    said = tw("notify", "k").output  # a key nothing watches: said why nothing happened
    assert "Notified k: 0 timers completed (no pending timer watched it, or too few" in said
    tw("schedule", "j:{1}", "--in", "1h", "--watch", "j:{1}:k")
    said = tw("notify", "j:{1}").output  # its id, not the key it watches (trial 24)
    assert "(j:{1} is a pending timer's id, not a key it watches: notify j:{1}:k, or" in said
    tw("schedule", "j:{2}", "--in", "1h")  # watches no keys: told as little as for `k`
    said = tw("notify", "j:{2}").output
    assert (
        "(j:{2} is a pending timer's id and watches no keys; to end it: tickwheel complete 'j:{2}')"
    ) in said, said
    done = tw("notify", "j:{1}:k").output
    assert "Notified j:{1}:k: 1 timer completed" in done and "no pending" not in done
    waited = tw("wait", "j:{1}").output
    assert re.search(r"completed at \S+, decided (1h|59m5\ds) before its deadline", waited), waited
    tailed = tw("tail", "--history", "--idle-exit").output
    assert re.search(r"completed\s+j:\{1\}\s+(1h|59m5\ds) before its deadline", tailed), tailed
    helped = tw("get", "--help").output
    assert "The Redis to use" in helped and "As before the command" not in helped
    assert "-" not in waited.split("decided", 1)[1]


def test_every_time_option_says_a_time_without_an_offset_is_utc() -> None:
    """Every option that takes an ISO-8601 time says how one without an offset is read
    (UTC): `timers list --from` and `timers reschedule --at` did not (trial 10)."""
    seen = 0

    def walk(command: click.Command, path: str) -> None:
        nonlocal seen
        for param in command.params:
            if isinstance(param, click.Option) and param.type is INSTANT:
                seen += 1
                assert "UTC unless it gives an offset" in (param.help or ""), (path, param.opts)
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(main, "tickwheel")
    assert seen >= 10


def test_a_decision_seconds_before_its_deadline_is_counted_in_whole_seconds_down() -> None:
    """The README tour's timer is completed about half a second after its 30 s one was
    set: rounded, it said 30s in one run and 29s in the next (trial 9); counted down, 29s
    in both, whichever side of the half second the CLI's start fell."""
    assert against_deadline(-29_400) == against_deadline(-29_600) == "29s before its deadline"
    assert against_deadline(-30_000) == "30s before its deadline"
    assert against_deadline(12_999) == "12s after its deadline"
    assert against_deadline(-3_599_990) == "59m59s before its deadline"
    assert against_deadline(-250) == "250ms before its deadline"


def test_a_decision_is_placed_from_its_deadline_as_the_handlers_log_writes_a_duration() -> None:
    """`tail` and `wait` said `3 ms after its deadline` where the handler's log of the same
    outcome said `(3ms after its deadline` (trial 17): under 10 s the duration is written
    as that log writes it (format_duration_ms), and so read back as a duration."""
    for ms in (3, 999, 1000, 1500, 9_999):
        assert against_deadline(ms) == f"{format_duration_ms(ms)} after its deadline", ms
        assert against_deadline(-ms) == f"{format_duration_ms(ms)} before its deadline", ms
    assert against_deadline(3) == "3ms after its deadline"


def test_an_age_is_written_as_the_other_tables_write_one() -> None:
    """`groups` wrote its oldest pending age `1077.7s` where every other table writes
    `17m57s` (trial 22)."""
    assert age_text(1_077_700) == "17m57s"
    assert (age_text(350), age_text(3_250), age_text(0)) == ("350ms", "3s250ms", "0s")


def test_get_of_a_pattern_points_at_timers_list(tw: Run) -> None:
    """`get 'job:*'` said only that there is no timer "job:*" (trial 22)."""
    tw("init", "--shards", "2")
    out = tw("get", "job:*", expect=6).output
    assert "`get` takes one id, not a pattern: `tickwheel timers list 'job:*'`" in out, out
    assert "(worker --result-ttl)" in out, out  # still named as the CLI names it
    assert "not a pattern" not in tw("get", "job:1", expect=6).output
    out = tw("cancel", "job:*", expect=6).output  # and a command that acts on one timer
    assert "`cancel` takes one id, not a pattern: `tickwheel timers cancel 'job:*'` acts" in out


def test_a_namespace_not_initialised_names_those_the_server_has(tw: Run, namespace: str) -> None:
    """After `make demo` the namespace is demo-<ts>: a command on another one says which
    namespaces the server has, and how to pick one."""
    tw("init", "--shards", "2")
    missing = tw("stats", "--namespace", f"{namespace}-typo", expect=4)
    assert "is not initialised" in missing.output
    assert namespace in missing.output and "(--namespace NAME)" in missing.output


def _walk(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, [*path, name])


def test_every_command_and_group_takes_the_global_options_after_its_name() -> None:
    """Walking the whole click tree: each command and each group (#40: `groups --json`,
    `dead --json list`, `server --json status` were "No such option") takes --json,
    --namespace and --redis-url after its name, but one passing its arguments on unparsed."""
    seen = 0
    for path, command in _walk(main, []):
        if not path or any(getattr(p, "type", None) is click.UNPROCESSED for p in command.params):
            continue
        opts = {o for p in command.params for o in getattr(p, "opts", ())}
        assert {"--json", "--namespace", "--redis-url"} <= opts, " ".join(path)
        seen += 1
    assert seen > 40


def test_global_options_after_a_group_act_as_before_it() -> None:
    """`server --json status` answers JSON; `dead --json list` with no server says why in
    JSON (exit 5, not a usage error)."""
    runner = CliRunner()
    status = runner.invoke(main, ["server", "--json", "status"])
    assert status.exit_code == 5 and json.loads(status.stdout) == {"running": False}
    listed = runner.invoke(main, ["dead", "--json", "list"])
    assert listed.exit_code == 5, listed.output
    assert "tickwheel server start" in json.loads(listed.stderr)["error"]


def test_seconds_options_take_a_duration_too() -> None:
    """`wait --timeout 10s` (#40: refused, while `handle --timeout 30s` took it): a bare
    number is seconds, a duration with a unit is taken, anything else says both forms."""
    from timer.cli.durations import parse_seconds  # noqa: PLC0415

    assert parse_seconds("10") == 10.0 and parse_seconds("0.5") == 0.5
    assert parse_seconds("10s") == 10.0 and parse_seconds("500ms") == 0.5
    assert parse_seconds("2m") == 120.0
    with pytest.raises(
        ValueError,
        match=r"not a duration; write numbers with units ms, s, m, h or d.*bare number is seconds",
    ):
        parse_seconds("soon")
    refused = CliRunner().invoke(main, ["wait", "x", "--timeout", "soon"])
    assert refused.exit_code == 2 and "bare number is seconds" in refused.output


def test_an_unreachable_server_is_said_in_one_sentence() -> None:
    """The error names the address once, with no ".;" (#40)."""
    port = free_port()
    got = CliRunner().invoke(main, ["--redis-url", f"redis://127.0.0.1:{port}/0", "stats"])
    assert got.exit_code == 5
    assert ".;" not in got.output and "is the server running" in got.output, got.output


def test_stats_says_which_server_has_aof_off() -> None:
    """One server: OFF; a cluster: the nodes without it (#40: "OFF on some server")."""
    from timer.cli.namespace_cmd import _aof  # noqa: PLC0415

    assert _aof([{"node": "a:1", "aof": True}]) == "on"
    assert _aof([{"node": "a:1", "aof": False}]) == "OFF"
    assert _aof([{"node": "a:1", "aof": True}, {"node": "b:2", "aof": False}]) == "OFF on b:2"


@pytest.mark.parametrize("command", [["worker"], ["handle", "timer.cli.demo.handlers:on_timeout"]])
def test_durability_of_a_long_running_command_is_checked_before_it_starts(
    command: list[str],
) -> None:
    """`--durability` of worker and handle: a level it cannot parse is a usage error
    naming the levels (exit 2), before any server is started or reached."""
    runner = CliRunner()
    for bad in ("bogus", "replicas:x", "aof+quorum"):
        done = runner.invoke(main, [*command, "--durability", bad])
        assert done.exit_code == 2, done.output
        assert "none, aof, replicas:N, aof+replicas:N" in done.output
    env = runner.invoke(main, [*command], env={"TICKWHEEL_DURABILITY": "replicas"})
    assert env.exit_code == 2 and "--durability" in env.output


def test_steady_heap_puts_start_up_out_of_the_collectors_reach() -> None:
    """The long-running commands freeze what start-up made (#55: a full collection of it
    stalled a `handle --fire` process ~20 ms at a time); the collector still runs."""
    import gc  # noqa: PLC0415

    from timer.cli.service import steady_heap  # noqa: PLC0415

    gc.unfreeze()
    try:
        steady_heap()
        assert gc.get_freeze_count() > 1000 and gc.isenabled()
    finally:
        gc.unfreeze()


_GIVEN = {"--redis-url": ("--redis-url", "redis://127.0.0.1:1", "redis://h:1"),
          "--namespace": ("--namespace", "billing")}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["probe", "--redis-url", "redis://127.0.0.1:1"],
         "Note: --redis-url redis://127.0.0.1:1 is ignored: `tickwheel probe` asks"),
        (["probe", "--namespace", "billing"],
         "Note: --namespace billing is ignored: `tickwheel probe` asks"),
        (["tokens", "list", "--namespace", "billing"],
         "Note: --namespace billing is ignored: tokens live in the file"),
        (["tokens", "revoke", "abc", "--redis-url", "redis://h:1"],
         "Note: --redis-url redis://h:1 is ignored: tokens live in the file"),
    ],
)  # fmt: skip
def test_a_global_option_a_command_would_ignore_is_said_and_ignored(
    workdir: object, args: list[str], says: str
) -> None:
    """`probe` asks a worker and `tokens` reads a file: neither uses Redis. A
    --redis-url or --namespace after them was taken and ignored without a word (trial
    13). It is still ignored (a wrapper adding --redis-url to every command keeps
    working: refusing it broke one), with one note saying why, and the command does
    what it does without it; their --help does not offer it."""
    result = CliRunner().invoke(main, args)
    plain = CliRunner().invoke(main, [a for a in args if a not in _GIVEN[args[-2]]])
    assert result.exit_code == plain.exit_code != 2, result.output
    assert result.output.count("Note:") == 1 and says in result.output, result.output
    assert result.output.replace(result.output.splitlines()[0] + "\n", "", 1) == plain.output
    shown = CliRunner().invoke(main, [*args[: 2 if args[0] == "tokens" else 1], "--help"]).output
    assert "--redis-url" not in shown and "--json" in shown, shown


@pytest.mark.parametrize("command", [["server"], ["server", "start"], ["server", "status"],
                                     ["server", "stop"]])  # fmt: skip
def test_server_help_offers_no_redis_url_it_would_ignore(command: list[str]) -> None:
    """`tickwheel server …` manages the embedded server whatever --redis-url says (it
    notes that it is ignored): its --help listed --redis-url and --namespace (trial 15).
    It still takes them, as before, saying so."""
    shown = CliRunner().invoke(main, [*command, "--help"]).output
    assert "--redis-url" not in shown.split("Options:")[1], shown
    assert "--namespace" not in shown and "--json" in shown, shown
    noted = CliRunner().invoke(main, ["server", "status", "--redis-url", "redis://h:1"])
    assert "Note: --redis-url redis://h:1 is ignored" in noted.output, noted.output


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_bench_help_offers_no_options_it_does_not_show(flag: str) -> None:
    """`tickwheel bench --help` read `Usage: tickwheel bench [OPTIONS] NAME [ARGS]...` and
    showed no Options section: it takes none of its own (ARGS go to the benchmark)."""
    shown = CliRunner().invoke(main, ["bench", flag], prog_name="tickwheel")
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("Usage: tickwheel bench NAME [ARGS]...\n"), shown.output
    assert "[OPTIONS]" not in shown.output and "Options:" not in shown.output


@pytest.mark.parametrize("args", [["bench"], ["bench", "nope"], ["bench", "--bogus"]])
def test_a_bench_usage_error_says_where_its_help_is(args: list[str]) -> None:
    """`bench` with a bad argument left out the `Try 'tickwheel bench --help' for help.`
    line every other command's usage error has (it had no help option of its own)."""
    shown = CliRunner().invoke(main, args, prog_name="tickwheel")
    assert shown.exit_code == 2, shown.output
    assert "Usage: tickwheel bench NAME [ARGS]...\nTry 'tickwheel bench --help' for help.\n" in (
        shown.output
    ), shown.output


def test_server_help_names_every_command_that_starts_the_server() -> None:
    """`server --help` listed the commands that start the embedded server but not `serve`,
    which starts it too (trial 20): the list is every command marked so."""
    from timer.cli.app import _STARTERS  # noqa: PLC0415

    shown = " ".join(CliRunner().invoke(main, ["server", "--help"]).output.split())
    listed = shown.split("create or serve (", 1)[1].split(")", 1)[0]
    names = {c.name for c in _STARTERS}
    assert names <= set(listed.replace(",", " ").split()) | {"create"}, (names, listed)
    assert "serve" in names and "serve," in listed


def test_cancel_complete_and_reschedule_of_an_ended_timer_say_how_it_ended(tw: Run) -> None:
    """`cancel` and `complete` of an ended timer said `X was already decided` (not how),
    where `heartbeat` said `already ended (cancelled)` (trial 20): one wording, the way
    it ended in it; --json says it too, as heartbeat's does (trial 32)."""
    tw("init", "--shards", "2")
    tw("schedule", "e:{1}", "--in", "1h")
    tw("complete", "e:{1}")
    for command in (
        ["cancel", "e:{1}"],
        ["complete", "e:{1}"],
        ["reschedule", "e:{1}", "--in", "1m"],
    ):
        said = tw(*command).output.strip()
        assert said == "e:{1} already ended (completed); nothing changed", (command, said)
    for verb, command in (
        ("cancelled", ["cancel", "e:{1}"]),
        ("completed", ["complete", "e:{1}"]),
        ("rescheduled", ["reschedule", "e:{1}", "--in", "1m"]),
    ):
        got = as_json(tw("--json", *command))
        assert got == {"id": "e:{1}", verb: False, "state": "completed"}, got
