"""docker-compose.yml and the Dockerfile: checked as far as a machine without Docker can."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import click
import pytest
import redis
import yaml
from click.testing import CliRunner

from tests.conftest import wait_for
from timer import TimerClient
from timer.cli.main import main
from timer.redis.store import RedisSettings
from timer.testing import LISTPACK_VALUE_BYTES, RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_GUIDE = ROOT / "docs" / "guides" / "deployment.md"


def compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml as compose reads it: ``${VAR}`` and ``${VAR:?message}`` taken
    from ``env`` (the variables of .env.example by default)."""
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return interpolate(data, env_example() if env is None else env)  # type: ignore[no-any-return]


def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {name.strip(): value.strip() for name, value in pairs}


VARIABLE = re.compile(r"\$\{(\w+)(?::\?([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation of the forms the file uses; a missing ``:?`` variable is
    an error with its message, as compose refuses to start."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise LookupError(m.group(2) or f"{m.group(1)} is not set")
        return env[m.group(1)]

    # `$$` is a literal `$` (left for the container's shell), never a variable
    return "$".join(VARIABLE.sub(one, part) for part in value.split("$$"))


def test_redis_service_has_aof_healthcheck_and_volume() -> None:
    """Redis runs with AOF (appendfsync everysec), small hashes compact for values up to
    the bytes tickwheel's own servers allow, a healthcheck, and a named data volume."""
    redis = compose()["services"]["redis"]
    cmd = " ".join(redis["command"])
    assert "--appendonly yes" in cmd and "--appendfsync everysec" in cmd
    assert f"--hash-max-listpack-value {LISTPACK_VALUE_BYTES}" in cmd
    assert redis["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    assert any(v.startswith("redis-data:") for v in redis["volumes"])
    assert "redis-data" in compose()["volumes"]


def test_init_is_a_one_shot_after_redis_is_healthy() -> None:
    """The namespace is initialised once, by a service that runs `tickwheel init`."""
    init = compose()["services"]["init"]
    assert init["command"][0] == "init" and "--shards" in init["command"]
    assert init["restart"] == "no"
    assert init["depends_on"]["redis"]["condition"] == "service_healthy"


def test_workers_scale_serve_metrics_and_wait_for_init() -> None:
    """N workers (replicas) run `tickwheel worker` with metrics, after init succeeded."""
    worker = compose({"TICKWHEEL_REDIS_PASSWORD": "pw"})["services"]["worker"]
    assert worker["command"][0] == "worker" and "--metrics-port" in worker["command"]
    assert worker["deploy"]["replicas"] >= 2
    assert worker["depends_on"]["init"]["condition"] == "service_completed_successfully"
    port = worker["command"][worker["command"].index("--metrics-port") + 1]
    assert port in worker["expose"]
    assert worker["environment"]["TICKWHEEL_REDIS_URL"] == "redis://:pw@redis:6379/0"


def test_image_runs_the_tickwheel_cli() -> None:
    """The image installs this package and its entry point is the tickwheel command."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["tickwheel"]' in dockerfile
    for part in ("timer", "worker", "cli", "pyproject.toml"):
        assert f"COPY {part}" in dockerfile
    assert compose()["services"]["worker"]["build"] == "."


@pytest.mark.slow
def test_the_image_build_installs_from_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """The image's `pip install .` works with only the files its COPY lines bring in (a
    package pyproject.toml lists but the image lacks fails the build): the same copies,
    built into a wheel here, hold every package and import without the source tree."""
    app = tmp_path / "app"
    app.mkdir()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *sources, _dest = line.split()[1:]
            for source in sources:
                src = ROOT / source
                if src.is_dir():
                    shutil.copytree(  # links kept, as COPY keeps them (timer/worker, timer/cli)
                        src, app / source, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
                    )  # fmt: skip
                else:
                    shutil.copy2(src, app / source)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(app)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("tickwheel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top == {"timer"}, "one installed top-level name (#58)"
    packages = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/**/__init__.py")}
    for package in packages:  # every package, with its data; worker/ and cli/ inside timer
        first = package.split("/")[0]
        installed = f"timer/{package}" if first in ("worker", "cli") else package
        if first in ("timer", "worker", "cli"):
            assert f"{installed}/__init__.py" in names, package
    assert "timer/durable/model/lua/schedule.lua" in names and "timer/cli/main.py" in names
    assert "timer/durable/model/lua/include/records.lua" in names
    assert "timer/dashboard/static/index.html" in names and "timer/py.typed" in names
    assert {"timer/dashboard/static/main.js", "timer/dashboard/static/dashboard.css"} <= names


def dockerfile_cmd() -> list[str]:
    """The Dockerfile's CMD, as the arguments the entry point gets."""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("CMD "):
            args = json.loads(line[len("CMD ") :])
            assert isinstance(args, list)
            return [str(a) for a in args]
    raise AssertionError("the Dockerfile has no CMD")


def dockerfile_healthcheck() -> list[str]:
    """The tickwheel arguments of the Dockerfile's HEALTHCHECK CMD."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(x for x in text.splitlines() if x.startswith("HEALTHCHECK "))
    args = json.loads(line.split(" CMD ", 1)[1])
    assert args[0] == "tickwheel", args
    return [str(a) for a in args[1:]]


def compose_healthchecks() -> list[list[str]]:
    """The tickwheel arguments of every service healthcheck that runs tickwheel."""
    found = []
    for service in compose()["services"].values():
        test = service.get("healthcheck", {}).get("test")
        if test and test[0] == "CMD" and test[1] == "tickwheel":
            found.append([str(a) for a in test[2:]])
    assert found, "no service checks a worker's health"
    return found


def readme_compose_runs() -> list[list[str]]:
    """The deployment guide's `docker compose run --rm cli …` lines, as tickwheel
    arguments."""
    runs = []
    for line in DEPLOY_GUIDE.read_text().splitlines():
        if line.startswith("docker compose run --rm cli "):
            words = shlex.split(line.split("#", 1)[0])
            runs.append(words[len(["docker", "compose", "run", "--rm", "cli"]) :])
    assert runs, "the deployment guide shows no `docker compose run` line"
    return runs


def deployed_command_lines() -> list[list[str]]:
    services = compose()["services"]
    ours = [s for s in services.values() if s.get("image") == "tickwheel:latest"]
    assert len(ours) == 4, "the tickwheel image's services: init, worker, cli, sentinel-worker"
    lines = [list(map(str, s["command"])) for s in ours]
    return [
        *lines,
        dockerfile_cmd(),
        dockerfile_healthcheck(),
        *compose_healthchecks(),
        *readme_compose_runs(),
    ]


def parse(args: list[str]) -> click.Context:
    """Parse and convert a tickwheel command line as the CLI would, without running it."""
    root = click.Context(main, info_name="tickwheel")
    name, rest = args[0], args[1:]
    if name.startswith("-"):  # global options only (e.g. --help)
        return main.make_context("tickwheel", args)
    command = main.get_command(root, name)
    assert command is not None, f"no command {name!r}"
    return command.make_context(name, rest, parent=root)


@pytest.mark.parametrize("args", deployed_command_lines(), ids=" ".join)
def test_every_deployed_command_line_parses(args: list[str]) -> None:
    """Each command of docker-compose.yml, the Dockerfile's CMD and the deployment guide's compose
    lines is accepted by the CLI's parser with its exact arguments."""
    try:
        parse(args)
    except click.exceptions.Exit as done:  # --help prints and exits 0
        assert done.exit_code == 0
    except click.ClickException as exc:
        raise AssertionError(f"`tickwheel {' '.join(args)}` is refused: {exc}") from None


def test_ms_options_take_bare_milliseconds() -> None:
    """An option named --…-ms takes a bare number of ms, or a duration with its unit."""
    worker_cmd = main.get_command(click.Context(main), "worker")
    assert worker_cmd is not None
    ctx = worker_cmd.make_context("worker", ["--lease-ms", "5000", "--horizon-ms", "10s"])
    assert ctx.params["lease_ms"] == 5000 and ctx.params["horizon_ms"] == 10_000
    with pytest.raises(click.BadParameter, match=r"not a duration.*bare number is milliseconds"):
        worker_cmd.make_context("worker", ["--lease-ms", "five"])


@pytest.mark.slow
@pytest.mark.redis
def test_compose_services_run_as_written(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """init, the workers and the cli service run their compose command lines for real
    (with compose's environment; only the metrics port is a free one here)."""
    services = compose()["services"]
    env = {
        **os.environ,
        **services["worker"]["environment"],
        "TICKWHEEL_REDIS_URL": redis_server.url,
        "TICKWHEEL_NAMESPACE": namespace,
    }
    runner = CliRunner(env=env)
    init = runner.invoke(main, list(map(str, services["init"]["command"])))
    assert init.exit_code == 0, init.output
    port = str(free_port())
    command = [port if a == "9100" else str(a) for a in services["worker"]["command"]]
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timer.cli", *command],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        client = TimerClient.from_url(redis_server.url, namespace)
        wait_for(lambda: None not in client.leaders().values(), 20, "the worker leads")
        for args in readme_compose_runs():
            done = runner.invoke(main, args)
            assert done.exit_code == 0, (args, done.output)
        client.schedule("compose:{1}", delay_ms=200)
        assert client.wait("compose:{1}", timeout=20).outcome == "expired"
        for check in [*compose_healthchecks(), dockerfile_healthcheck()]:
            args = [port if a == "9100" else a for a in check]
            healthy = runner.invoke(main, args)
            assert healthy.exit_code == 0, (check, healthy.output)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    assert code == 0, (tmp_path / "worker.log").read_text()


def test_image_is_not_root_and_redis_is_not_public() -> None:
    """The image runs as an unprivileged user; Redis has a password (from .env, which
    compose refuses to start without) and is not published on the host; one-shot
    services turn the image's healthcheck off."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    services = compose({"TICKWHEEL_REDIS_PASSWORD": "pw"})["services"]
    assert "ports" not in services["redis"]
    command = services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "pw"
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == "pw"  # its healthcheck
    assert services["worker"]["environment"]["TICKWHEEL_REDIS_URL"].startswith("redis://:pw@")
    with pytest.raises(LookupError, match=r"\.env"):
        compose({})
    ignored = [(ROOT / name).read_text().split() for name in (".gitignore", ".dockerignore")]
    assert all(".env" in names for names in ignored)  # the password stays out of git and the image
    for name in ("init", "cli"):
        assert services[name]["healthcheck"] == {"disable": True}
    worker = services["worker"]["command"]
    assert worker[worker.index("--metrics-host") + 1] == "0.0.0.0"


@pytest.mark.slow
def test_redis_service_command_runs(tmp_path: Path, server_binary: Path) -> None:
    """The redis service's command line starts a server with AOF on, compact hashes for
    values up to LISTPACK_VALUE_BYTES and the password of .env: refused without it,
    served to the URL the tickwheel services use (our test binary)."""
    services = compose({"TICKWHEEL_REDIS_PASSWORD": "c0mpose-pw"})["services"]
    command = list(map(str, services["redis"]["command"]))
    assert command[0] == "redis-server"
    port = free_port()
    proc = subprocess.Popen(
        [str(server_binary), *command[1:], "--port", str(port), "--dir", str(tmp_path),
         "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        anonymous = redis.Redis(port=port)
        wait_for(lambda: _refuses(anonymous), 15, "the server to answer")
        url = services["worker"]["environment"]["TICKWHEEL_REDIS_URL"]
        r = redis.Redis.from_url(url.replace("@redis:6379", f"@127.0.0.1:{port}"))
        assert r.ping()
        assert r.config_get("appendonly")["appendonly"] == "yes"
        assert r.config_get("appendfsync")["appendfsync"] == "everysec"
        assert r.config_get("hash-max-listpack-value") == {
            "hash-max-listpack-value": str(LISTPACK_VALUE_BYTES)
        }
        r.close()
    finally:
        proc.terminate()
        proc.wait(10)


def _refuses(r: redis.Redis) -> bool:
    """True once the server answers, refusing a client without the password."""
    try:
        r.ping()
    except redis.AuthenticationError:
        return True
    except redis.ConnectionError:
        return False
    raise AssertionError("the server answered a client without its password")


def test_readme_env_line_makes_a_password_compose_takes(tmp_path: Path) -> None:
    """The deployment guide's `echo … > .env` line, run by a shell as written, makes a .env whose
    password compose's interpolation puts into Redis's --requirepass and into a URL the
    CLI accepts; the compose file's header gives the same line."""
    block = DEPLOY_GUIDE.read_text().split("## With docker-compose", 1)[1]
    (line,) = [
        x
        for x in block.split("```sh", 1)[1].split("```", 1)[0].splitlines()
        if x.startswith("echo ")
    ]
    assert line in (ROOT / "docker-compose.yml").read_text()
    subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True, timeout=30)
    name, _, password = (tmp_path / ".env").read_text().strip().partition("=")
    assert name == "TICKWHEEL_REDIS_PASSWORD" and len(password) >= 24
    services = compose({name: password})["services"]
    command = services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == password
    url = services["worker"]["environment"]["TICKWHEEL_REDIS_URL"]
    assert RedisSettings.from_url(url).safe_url == "redis://:***@redis:6379/0"


def test_every_extra_the_readme_names_is_declared() -> None:
    """The README's install table and its `pip install '…[extra]'` lines name extras
    pyproject.toml declares (CI installs `[all]` and the base from the built wheel:
    .ci/wheel), and every extra a user may want is in the table."""
    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"tickwheel\[(\w+)\]", readme)) | set(
        re.findall(r"pip install '\.\[(\w+)\]'", readme)
    )
    assert named and named <= declared, named - declared
    table = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert rows == declared - {"dev", "bench"}, rows ^ (declared - {"dev", "bench"})


@pytest.mark.slow
def test_sentinel_profile_runs_as_written(tmp_path: Path, server_binary: Path) -> None:
    """The sentinel profile's command lines for real on loopback (the names compose's
    network resolves become local ports): redis, its two replicas, three Sentinels from
    their `sh -c` line, `init`, and a sentinel-worker that fires a timer scheduled
    through the Sentinels with replicas:1 (failovers: tests/chaos/test_sentinel.py)."""
    pw = "c0mpose-pw"
    services = compose({"TICKWHEEL_REDIS_PASSWORD": pw})["services"]
    procs: list[subprocess.Popen[bytes]] = []

    def server(command: list[str], where: Path, port: int) -> subprocess.Popen[bytes]:
        where.mkdir()
        args = [str(server_binary), *command[1:], "--port", str(port), "--dir", str(where),
                "--bind", "127.0.0.1"]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    mport = free_port()
    server(list(map(str, services["redis"]["command"])), tmp_path / "m", mport)
    replica_cmd = [str(a) for a in services["redis-replica"]["command"]]
    assert replica_cmd[-3:] == ["--replicaof", "redis", "6379"]
    for i in range(services["redis-replica"]["deploy"]["replicas"]):
        server([*replica_cmd[:-2], "127.0.0.1", str(mport)], tmp_path / f"r{i}", free_port())
    sentinel = services["sentinel"]
    assert sentinel["command"][:2] == ["sh", "-c"]
    sentinels = []
    for i in range(sentinel["deploy"]["replicas"]):
        port = free_port()
        line = (
            sentinel["command"][2]
            .replace("port 26379", f"port {port}")
            .replace("tickwheel redis 6379", f"tickwheel 127.0.0.1 {mport}")
            .replace("/tmp/sentinel.conf", str(tmp_path / f"s{i}.conf"))
            .replace("exec redis-server", f"exec {shlex.quote(str(server_binary))}")
        )
        procs.append(subprocess.Popen(
            ["sh", "-c", line], env={**os.environ, **sentinel["environment"]},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        sentinels.append(port)
    hosts = ",".join(f"127.0.0.1:{p}" for p in sentinels)
    url = services["sentinel-worker"]["environment"]["TICKWHEEL_REDIS_URL"]
    assert url == f"redis+sentinel://:{pw}@sentinel:26379/tickwheel"
    url = url.replace("sentinel:26379", hosts)
    env = {**os.environ, "TICKWHEEL_REDIS_URL": url, "TICKWHEEL_NAMESPACE": "default"}
    log = tmp_path / "worker.log"
    try:

        def sentinels_ready() -> bool:
            for port in sentinels:
                try:
                    with redis.Redis(port=port, decode_responses=True) as r:
                        m = r.execute_command("SENTINEL", "MASTER", "tickwheel")
                except redis.RedisError:
                    return False
                fields = dict(zip(m[::2], m[1::2], strict=True)) if isinstance(m, list) else m
                if (int(fields["num-slaves"]), int(fields["num-other-sentinels"])) != (2, 2):
                    return False
            return True

        wait_for(sentinels_ready, 60, "three Sentinels that know both replicas")

        def replicas_online() -> bool:
            with redis.Redis(port=mport, password=pw) as r:
                info = r.info("replication")
            return all(info.get(f"slave{i}", {}).get("state") == "online" for i in range(2))

        wait_for(replicas_online, 60, "both replicas in sync")
        init = CliRunner(env=env).invoke(main, list(map(str, services["init"]["command"])))
        assert init.exit_code == 0, init.output
        command = [str(free_port()) if a == "9100" else str(a)
                   for a in services["sentinel-worker"]["command"]]  # fmt: skip
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "timer.cli", *command], env=env, stdout=out,
                stderr=subprocess.STDOUT,
            ))  # fmt: skip
        with TimerClient.from_url(url, "default", durability="replicas:1") as c:
            c.schedule("sentinel:{1}", delay_ms=300)
            assert c.wait("sentinel:{1}", timeout=30).outcome == "expired"
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
