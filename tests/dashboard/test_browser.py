"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright).

A namespace with a running worker: the shard table shows the live leader and pending
counts; a timer is looked up, cancelled through the page (confirming the dialog) and
seen cancelled. The screenshot is saved under the test's temp dir (and, with
TICKWHEEL_SCREENSHOT=path, there too: the README's picture is made this way).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboard import create_app
from tests.conftest import wait_for
from timer import TimerClient
from timer.testing import RedisServer, free_port
from worker import Worker, WorkerSettings

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None and not os.environ.get("TICKWHEEL_REQUIRE_BROWSER"),
        reason="needs Chromium: apt-get install chromium (.ci/run installs it and sets "
        "TICKWHEEL_REQUIRE_BROWSER, so there this test cannot be skipped)",
    ),
]
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.fixture
def served(redis_server: RedisServer, namespace: str) -> Iterator[tuple[str, TimerClient]]:
    """The dashboard on a free port (uvicorn in a thread) and a worker leading every shard."""
    import uvicorn  # noqa: PLC0415

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=4)
    w = Worker(TimerClient.from_url(redis_server.url, namespace), WorkerSettings(worker_id="w1"))
    worker = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    worker.start()
    port = free_port()
    config = uvicorn.Config(create_app(c), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    web = threading.Thread(target=server.run, daemon=True)
    web.start()
    try:
        wait_for(lambda: server.started, 20, "the dashboard to listen")
        wait_for(lambda: all(v == "w1" for v in c.leaders().values()), 20, "the worker's leases")
        yield f"http://127.0.0.1:{port}/", c
    finally:
        server.should_exit = True
        web.join(10)
        w.stop()
        worker.join(15)
        w.client.close()
        c.close()


def test_overview_lookup_and_cancel_in_a_browser(
    served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule("job:{42}", 3_600_000, payload={"job": 42}, watch=["job:{42}:done"])
    c.schedule("job:{43}", 3_600_000)
    shard42 = c.shard_of("job:{42}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        row = page.locator(f"#shards tr[data-shard='{shard42}']")
        expect(row.locator(".leader")).to_have_text("w1")
        pending = c.stats()["shards"][shard42]["pending"]
        expect(row.locator(".pending")).to_have_text(str(pending))
        expect(page.locator("#pending")).to_have_text("2")
        expect(page.locator("#workers tbody")).to_contain_text("w1")
        page.fill("#timer-id", "job:{43}")  # look a timer up by id
        page.click("#lookup button")
        expect(page.locator("#timer-table")).to_contain_text("job:{43}")
        expect(page.locator("#timer-state")).to_have_text("pending")
        row.click()  # the shard's next due timers; one of them opens in the Timer panel
        expect(page.locator("#due-title")).to_have_text(f"Next due on shard {shard42}")
        page.click("#due a[data-timer='job:{42}']")
        expect(page.locator("#timer-table")).to_contain_text("job:{42}:done")  # rendered
        expect(page.locator("#timer-state")).to_have_text("pending")
        expect(page.locator("#timer-id")).to_have_value("job:{42}")
        page.fill("#delay", "soon")  # bad input in the page: a clear message, nothing sent
        page.click("#reschedule")
        expect(page.locator("#message")).to_contain_text('"soon" is not a duration')
        page.on("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")
        expect(page.locator("#timer-state")).to_have_text("cancelled")
        expect(page.locator("#message")).to_contain_text("cancel done")
        expect(page.locator("#recent tbody")).to_contain_text("job:{42}")
        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        page.fill("#timer-id", "no-such-timer")
        page.click("#lookup button")
        expect(page.locator("#message")).to_contain_text("no timer 'no-such-timer'")
        browser.close()
    info = c.get("job:{42}")
    assert info is not None and info.state == "cancelled"
    assert shot.stat().st_size > 10_000
    if os.environ.get("TICKWHEEL_SCREENSHOT"):
        shutil.copy(shot, os.environ["TICKWHEEL_SCREENSHOT"])


def fired(c: TimerClient, name: str) -> int:
    info = c.schedules.get(name)
    return 0 if info is None else info.fired


def test_schedules_panel_in_a_browser(served: tuple[str, TimerClient]) -> None:
    """The schedules panel as an operator uses it: a schedule of every second is created
    in the form and fires (its count grows), is triggered, backfilled, paused, resumed
    and deleted from the page."""
    from playwright.sync_api import expect, sync_playwright  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("dialog", lambda d: d.accept("10s" if d.type == "prompt" else None))
        page.goto(url)
        page.fill("#sched-name", "heartbeat")
        page.fill("#sched-spec", "0 8 * * NOPE")  # a bad cron: said, nothing created
        page.click("#new-schedule button")
        expect(page.locator("#message")).to_contain_text("is not valid")
        assert c.schedules.get("heartbeat") is None
        page.fill("#sched-spec", "1s")
        page.click("#new-schedule button")
        expect(page.locator("#message")).to_contain_text("schedule heartbeat created")
        row = page.locator("#schedules tr[data-schedule='heartbeat']")
        expect(row.locator(".state")).to_have_text("active")
        expect(row).to_contain_text("every 1000 ms in UTC")
        wait_for(lambda: fired(c, "heartbeat") >= 2, 20, "two occurrences fired")
        expect(row.locator(".fired")).not_to_have_text("0")
        row.locator("button[data-act='trigger']").click()
        expect(page.locator("#message")).to_contain_text("heartbeat: trigger done")
        row.locator("button[data-act='backfill']").click()  # the 10 s before: those not fired
        expect(page.locator("#message")).to_contain_text("heartbeat: backfilled")
        row.locator("button[data-act='pause']").click()
        expect(row.locator(".state")).to_have_text("paused")
        paused = c.schedules.get("heartbeat")
        assert paused is not None and paused.state == "paused" and paused.armed is None
        row.locator("button[data-act='resume']").click()
        expect(row.locator(".state")).to_have_text("active")
        row.locator("button[data-act='delete']").click()
        expect(page.locator("#schedules tbody")).to_contain_text("no recurring schedules")
        browser.close()
    assert c.schedules.get("heartbeat") is None
    manual = [o for o in c.all_outcomes() if o.id.endswith("-manual")]
    assert len(manual) == 1 and manual[0].id.startswith("{heartbeat}@")
