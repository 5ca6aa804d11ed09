"""`tickwheel dashboard` as the operations guide says to run it (real processes, real HTTP)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import wait_for
from timer import TimerClient
from timer.cli import embedded
from timer.testing import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def readme_lines() -> list[str]:
    text = (ROOT / "docs" / "guides" / "operations.md").read_text()
    block = text.split("## The dashboard", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "timer.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def stop(proc: subprocess.Popen[bytes]) -> bytes:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    return out


@pytest.fixture
def env(redis_server: RedisServer, namespace: str) -> dict[str, str]:
    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.close()
    return {
        **os.environ,
        "TICKWHEEL_REDIS_URL": redis_server.url,
        "TICKWHEEL_NAMESPACE": namespace,
        "PYTHONPATH": str(ROOT),
    }


def test_readme_dashboard_commands_serve_and_stop(env: dict[str, str]) -> None:
    lines = readme_lines()
    assert lines == ["tickwheel dashboard", "tickwheel dashboard --read-only"]
    with socket.socket() as probe:  # the README's port: another process there would answer
        assert probe.connect_ex(("127.0.0.1", 8080)) != 0, "something else listens on 8080"
    for line in lines:
        proc = start(shlex.split(line)[1:], env)
        try:
            wait_for(
                lambda: get("http://127.0.0.1:8080/api/overview")[0] == 200,
                30,
                f"`{line}` to serve",
            )
            _, body = get("http://127.0.0.1:8080/api/overview")
            assert body["namespace"] == env["TICKWHEEL_NAMESPACE"]
            assert body["read_only"] is ("--read-only" in line)
        finally:
            out = stop(proc)
        assert proc.returncode == 0, out


def said_at_start(out: str) -> list[str]:
    """The lines the dashboard printed from the one naming its address (the Warning:
    lines before it aside) to the end of what it says at start."""
    lines = out.splitlines()
    (first,) = (i for i, line in enumerate(lines) if line.startswith("dashboard of namespace"))
    return [line for line in lines[first:] if line != "dashboard stopped"]


@pytest.mark.parametrize("token", ["t0ken", "long-enough-t0ken"])
def test_beyond_loopback_needs_a_token(env: dict[str, str], token: str) -> None:
    """Beyond loopback it needs a token; one shorter than a webhook's secret may be (16
    characters) still starts, as existing setups did, with one warning line saying anyone
    who reaches the port can guess it and how to make one, never the token. Started on
    0.0.0.0 it printed `http://0.0.0.0:PORT/login?token=<your token>`: no address to open,
    and advice to put the token in an address the browser keeps. It prints the loopback
    address, says it listens on every interface, and to sign in on that page."""
    port = str(free_port())
    refused = subprocess.run([sys.executable, "-m", "timer.cli", "dashboard", "--host", "0.0.0.0",
                              "--port", port], cwd=ROOT, env=env, capture_output=True,
                             timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2
    assert b"TICKWHEEL_DASHBOARD_TOKEN" in refused.stderr
    assert b"then sign in on the dashboard's page with it" in refused.stderr
    assert b"login?token" not in refused.stderr
    proc = start(
        ["dashboard", "--host", "0.0.0.0", "--port", port],
        {**env, "TICKWHEEL_DASHBOARD_TOKEN": token},
    )
    try:
        url = f"http://127.0.0.1:{port}/api/overview"
        wait_for(lambda: get(url)[0] == 401, 30, "the dashboard to ask for its token")
        assert get(url, {"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        out = stop(proc).decode()
    assert proc.returncode == 0, out
    assert token not in out  # the token is not printed
    ns = env["TICKWHEEL_NAMESPACE"]
    assert said_at_start(out) == [
        f"dashboard of namespace {ns!r} at {env['TICKWHEEL_REDIS_URL']}: http://127.0.0.1:{port}/",
        "It listens on every interface (--host 0.0.0.0): from another machine, "
        f"http://{socket.gethostname()}:{port}/ or this machine's address",
        "Sign in on that page with the token in TICKWHEEL_DASHBOARD_TOKEN.",
    ], out
    warned = [line for line in out.splitlines() if line.startswith("Warning:")]
    if len(token) >= 16:
        assert warned == [], out
        return
    assert warned == [
        "Warning: TICKWHEEL_DASHBOARD_TOKEN is shorter than 16 characters: anyone who can "
        f"reach port {port} can guess it. Make a longer one with: python3 -c 'import "
        "secrets; print(secrets.token_urlsafe())'"
    ], out


def test_allowed_host_is_served_and_others_refused(env: dict[str, str]) -> None:
    """`tickwheel dashboard --allowed-host NAME` answers requests for NAME and loopback,
    and refuses any other Host (a DNS-rebound page) with 400."""
    port = str(free_port())
    proc = start(["dashboard", "--port", port, "--allowed-host", "timers.internal"], env)
    try:
        url = f"http://127.0.0.1:{port}/api/overview"
        wait_for(lambda: get(url)[0] == 200, 30, "the dashboard to serve")
        assert get(url, {"Host": f"timers.internal:{port}"})[0] == 200
        status, body = get(url, {"Host": "attacker.example"})
        assert status == 400 and "does not answer for host" in str(body["error"])
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out


def test_users_sign_in_with_their_own_tokens_beyond_loopback(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`tickwheel dashboard --tokens FILE` (the operations guide's form): tokens made by
    `tickwheel tokens create` sign users in, so it may listen beyond loopback; a read
    token is told the page is read-only; a missing file, or the shared token as well,
    is refused with what to do. It prints the page's plain address (it printed
    `http://0.0.0.0:PORT/login?token=<your token>`) and to sign in there with a token of
    the file; its --help says to open the page and sign in there, a /login?token= link
    being a script's or a bookmark's."""
    file = tmp_path / "tokens.json"

    def tw(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "timer.cli", *args]
        run_env = {**env, **(extra or {})}
        return subprocess.run(
            command, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=60, check=False
        )

    missing = tw("dashboard", "--tokens", str(file))
    # a setting missing (the token file), not a mistyped command: configuration, exit 4
    assert missing.returncode == 4 and "tickwheel tokens create" in missing.stderr
    made = tw("--json", "tokens", "create", "--tokens", str(file), "--scope", "read")
    assert made.returncode == 0, made.stderr
    viewer = json.loads(made.stdout)["token"]
    both = tw("dashboard", "--tokens", str(file), extra={"TICKWHEEL_DASHBOARD_TOKEN": "t"})
    assert both.returncode == 2 and "unset TICKWHEEL_DASHBOARD_TOKEN" in both.stderr
    port = str(free_port())
    proc = start(["dashboard", "--host", "0.0.0.0", "--port", port, "--tokens", str(file)], env)
    try:
        url = f"http://127.0.0.1:{port}/api/overview"
        wait_for(lambda: get(url)[0] == 401, 30, "the dashboard to ask who signs in")
        status, body = get(url, {"Authorization": f"Bearer {viewer}"})
        assert status == 200 and body["read_only"] is True, body
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert viewer.encode() not in out
    assert said_at_start(out.decode())[0].endswith(f": http://127.0.0.1:{port}/"), out
    assert said_at_start(out.decode())[2] == (
        f"Sign in on that page with a token `tickwheel tokens create --tokens {file}` printed."
    ), out
    assert b"login?token" not in out and b"0.0.0.0:" not in out, out
    helped = " ".join(tw("dashboard", "--help").stdout.split())
    assert (
        "then open http://HOST:PORT/ and sign in there with the token (a script or a "
        "bookmark may open /login?token=... instead" in helped
    ), helped
    assert helped.count("login?token") == 1, helped


def test_the_address_printed_is_one_to_open() -> None:
    """The address the dashboard prints for --host: a wildcard's is loopback (0.0.0.0 and
    :: are no address to open), an IPv6 one is in brackets."""
    from timer.cli.dashboard_cmd import page_url  # noqa: PLC0415

    assert page_url("0.0.0.0", 8083) == "http://127.0.0.1:8083/"
    assert page_url("", 8083) == "http://127.0.0.1:8083/"
    assert page_url("::", 8083) == "http://[::1]:8083/"
    assert page_url("::1", 8083) == "http://[::1]:8083/"
    assert page_url("10.0.0.5", 8083) == "http://10.0.0.5:8083/"
    assert page_url("timers.internal", 80) == "http://timers.internal:80/"


def post(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=b"{}", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def lines_of(proc: subprocess.Popen[bytes]) -> tuple[list[str], threading.Thread]:
    """What the process prints, a line at a time as it comes (read in a thread, which
    ends when the process closes its output)."""
    said: list[str] = []
    assert proc.stdout is not None
    out = proc.stdout

    def read() -> None:
        for line in out:
            said.append(line.decode(errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return said, reader


@pytest.mark.parametrize("level", [None, "WARNING"])
def test_each_action_prints_a_line_naming_the_token(
    env: dict[str, str], tmp_path: Path, level: str | None
) -> None:
    """`tickwheel dashboard --tokens FILE`: a timer cancelled with a write token named
    "night shift" prints one INFO line naming that token, the action and the timer, never
    the token itself (the default --log-level, INFO); with --log-level WARNING, none."""
    file = tmp_path / "tokens.json"
    made = subprocess.run([sys.executable, "-m", "timer.cli", "--json", "tokens", "create",
                           "--tokens", str(file), "--scope", "write", "--name", "night shift"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = json.loads(made.stdout)["token"]
    c = TimerClient.from_url(env["TICKWHEEL_REDIS_URL"], env["TICKWHEEL_NAMESPACE"])
    c.schedule("job:{9}", 3_600_000)
    port = str(free_port())
    args = ["dashboard", "--port", port, "--tokens", str(file)]
    proc = start(args + (["--log-level", level] if level else []), env)
    said, reader = lines_of(proc)
    out = proc.stdout
    assert out is not None
    line = "INFO tickwheel.dashboard: 'night shift' cancel timer 'job:{9}'"
    try:
        base = f"http://127.0.0.1:{port}"
        bearer = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
        wait_for(lambda: get(f"{base}/api/overview", bearer)[0] == 200, 30, "the dashboard")
        assert post(f"{base}/api/timers/job%3A%7B9%7D/cancel", bearer) == 200
        if level is None:  # the line is written before the answer is sent
            wait_for(lambda: any(line in s for s in said), 10, "the action's log line")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        reader.join(20)  # all it printed: the pipe closed as it exited
        out.close()
        c.close()
    text = "".join(said)
    assert proc.returncode == 0 and not reader.is_alive(), text
    assert text.count(line) == (1 if level is None else 0), text
    assert secret not in text


@pytest.mark.parametrize("before", ["none running", "yours running", "a worker joins"])
def test_a_dashboard_stops_the_server_it_started(
    tmp_path: Path, server_binary: Path, before: str
) -> None:
    """`TICKWHEEL_HOME=DIR tickwheel dashboard` with no server running there (as the
    README says to look at its tour's data) starts the embedded server, says it stops it
    with the dashboard, and does on SIGTERM: it left it running in DIR, saying only "Stop
    it with: tickwheel server stop" when it started it. A server that ran before it runs
    on; so does one another client uses when the dashboard stops (it says so, and how to
    stop it)."""
    home = tmp_path / "home"
    state, _ = embedded.start(home, binary=str(server_binary))
    c = TimerClient.from_url(state.url, "default")
    c.init(shards=2)
    c.close()
    if before == "none running":
        embedded.stop(home)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TICKWHEEL_HOME": str(home),
           "TICKWHEEL_SERVER_BINARY": str(server_binary)}  # fmt: skip
    for name in ("TICKWHEEL_REDIS_URL", "TICKWHEEL_NAMESPACE"):
        env.pop(name, None)
    if before == "a worker joins":
        embedded.stop(home)
    port = free_port()
    proc = start(["dashboard", "--port", str(port)], env)
    other = None
    try:
        overview = f"http://127.0.0.1:{port}/api/overview"
        wait_for(lambda: get(overview)[0] == 200, 30, "the dashboard")
        running = embedded.status(home)
        assert running is not None
        if before == "a worker joins":  # a client of its own, still connected at the end
            other = TimerClient.from_url(running.url, "default")
            other.stats()
    finally:
        out = stop(proc).decode()
    try:
        assert proc.returncode == 0, out
        after = embedded.status(home)
        if before == "none running":
            assert "The dashboard stops it when it stops." in out, out
            assert "Stopped the embedded server it started" in out, out
            assert after is None, out
        elif before == "yours running":
            assert "Started the embedded server" not in out, out
            assert "embedded server" not in out.split("dashboard stopped", 1)[1], out
            assert after is not None and after.pid == state.pid, out
        else:
            assert after is not None, out
            assert (
                "runs on: 1 other connection to it is open (a worker or a handler, say, which "
                "hold two each). Stop it with: tickwheel server stop"
            ) in out
    finally:
        if other is not None:
            other.close()
        embedded.stop(home)
