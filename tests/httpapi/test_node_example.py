"""examples/node/: the Node client schedules, notifies and waits through `tickwheel serve`
(here in a thread), and verifies the signature of the webhooks the handler runner sends
it; a wrong secret is refused by its check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from timer import Backoff, Handlers, TimerClient
from timer.testing import RedisServer, free_port
from timer.webhook import webhook

from .test_serve import serving

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")
SECRET = "node-receiver-secret-1234"


def test_the_node_example_against_a_real_server(
    redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    assert NODE is not None
    with serving(redis_server, namespace, tmp_path, worker=True) as (api, _c, _):
        port = free_port()
        hooks = Handlers(
            TimerClient.from_url(redis_server.url, namespace),
            group="node-hooks",
            backoff=Backoff(initial_s=0.05, max_s=0.2),
        )
        deliver = webhook(f"http://127.0.0.1:{port}/", SECRET, timeout_s=5)
        for kind in ("expired", "completed", "cancelled"):
            hooks.add(kind, deliver)
        runner = threading.Thread(target=hooks.run, daemon=True)
        runner.start()
        try:
            env = {
                "PATH": "/usr/bin:/bin",
                "API": api.base,
                "TOKEN": api.token or "",
                "NS": namespace,
                "WEBHOOK_SECRET": SECRET,
                "WEBHOOK_PORT": str(port),
            }
            demo = str(ROOT / "examples" / "node" / "demo.js")
            ran = subprocess.run(
                [NODE, demo], env=env, capture_output=True, text=True, timeout=120, check=False
            )
        finally:
            hooks.stop()
            runner.join(15)
            hooks_client = hooks.client
            if hooks_client is not None:
                hooks_client.close()
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert (out["created"], out["again"], out["notified"]) == (True, False, 1)
    assert (out["completed"], out["expired"]) == ("completed", "expired")
    assert out["lateness_ms"] >= 0
    assert out["missing"] == {"status": 404, "kind": "TimerNotFound", "exit_code": 6}
    outcomes = {v["outcome"] for v in out["webhooks"].values()}
    assert outcomes == {"completed", "expired"} and len(out["webhooks"]) == 2
    assert all(v["key"] == v["idempotency_key"] for v in out["webhooks"].values())
    handled = out["handled"]  # through the group over SSE, acked
    assert {v["outcome"] for v in handled.values()} == {"completed", "expired"}
    assert all(v["attempt"] == 1 for v in handled.values())
    # it settles everything its group was given (the stream reads ahead of it): nothing
    # of the group's holds trimming back; the group is the one the README names
    assert out["group"] == "node-demo" and out["settled"] >= 2
    with TimerClient.from_url(redis_server.url, namespace) as c:
        assert [(g.name, g.pending) for g in c.groups() if g.name == "node-demo"] == [
            ("node-demo", 0)
        ]


def test_the_node_signature_check_refuses_a_wrong_secret_or_body(tmp_path: Path) -> None:
    assert NODE is not None
    from timer.webhook import sign  # noqa: PLC0415

    body = b'{"id":"x","outcome":"expired"}'
    header = sign(SECRET, 1_700_000_000, body)
    script = (
        "const {verifySignature} = require(process.argv[1]);"
        "const [h, b, s] = process.argv.slice(2);"
        "console.log(JSON.stringify(verifySignature(s, h, Buffer.from(b), 300, 1700000000)));"
    )
    lib = str(ROOT / "examples" / "node" / "tickwheel.js")

    def check(h: str, b: bytes, s: str) -> bool:
        ran = subprocess.run([NODE, "-e", script, lib, h, b.decode(), s], capture_output=True,
                             text=True, timeout=60, check=True)  # fmt: skip
        return bool(json.loads(ran.stdout))

    assert check(header, body, SECRET)
    assert not check(header, body, "another-secret-entirely")
    assert not check(header, body + b" ", SECRET)
    assert not check(sign(SECRET, 1_600_000_000, body), body, SECRET)  # too old


def _free_port() -> str:
    return str(free_port())


def test_the_node_readme_runs_as_written_twice_in_its_own_namespace(
    tmp_path: Path, server_binary: Path
) -> None:
    """examples/node/README.md's two blocks, pasted in one shell on the embedded server
    (ports made free), twice: the demo keeps to its own namespace (its `init --shards 4`
    failed beside the tour's 16 shards in `default`), the webhook runner's outcomes all
    reach a demo (every signed post is answered until it exits: none is dead-lettered,
    the first run's too), and both runs print what the README says."""
    assert NODE is not None
    text = (ROOT / "examples" / "node" / "README.md").read_text()
    shell = [b.split("```", 1)[0] for b in text.split("```sh\n")[1:]]
    assert len(shell) == 2, "the README's two blocks: the demo, then its webhooks"
    api, hook = _free_port(), _free_port()
    lines = "\n".join(shell).replace("8000", api).replace("9000", hook).splitlines()
    stop = lines.pop()
    assert stop == "tickwheel server stop", stop
    env = {
        "PATH": f"{server_binary.parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "TICKWHEEL_HOME": str(tmp_path / "home"),
        "HOME": str(tmp_path),
    }
    # a reader who took the README tour first: `default` has its 16 shards
    subprocess.run(["tickwheel", "init"], env=env, check=True, capture_output=True, timeout=60)
    check = "tickwheel --json --namespace node-demo dead list"
    # pasted twice in one shell (the first paste's variables still set: an exported
    # WEBHOOK_SECRET made the second's first demo refuse to start)
    script = "\n".join(["set -euo pipefail", *([*lines, check, stop] * 2)])
    try:
        done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=400, check=False)  # fmt: skip
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
        shown = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        assert len(shown) == 4, done.stdout
        for n, out in enumerate(shown):
            assert (out["completed"], out["expired"]) == ("completed", "expired"), out
            assert out["group"] == "node-demo" and out["settled"] >= 2, out
            if n % 2 == 0:
                assert out["webhooks"] == {}, out
            else:
                outcomes = {v["outcome"] for v in out["webhooks"].values()}
                assert outcomes == {"completed", "expired"}, out
        dead = [x for x in done.stdout.splitlines() if x.startswith("[")]
        assert dead == ["[]", "[]"], done.stdout
    finally:  # a run that failed half way leaves no server behind
        subprocess.run(["tickwheel", "server", "stop"], env=env, capture_output=True, timeout=60,
                       check=False)  # fmt: skip
