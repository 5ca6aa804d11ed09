"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright).

A namespace with a running worker: the shard table shows the live leader and pending
counts; a timer is looked up, cancelled through the page (confirming the dialog) and
seen cancelled. The screenshot is saved under the test's temp dir (and, with
TICKWHEEL_SCREENSHOT=path, there too: the README's picture is made this way).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.conftest import dead_letter_expired, wait_for
from timer import Backoff, Handlers, Outcome, TimerClient
from timer.dashboard import create_app
from timer.testing import RedisServer, free_port
from timer.worker import Worker, WorkerSettings

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


def shoot(section: Any, name: str, tmp_path: Path) -> None:
    """A screenshot of a section of the page (checked to hold a picture); with
    TICKWHEEL_SCREENSHOTS=<dir>, copied there as dashboard-<name>.png (the docs' are)."""
    shot = tmp_path / f"dashboard-{name}.png"
    section.screenshot(path=str(shot))
    assert shot.stat().st_size > 5_000, name
    if os.environ.get("TICKWHEEL_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["TICKWHEEL_SCREENSHOTS"]) / shot.name)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the module's tests: a launch costs a second or two, and
    each test's pages get contexts of their own (cookies, storage), closed after it."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def opened(browser: Any) -> Iterator[Any]:
    """The shared browser for a block; the contexts (pages) the block opened close after."""
    before = set(browser.contexts)
    try:
        yield browser
    finally:
        for context in browser.contexts:
            if context not in before:
                context.close()


# Each view: its address and what shows it is open.
VIEWS = {
    "overview": ("", "#history-section"), "timers": ("timers", "#find-section"),
    "groups": ("groups", "#groups-section"), "dead": ("dead-letters", "#dead-section"),
    "schedules": ("schedules", "#schedules-section"), "workers": ("workers", "#workers-section"),
    "shards": ("shards", "#shards-section"),
}  # fmt: skip


def follow(page: Any, view: str) -> None:
    """Click the header's link to ``view``, as a person would: a real address (an href a
    middle-click opens, never "#"), after which the view is shown and marked current."""
    from playwright.sync_api import expect  # noqa: PLC0415

    link = page.locator(f"nav a[data-nav='{view}']")
    href = link.get_attribute("href") or ""
    path, part = VIEWS[view]
    assert href.split("?")[0] == "/" + path, (view, href)
    link.click()
    expect(page.locator(part)).to_be_visible()
    expect(link).to_have_attribute("aria-current", "page")
    assert page.url.split("?")[0].split("#")[0].endswith("/" + path), page.url


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on a free loopback port: its URL."""
    import uvicorn  # noqa: PLC0415

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    web = threading.Thread(target=server.run, daemon=True)
    web.start()
    try:
        wait_for(lambda: server.started, 20, "the dashboard to listen")
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        web.join(10)


@pytest.fixture
def served(redis_server: RedisServer, namespace: str) -> Iterator[tuple[str, TimerClient]]:
    """The dashboard on a free port (uvicorn in a thread) and a worker leading every shard."""

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=4)
    settings = WorkerSettings(worker_id="w1", history_every_ms=500)
    w = Worker(TimerClient.from_url(redis_server.url, namespace), settings)
    worker = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    worker.start()
    try:
        with serving(create_app(c)) as url:
            wait_for(lambda: all(v == "w1" for v in c.leaders().values()), 20, "the leases")
            yield url, c
    finally:
        w.stop()
        worker.join(15)
        w.client.close()
        c.close()


def test_overview_lookup_and_cancel_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    note = "<b>nightly</b> export"  # shown as text, never as markup
    c.schedule("job:{42}", 3_600_000, payload={"job": 42}, watch=["job:{42}:done"], note=note)
    for _ in range(2):  # a debounce window with a cap: both shown
        c.schedule("job:{43}", 3_600_000, debounce=True, max_total_ms=7_200_000)
    shard42 = c.shard_of("job:{42}")
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        expect(page.locator("#pending")).to_have_text("2")
        follow(page, "workers")
        expect(page.locator("#workers tbody")).to_contain_text("w1")
        follow(page, "dead")
        expect(page.locator("#dead tbody")).to_contain_text("no dead letters")
        expect(page.locator("#dead-pager")).to_be_hidden()  # one page: no pager (its flex
        # display once overrode the hidden attribute: "1-0 of 0" under an empty table)
        follow(page, "shards")
        row = page.locator(f"#shards tr[data-shard='{shard42}']")
        expect(row.locator(".leader")).to_have_text("w1")
        pending = c.stats()["shards"][shard42]["pending"]
        expect(row.locator(".pending")).to_have_text(str(pending))
        follow(page, "timers")
        page.fill("#timer-id", "job:{43}")  # look a timer up by id
        page.click("#lookup button")
        expect(page.locator("#timer-table")).to_contain_text("job:{43}")
        expect(page.locator("#timer-state")).to_have_text("pending")
        expect(page.locator("#timer-absorbed")).to_have_text("1 later call absorbed by this window")
        expect(page.locator("#timer-cap")).to_contain_text("never due after")
        follow(page, "shards")
        row.click()  # the shard's next due timers; one of them opens in the Timers view
        expect(page.locator("#due-title")).to_have_text(f"Next due on shard {shard42}")
        page.click("#due a[data-timer='job:{42}']")
        expect(page).to_have_url(re.compile(re.escape("/timers#timer=")))
        expect(page.locator("#timer-table")).to_contain_text("job:{42}:done")  # rendered
        expect(page.locator("#timer-note")).to_have_text(note)  # a declared field's own row
        expect(page.locator("#timer-state")).to_have_text("pending")
        expect(page.locator("#timer-id")).to_have_value("job:{42}")
        page.fill("#delay", "soon")  # bad input in the page: a clear message, nothing sent
        page.click("#reschedule")
        expect(page.locator("#message")).to_contain_text('"soon" is not a duration')
        page.on("dialog", lambda dialog: dialog.accept())
        page.click("#cancel")
        expect(page.locator("#timer-state")).to_have_text("cancelled")
        expect(page.locator("#timer-note")).to_have_text(note)  # kept with its outcome
        # its outcome keeps no watch keys: no row that says it had none
        expect(page.locator("#timer-table th", has_text="watch")).to_have_count(0)
        expect(page.locator("#message")).to_contain_text("cancel done")
        expect(page.locator("#recent tbody")).to_contain_text("job:{42}")
        follow(page, "overview")  # the overview's picture, as the guide shows it
        shot = tmp_path / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        follow(page, "timers")
        page.fill("#timer-id", "no-such-timer")
        page.click("#lookup button")
        expect(page.locator("#message")).to_contain_text('no timer "no-such-timer"')
    info = c.get("job:{42}")
    assert info is not None and info.state == "cancelled"
    assert shot.stat().st_size > 10_000
    if os.environ.get("TICKWHEEL_SCREENSHOT"):
        shutil.copy(shot, os.environ["TICKWHEEL_SCREENSHOT"])


def fired(c: TimerClient, name: str) -> int:
    info = c.schedules.get(name)
    return 0 if info is None else info.fired


def test_schedules_panel_in_a_browser(chromium: Any, served: tuple[str, TimerClient]) -> None:
    """The schedules panel as an operator uses it: a schedule of every second is created
    in the form and fires (its count grows), is triggered, backfilled, paused, resumed
    and deleted from the page."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("dialog", lambda d: d.accept("10s" if d.type == "prompt" else None))
        page.goto(url + "schedules")
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
        expect(row).to_contain_text("every 1s in UTC")
        wait_for(lambda: fired(c, "heartbeat") >= 2, 20, "two occurrences fired")
        expect(row.locator(".fired")).not_to_have_text("0")
        row.locator("button[data-act='trigger']").click()
        expect(page.locator("#message")).to_contain_text("heartbeat: trigger done")
        row.locator("button[data-act='backfill']").click()  # the 10 s before: those not fired
        expect(page.locator("#message")).to_contain_text("heartbeat: backfilled")
        row.locator("a[data-sched='heartbeat']").click()  # its own view, at its address
        expect(page.locator("#schedule")).to_be_visible()
        expect(page).to_have_url(re.compile(re.escape("schedule=heartbeat")))
        expect(page.locator("#sc-when")).to_have_text("every 1s in UTC")
        armed = c.schedules.get("heartbeat")
        assert armed is not None and armed.armed is not None
        expect(page.locator("#sc-armed a")).to_have_count(1)
        page.click("#schedule-close")
        expect(page.locator("#schedule")).to_be_hidden()
        row.locator("button[data-act='pause']").click()
        expect(row.locator(".state")).to_have_text("paused")
        paused = c.schedules.get("heartbeat")
        assert paused is not None and paused.state == "paused" and paused.armed is None
        row.locator("button[data-act='resume']").click()
        expect(row.locator(".state")).to_have_text("active")
        row.locator("button[data-act='delete']").click()
        expect(page.locator("#no-schedules")).to_be_visible()  # the form stays, no table
        expect(page.locator("#schedules")).to_be_hidden()
        # one sentence, on one line: its "; create one:" is not pushed onto the next
        expect(page.locator("#no-schedules")).to_have_text(
            "No recurring schedules yet; create one:"
        )
        tops = page.locator("#no-schedules").evaluate(ONE_LINE)
        assert tops[0] == tops[1], tops
    assert c.schedules.get("heartbeat") is None
    manual = [o for o in c.all_outcomes() if o.id.endswith("-manual")]
    assert len(manual) == 1 and manual[0].id.startswith("{heartbeat}@")


# The top of a paragraph's first words and of its last part (a span): the same line
ONE_LINE = """(p) => {
  const range = document.createRange();
  range.selectNodeContents(p.firstChild);
  return [range.getBoundingClientRect().top, p.lastElementChild.getBoundingClientRect().top];
}"""

LAYOUT_CHECK = """() => {
  const out = [];
  const width = document.documentElement.clientWidth;
  for (const box of document.querySelectorAll("section, .card")) {
    const name = box.id || box.querySelector("h2")?.textContent || box.className;
    const over = box.scrollWidth - box.clientWidth;
    if (over > 1) out.push(`${name} overflows by ${over}px`);
  }
  for (const b of document.querySelectorAll("button")) {
    const r = b.getBoundingClientRect();
    if (!r.width) continue;  // hidden
    const card = b.closest("section, .card, header").getBoundingClientRect();
    const out_of_card = r.left < card.left - 1 || r.right > card.right + 1;
    if (out_of_card || r.right > width + 1) {
      out.push(`button ${b.textContent} at ${r.left}-${r.right} in ${card.left}-${card.right}`);
    }
  }
  return out;
}"""


# Rows of the page's grid whose sections end short of its right edge (a column left empty).
ROWS_SHORT = """() => {
  const main = document.querySelector("main");
  const pad = parseFloat(getComputedStyle(main).paddingRight);
  const right = main.getBoundingClientRect().right - pad;
  const ends = {};
  for (const s of main.querySelectorAll("section")) {
    const r = s.getBoundingClientRect();
    if (!r.width || !s.checkVisibility()) continue;
    ends[Math.round(r.top)] = Math.max(ends[Math.round(r.top)] || 0, r.right);
  }
  return Object.entries(ends).filter(([, end]) => end < right - 2)
    .map(([top, end]) => `the row at ${top}px ends at ${Math.round(end)} of ${Math.round(right)}`);
}"""


def test_find_select_act_live_and_layout_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """The search box finds timers by glob and state; the ones selected are cancelled or
    rescheduled in bulk from the page. The page follows a live stream, not polling: a
    timer scheduled elsewhere shows up without a request of the page's. At 1280, 1440
    and 1920 px no section overflows and every button lies within its card and the
    viewport (and at 1920 px no row of sections leaves a column empty: the right third
    was); figures have labels and times their zone."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"tenant-7:{i}", "delay_ms": 3_600_000} for i in range(6)])
    c.schedule("other", 3_600_000)
    c.schedules.create("nightly-report-for-every-tenant", cron="0 2 * * *", tz="Europe/Paris")
    long_error = "downstream refused: " + "a very long reason without breaks " * 8
    c.schedule("poison", 0)
    assert c.wait("poison", timeout=20).outcome == "expired"
    assert dead_letter_expired(c, "billing-reconciliation-handlers", long_error)
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("dialog", lambda d: d.accept())
        polled: list[str] = []
        page.on("request", lambda r: polled.append(r.url) if "/api/overview" in r.url else None)
        page.goto(url)
        expect(page.locator("#pending")).to_have_text("8")  # with the schedule's armed one
        expect(page.locator("#dead tbody")).to_contain_text("downstream refused")
        before = len(polled)  # the first paint fetched once; from here on the stream updates
        c.schedule("arrived-later", 3_600_000)
        expect(page.locator("#pending")).to_have_text("9")
        assert len(polled) == before, "the page polled instead of following the stream"
        expect(page.locator("#per-minute")).to_contain_text("expired")
        expect(page.locator("#per-minute")).to_contain_text("cancelled")
        expect(page.locator("#updated")).to_contain_text("UTC")
        follow(page, "timers")

        page.fill("#find-match", "tenant-7:*")
        page.click("#find button")
        expect(page.locator("#found tbody tr")).to_have_count(6)
        expect(page.locator("#find-count")).to_have_text("6 shown")
        page.locator("input[data-found='tenant-7:0']").check()
        page.locator("input[data-found='tenant-7:1']").check()
        page.click("#bulk-cancel")
        expect(page.locator("#message")).to_contain_text("cancel: 2 of 2 done")
        assert c.timers.count("tenant-7:*", state="cancelled") == 2
        page.click("#found-all")
        page.fill("#bulk-delay", "2h")
        page.click("#bulk-reschedule")
        expect(page.locator("#message")).to_contain_text("reschedule: 4 of 4 done")
        later = c.server_time_ms() + 3_600_000
        assert all(t.deadline_ms > later for t in c.timers.scan("tenant-7:*"))
        page.select_option("#find-state", "cancelled")
        page.click("#find button")
        expect(page.locator("#found tbody tr")).to_have_count(2)
        expect(page.locator("#found tbody")).to_contain_text("UTC")

        for width in (1280, 1440, 1920):
            page.set_viewport_size({"width": width, "height": 900})
            follow(page, "timers")
            page.fill("#find-match", "*")
            page.select_option("#find-state", "any")
            page.click("#find button")
            expect(page.locator("#found tbody tr").first).to_be_visible()
            for view in VIEWS:  # every view: nothing overflows
                follow(page, view)
                assert page.evaluate(LAYOUT_CHECK) == [], (width, view)
                if width == 1920:  # every row full
                    assert page.evaluate(ROWS_SHORT) == [], (width, view)
                shot = tmp_path / f"dashboard-{view}-{width}.png"
                page.screenshot(path=str(shot), full_page=True)


def test_long_lists_page_and_times_read_as_durations_in_a_browser(
    chromium: Any,
    served: tuple[str, TimerClient],
) -> None:
    """Dead letters 20 and found timers 50 a page, with a pager (the page ran ~3,000 px
    down with no end); found timers soonest first whatever their shard; a time left
    reads "1h14m59s", as the CLI writes it (it read "4508.9 s", then "1 h 14 min"); the
    browser's /favicon.ico is an icon."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"p:{i}", "delay_ms": 3_600_000 + 1000 * (59 - i)} for i in range(60)])
    c.schedule("later", 4_500_000)
    c.schedule_many([{"id": f"d:{i}", "delay_ms": 0} for i in range(23)])
    for i in range(23):
        assert c.wait(f"d:{i}", timeout=20).outcome == "expired"
    assert dead_letter_expired(c, "pager", "refused")
    assert c.dead_letters_total() == 23
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        icon = page.goto(url + "favicon.ico")
        assert icon is not None and icon.status == 200 and "svg" in icon.headers["content-type"]
        page.goto(url + "dead-letters")
        expect(page.locator("#dead tbody tr")).to_have_count(20)
        expect(page.locator("#dead-pager")).to_contain_text("1\u201320 of 23")
        page.click("#dead-pager button:has-text('next')")
        expect(page.locator("#dead tbody tr")).to_have_count(3)
        follow(page, "timers")
        page.fill("#find-match", "p:*")
        page.click("#find button")
        expect(page.locator("#found tbody tr")).to_have_count(50)
        expect(page.locator("#found-pager")).to_contain_text("1\u201350 of 60")
        ids = page.locator("#found tbody a[data-timer]").all_inner_texts()
        assert ids[:3] == ["p:59", "p:58", "p:57"], ids[:3]  # soonest deadline first
        page.click("#found-pager button:has-text('next')")
        expect(page.locator("#found tbody tr")).to_have_count(10)
        page.fill("#timer-id", "later")
        page.click("#lookup button")
        expect(page.locator("#timer-table")).to_contain_text(re.compile(r"\(in 1h14m\d+s\)"))


AGES = [0, 1, 350, 999, 1_000, 1_500, 3_250, 9_999, 10_000, 10_999, 59_999, 60_000, 400_000,
        3_600_000, 4_499_400, 86_400_000, 93_784_005, 90_061_000]  # fmt: skip


def test_the_dashboard_writes_durations_as_the_cli_does(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """An age read `6 min 40 s` on the dashboard and `6m40s` in the CLI: the page's ages
    and times left are written as the CLI's age_text writes them (6m40s; 3s250ms; whole
    seconds from 10 s on), a setting as the CLI writes a duration (exact: 10s500ms)."""
    from timer.cli.output import age_text  # noqa: PLC0415
    from timer.durable.model.durations import format_duration_ms  # noqa: PLC0415

    url, _ = served
    with opened(chromium) as browser:
        page = browser.new_page()
        page.goto(url + "workers")
        said = page.evaluate(
            """async (values) => {
                const u = await import("/static/util.js");
                return values.map((v) => [u.ms(v), u.ms(-v), u.duration(v), u.until(-v)]);
            }""",
            [*AGES, 10_500],
        )
    for v, (age, negative, exact, until) in zip([*AGES, 10_500], said, strict=True):
        assert age == age_text(v), (v, age)
        assert negative == (f"-{age}" if v else "0s"), (v, negative)
        assert exact == (format_duration_ms(v) if v else "0s"), (v, exact)
        assert until == (f"overdue {age}" if v else "0s"), (v, until)
    assert said[AGES.index(400_000)][0] == "6m40s" and said[-1][2] == "10s500ms"


# The page's theme, and the worst contrast of text on its own background among the
# page's text boxes (WCAG's ratio: 4.5 for text that must be read).
THEME = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).map((v) => v / 255)
      .map((v) => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const back = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = getComputedStyle(e).backgroundColor;
      if (!c.startsWith("rgba(0, 0, 0, 0)")) return c;
    }
    return "rgb(255, 255, 255)";
  };
  let worst = Infinity, where = "";
  for (const el of document.querySelectorAll("h2, th, td, .card, .muted, header h1, #theme")) {
    if (!el.getBoundingClientRect().width) continue;
    const a = lum(getComputedStyle(el).color), b = lum(back(el));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < worst) { worst = ratio; where = el.tagName + "#" + el.id + "." + el.className; }
  }
  return {theme: document.documentElement.dataset.theme, body: lum(back(document.body)),
          worst: worst, where: where, button: document.getElementById("theme").textContent};
}"""


def test_dark_mode_follows_the_system_until_a_choice_which_sticks_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """A browser that prefers dark gets the dark theme at once, every text readable on its
    background (contrast at least 4.5, as in the light theme); the header's button
    switches, and the choice outlives a reload and the system's preference."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule("job:1", 3_600_000)
    with opened(chromium) as browser:
        dark = browser.new_context(color_scheme="dark", viewport={"width": 1920, "height": 1000})
        page = dark.new_page()
        page.goto(url)
        expect(page.locator("#pending")).to_have_text("1")
        got = page.evaluate(THEME)
        assert got["theme"] == "dark" and got["body"] < 0.05, got
        assert got["worst"] >= 4.5, got
        assert got["button"] == "light", got
        page.screenshot(path=str(tmp_path / "dashboard-dark.png"), full_page=True)
        page.click("#theme")
        got = page.evaluate(THEME)
        assert got["theme"] == "light" and got["body"] > 0.8 and got["worst"] >= 4.5, got
        page.reload()
        expect(page.locator("#pending")).to_have_text("1")
        assert page.evaluate(THEME)["theme"] == "light", "the choice did not outlive a reload"
        dark.close()
        light = browser.new_context(color_scheme="light")
        page = light.new_page()
        page.goto(url)
        expect(page.locator("#pending")).to_have_text("1")
        assert page.evaluate(THEME)["theme"] == "light"
        page.click("#theme")
        assert page.evaluate(THEME)["theme"] == "dark"
        light.close()


def test_a_view_has_an_address_and_the_back_button_returns_to_the_last_in_a_browser(
    chromium: Any,
    served: tuple[str, TimerClient],
) -> None:
    """A shard's next timers, a timer and a search are in the page's address: a link
    (one from before the page had views too) opens on its view, a bookmark (the address
    copied to a new page) reopens it, and the back and forward buttons move between the
    views and the things clicked in them."""
    from urllib.parse import quote  # noqa: PLC0415

    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    for i in range(4):
        c.schedule(f"job:{{{i}}}", 3_600_000 + i)
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "#timer=" + quote("job:{1}"))  # a link from before the views
        expect(page.locator("#timer")).to_contain_text("job:{1}")
        expect(page.locator("#timer-id")).to_have_value("job:{1}")
        expect(page).to_have_url(re.compile(re.escape("/timers#timer=")))  # the view that shows it
        follow(page, "shards")
        page.locator("#shards tr[data-shard='0']").click()
        expect(page.locator("#due-title")).to_have_text("Next due on shard 0")
        page.locator("#shards a[data-shard-link='1']").click()  # its number: a link
        expect(page.locator("#due-title")).to_have_text("Next due on shard 1")
        two = page.locator("#due a[data-timer]").first
        expect(two).to_be_visible()
        opening = two.inner_text()
        two.click()  # a timer of that shard, in the Timers view
        expect(page.locator("#timer-table")).to_contain_text(opening)
        page.fill("#timer-id", "job:{2}")
        page.click("#lookup button")
        expect(page.locator("#timer")).to_contain_text("job:{2}")
        page.go_back()
        expect(page.locator("#timer-table")).to_contain_text(opening)
        page.go_back()
        expect(page.locator("#due-title")).to_have_text("Next due on shard 1")
        expect(page.locator("#shards-section")).to_be_visible()
        page.go_back()
        expect(page.locator("#due-title")).to_have_text("Next due on shard 0")
        page.go_forward()
        expect(page.locator("#due-title")).to_have_text("Next due on shard 1")
        follow(page, "timers")
        page.fill("#find-match", "job:*")
        page.click("#find button")
        expect(page.locator("#found tbody tr")).to_have_count(4)
        page.click("#found a[data-timer='job:{3}']")  # in the same view: the search stays
        expect(page.locator("#timer-table")).to_contain_text("job:{3}")
        bookmark = page.url
        assert "find=job" in bookmark and "timer=job" in bookmark, bookmark
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(bookmark)  # the same view from its address alone
        expect(again.locator("#found tbody tr")).to_have_count(4)
        expect(again.locator("#find-match")).to_have_value("job:*")
        expect(again.locator("#timer")).to_contain_text("job:{3}")


# An action sent from the page's own script, as its button would (its CSRF token too).
CANCEL_FROM_THE_PAGE = """async () => (await fetch("/api/timers/job%3A%7B7%7D/cancel", {
  method: "POST", body: "{}",
  headers: {"X-CSRF-Token": decodeURIComponent(document.cookie.match(/tickwheel_csrf=([^;]*)/)[1]),
            "Content-Type": "application/json"},
})).status"""


def test_a_read_token_sees_the_page_and_is_refused_an_action_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """Signed in with a read token (`dashboard --tokens`), a user sees the timers but no
    action button, and an action sent from the page anyway is refused, changing nothing;
    a write token's page has the buttons and acts. A wrong token typed on the sign-in page
    gets that page again saying the token was not accepted (and not showing it)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    _, c = served
    c.schedule("job:{7}", 3_600_000)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [c.namespace], name="viewer")
    _, operator = tokens.create("write", [c.namespace], name="operator")
    with serving(create_app(c, tokens=tokens)) as url, opened(chromium) as browser:
        page = browser.new_page()
        page.goto(url)
        wrong = "tw_0123456789ab_" + "x" * 43
        page.fill("input[name=token]", wrong)
        page.click("button[type=submit]")
        expect(page.locator("[role=alert]")).to_contain_text("That token was not accepted")
        expect(page.locator("[role=alert]")).to_contain_text("tickwheel tokens list")
        assert wrong not in page.content()
        page.fill("input[name=token]", viewer)  # the form posts it: no token in any URL
        page.click("button[type=submit]")
        expect(page.locator("#read-only")).to_be_visible()
        assert viewer not in page.url and page.url.rstrip("/") == url.rstrip("/"), page.url
        page.goto(url + "#timer=" + "job%3A%7B7%7D")
        expect(page.locator("#timer")).to_contain_text("pending")
        expect(page.locator("#cancel")).to_be_hidden()
        for _ in range(2):  # two live events later (each its own time): still read-only
            shown = page.locator("#updated").inner_text()
            expect(page.locator("#updated")).not_to_have_text(shown)
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("#cancel")).to_be_hidden()
        status = page.evaluate(CANCEL_FROM_THE_PAGE)
        assert status == 403
        info = c.get("job:{7}")
        assert info is not None and info.state == "pending"
        other = browser.new_page()
        other.on("dialog", lambda d: d.accept())
        other.goto(url + "login?token=" + operator)
        other.goto(url + "#timer=" + "job%3A%7B7%7D")
        other.click("#cancel")
        expect(other.locator("#message")).to_contain_text("cancel done")
        info = c.get("job:{7}")
        assert info is not None and info.state == "cancelled"


def test_a_token_for_another_namespace_is_told_whose_it_is_not_shown_json_in_a_browser(
    chromium: Any, redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`dashboard --tokens FILE`: a token for another namespace typed on the sign-in page
    was let in, then the whole page was raw JSON (`{"error":"token … is not for
    namespace …"}`). The sign-in page shows again, saying whose namespaces the token is
    for, with a link to each; followed, the token signs in there (and the page's script
    loads: it was refused, a blank page). The menu offers only the namespaces the token
    is for; opening one it is not for (a bookmark) shows a page saying so, with the form,
    not JSON."""
    from playwright.sync_api import expect  # noqa: PLC0415

    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    other = TimerClient.from_url(redis_server.url, namespace + "-b")
    other.init(shards=2)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, theirs = tokens.create("read", [other.namespace], name="other team")
    try:
        with serving(create_app(c, tokens=tokens)) as url, opened(chromium) as browser:
            page = browser.new_page()
            page.goto(url)
            page.fill("input[name=token]", theirs)
            page.click("button[type=submit]")
            alert = page.locator("[role=alert]")
            expect(alert).to_contain_text(
                f'Token "other team" is not for namespace {namespace}: it is for '
                f"{other.namespace} (follow that link and sign in there with it)"
            )
            assert '"error"' not in page.content() and theirs not in page.content()
            assert not browser.contexts[-1].cookies(), "no cookie for a refused sign-in"
            alert.get_by_role("link", name=other.namespace).click()
            page.fill("input[name=token]", theirs)
            page.click("button[type=submit]")
            expect(page.locator("#namespace")).to_have_value(other.namespace)
            assert page.url == f"{url}?ns={other.namespace}", page.url
            # the menu offers only the token's namespace; one it is not for, opened by
            # its address (a bookmark), gets the page saying so
            expect(page.locator("#namespace option")).to_have_text([other.namespace])
            page.goto(f"{url}?ns={namespace}")
            expect(page.locator("[role=alert]")).to_contain_text(
                f"is not for namespace {namespace}"
            )
            assert '"error"' not in page.content()
            expect(page.locator("input[name=token]")).to_be_visible()
    finally:
        other.close()
        c.close()


def test_the_overview_says_no_live_worker_once_in_the_singular_in_a_browser(
    chromium: Any, redis_server: RedisServer, namespace: str
) -> None:
    """With no live worker the Overview said `no live worker while 1 timers are pending`,
    and said that one cause in three bullets (shards with no leader, no live worker, late
    sweeps): it is one item, linked to the Workers view, one timer in the singular and
    more in the plural."""
    from playwright.sync_api import expect  # noqa: PLC0415

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.schedule("job:{1}", deadline_ms=c.server_time_ms() - 60_000)  # its shard sweeps late
    try:
        with serving(create_app(c)) as url, opened(chromium) as browser:
            page = browser.new_page()
            page.goto(url)
            items = page.locator("#attention li")
            start = f"start one: tickwheel --namespace {namespace} worker"
            expect(items).to_have_text(
                [f"no live worker: 2 shards have no leader and 1 pending timer waits; {start}"]
            )
            expect(items.locator("a")).to_have_text(["no live worker"])
            assert items.locator("a").get_attribute("href") == "/workers"
            c.schedule("job:{2}", 3_600_000)  # the next live event says two
            expect(items).to_have_text(
                [f"no live worker: 2 shards have no leader and 2 pending timers wait; {start}"]
            )
    finally:
        c.close()


def test_a_sign_in_opens_the_page_and_timer_asked_for_and_lists_the_tokens_namespaces(
    chromium: Any, redis_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """`dashboard --tokens FILE`: a user who opened a shared link to a timer
    (/timers#timer=…, as the operations guide says to send) signed in and landed on the
    Overview, the timer lost. The sign-in, after a wrong token too, opens the page and the
    timer asked for: the fragment, never sent to the server, is carried by the sign-in
    page's one script (allowed by its hash alone). The namespace menu then lists only the
    namespaces the token may read (it offered every one; picking another's dropped the
    user at the sign-in page)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    if not redis_server.running:
        redis_server.restart()
    c = TimerClient.from_url(redis_server.url, namespace)
    c.init(shards=2)
    c.schedule("job:{1}", 3_600_000)
    other = TimerClient.from_url(redis_server.url, namespace + "-b")
    other.init(shards=2)
    tokens = TokenFile(tmp_path / "tokens.json")
    _, ours = tokens.create("read", [namespace], name="ours")
    link = "timers#timer=job%3A%7B1%7D"
    try:
        with serving(create_app(c, tokens=tokens)) as url, opened(chromium) as browser:
            page = browser.new_page()
            refused: list[str] = []  # what the page's policy blocked, if anything
            page.on("console", lambda m: refused.append(m.text) if m.type == "error" else None)
            page.goto(url + link)
            page.fill("input[name=token]", "tw_0123456789ab_" + "x" * 43)
            page.click("button[type=submit]")
            expect(page.locator("[role=alert]")).to_contain_text("That token was not accepted")
            page.fill("input[name=token]", ours)
            page.click("button[type=submit]")
            expect(page).to_have_url(url + link)
            expect(page.locator("#find-section")).to_be_visible()
            expect(page.locator("#timer-id")).to_have_value("job:{1}")
            expect(page.locator("#timer-state")).to_have_text("pending")
            assert ours not in page.url
            assert not [m for m in refused if "Content Security Policy" in m], refused
            options = page.locator("#namespace option")
            expect(options).to_have_count(1)
            expect(options).to_have_text(namespace)
    finally:
        other.close()
        c.close()


# Every control the page shows now (a button, a field, a menu, a box), named by its id,
# else by the id of what holds it, its kind and its text ("dead button[submit] drop").
VISIBLE_CONTROLS = """() => {
  const out = [];
  for (const el of document.querySelectorAll("button, input, select, textarea")) {
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height || getComputedStyle(el).visibility === "hidden") continue;
    if (el.id) { out.push(`#${el.id}`); continue; }
    const holder = el.parentElement.closest("[id]");
    const said = (el.textContent || el.placeholder || "").trim();
    out.push(`${holder ? holder.id : "?"} ${el.tagName.toLowerCase()}[${el.type}] ${said}`.trim());
  }
  return out;
}"""

# What a person who may only look can still use: each moves between views, searches,
# filters or changes how the page looks, and none of them sends anything that changes
# state. A control not listed here is taken for an action: a new one is refused until
# it is hidden from a read-only viewer or added here.
NOT_ACTIONS = frozenset({
    "#namespace", "#theme", "#history-period",
    "#find-match", "#find-state", "find button[submit] Search", "#find-more",
    "#timer-id", "lookup button[submit] Look up",
    "#df-group", "#df-error", "#df-match", "dead-filter button[submit] Filter", "#df-clear",
    "#group-close", "#worker-close", "#schedule-close", "#dl-close",
    "#os-kind", "#os-match", "#os-field", "#os-value", "#os-group", "#os-state", "#os-since",
    "outcome-search button[submit] Search", "#os-clear",
    "#pf-match", "#pf-field", "#pf-value", "#pf-prio", "pending-filter button[submit] Filter",
    "#pf-clear",
})  # fmt: skip
PAGER = re.compile(r"^[\w-]+-pager button\[submit\] (\u2039 previous|next \u203a)$")

# Actions in every view that has one: the walk must see each of them on a write token's
# page (so it reaches every view, and the hiding is what keeps them from a viewer).
ACTIONS = frozenset({
    "new-schedule button[submit] Create", "#sched-name",
    "schedules button[submit] pause", "schedules button[submit] trigger",
    "schedules button[submit] backfill", "schedules button[submit] delete",
    "#cancel", "#complete", "#delay", "#reschedule",
    "#found-all", "found input[checkbox]", "#bulk-cancel", "#bulk-reschedule",
    "#dead-all", "dead input[checkbox]", "dead button[submit] re-deliver",
    "dead button[submit] drop", "#db-redeliver-all", "#db-drop-sel",
    "#group-pause", "#dl-redeliver", "#dl-drop",
    "#pending-all", "pending-list input[checkbox]", "#pb-cancel", "#pb-complete", "#pb-delay",
    "#pb-reschedule",
})  # fmt: skip


def _walk(context: Any, url: str, views: list[tuple[str, str, str]]) -> dict[str, set[str]]:
    """Each view opened at its address in ``context`` (its cookies: who is signed in), once
    what it shows is there: the controls visible."""
    from playwright.sync_api import expect  # noqa: PLC0415

    seen: dict[str, set[str]] = {}
    for address, ready, text in views:
        page = context.new_page()
        page.goto(url + address)
        expect(page.locator("#schedules a[data-sched='nightly']")).to_be_attached()
        expect(page.locator("#dead a[data-dead-ref]").first).to_be_attached()
        expect(page.locator(ready)).to_be_visible()
        expect(page.locator(ready)).to_contain_text(text)
        seen[address or "the page"] = set(page.evaluate(VISIBLE_CONTROLS))
        page.close()
    return seen


def test_a_viewer_who_may_only_look_is_shown_no_action_in_any_view_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """Signed in with a read token, or on a `--read-only` dashboard, every view of the page
    (each shown at its address, with something in it to act on: a pending timer, a search
    that found it, a schedule, dead letters, a group, a worker) shows no control that
    changes anything: each visible one is navigation, search, filter or the theme. A
    write token's page, walked the same way, shows every action (so the walk sees them)."""
    from timer.httpapi.tokens import TokenFile  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    _, c = served
    c.schedule("d:1", 0)
    wait_for(lambda: c.stats()["pending"] == 0, 20, "the worker to fire d:1")
    assert dead_letter_expired(c, "billing", "the ledger refused it")
    c.schedule("job:{7}", 3_600_000)
    c.schedules.create("nightly", cron="0 3 * * *")
    [ref] = [d.ref for d in c.dead_letters()]
    views = [  # each view, then each of its things at its address (an older "#…" one too)
        ("", "#dead-count", "1"),
        ("", "#next-due", "job:{7}"),
        ("timers", "#recent", "d:1"),
        ("timers", "#pending-list", "job:{7}"),
        ("timers#pmatch=" + quote("job:*", safe="") + "&pprio=0", "#pending-list", "job:{7}"),
        ("groups", "#groups", "billing"),
        ("dead-letters", "#dead", "billing"),
        ("schedules", "#schedules", "nightly"),
        ("workers", "#workers", "w1"),
        ("shards", "#shards", "w1"),
        (f"shards#shard={c.shard_of('job:{7}')}", "#due", "job:{7}"),
        ("#timer=" + quote("job:{7}", safe=""), "#timer-state", "pending"),
        ("timers#find=" + quote("job:*", safe="") + "&state=pending", "#found", "job:{7}"),
        ("groups#group=billing", "#gh-dead", "1"),
        ("workers#worker=w1", "#wk-pid", str(os.getpid())),
        ("schedules#schedule=nightly", "#sc-when", "0 3 * * *"),
        ("dead-letters#dead=" + quote(ref, safe=""), "#dl-group", "billing"),
        ("#dgroup=billing", "#df-count", "1 dead letter matches"),
        ("timers#okind=expired", "#os-count", "found"),
    ]
    tokens = TokenFile(tmp_path / "tokens.json")
    _, viewer = tokens.create("read", [c.namespace], name="viewer")
    _, operator = tokens.create("write", [c.namespace], name="operator")
    shown: dict[str, dict[str, set[str]]] = {}
    with opened(chromium) as browser:
        with serving(create_app(c, tokens=tokens)) as url:
            for who, token in (("a read token", viewer), ("a write token", operator)):
                signed_in = browser.new_context(viewport={"width": 1400, "height": 900})
                signed_in.new_page().goto(url + "login?token=" + token)
                shown[who] = _walk(signed_in, url, views)
                signed_in.close()  # its live streams end before the server stops
        with serving(create_app(c, read_only=True)) as url:
            anyone = browser.new_context(viewport={"width": 1400, "height": 900})
            shown["--read-only"] = _walk(anyone, url, views)
            anyone.close()
    seen_by_writer = set().union(*shown["a write token"].values())
    assert seen_by_writer >= ACTIONS, sorted(ACTIONS - seen_by_writer)
    for who in ("a read token", "--read-only"):
        actions: dict[str, list[str]] = {}  # a control that is not known harmless: its views
        for view, keys in shown[who].items():
            for key in keys - NOT_ACTIONS:
                if not PAGER.match(key):
                    actions.setdefault(key, []).append(view)
        assert not actions, f"shown to {who}: {actions}"


SIXTY_POINTS = re.compile(r"^M[\d.]+,[\d.]+(L[\d.]+,[\d.]+){59}$")


def test_the_history_is_charted_and_survives_a_dashboard_restart_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """30 timers expire (the worker adds them to the history) and a runner handles them
    (it adds those when it stops): the page's totals say 30 and 30 and its charts draw
    them, every count marked as approximate with why (the scheduled heard over pub/sub,
    the expired short of what a worker killed before its flush counted). The dashboard
    is stopped and another started: the page it serves shows the same, read from Redis
    (nothing of it was in the first dashboard's memory)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    _, c = served
    c.schedule_many([{"id": f"h:{i}", "delay_ms": 0} for i in range(30)])
    runner = Handlers(c, group="web")
    runner.add("expired", lambda o: None)
    wait_for(lambda: c.stats()["pending"] == 0, 20, "the worker to fire the 30")
    assert runner.run(stop_when_idle=True)

    def totals() -> tuple[int, int]:
        minutes = c.history(60)
        return sum(m.expired for m in minutes), sum(m.handled for m in minutes)

    wait_for(lambda: totals() == (30, 30), 20, "the worker's and the runner's additions")
    with opened(chromium) as browser:
        for run in ("first", "restarted"):
            with serving(create_app(c)) as url:  # a dashboard process of its own
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(url)
                expect(page.locator("#ht-expired")).to_have_text("≈30")
                expect(page.locator("#ht-handled")).to_have_text("≈30")
                expect(page.locator("#ht-failed")).to_have_text("≈0")
                # each marked as approximate, with why: heard over pub/sub, or flushed
                # every few seconds (a kill -9 loses the last seconds' counts)
                expect(page.locator("#ht-scheduled")).to_have_text(re.compile(r"^≈\d+$"))
                expect(page.locator("#ht-scheduled")).to_have_attribute(
                    "title", re.compile("no leader heard")
                )
                expect(page.locator("#ht-expired")).to_have_attribute(
                    "title", re.compile("killed .* before its flush loses the counts")
                )
                keys = page.locator("#key-throughput .key")
                expect(keys.filter(has_text="scheduled")).to_have_text("scheduled ≈")
                expect(keys.filter(has_text="expired")).to_have_text("expired ≈")
                expect(keys.filter(has_text="expired")).to_have_attribute(
                    "title", re.compile("before its flush")
                )
                drawn = page.locator("#chart-throughput path[data-series='expired']")
                expect(drawn).to_have_attribute(
                    "d", re.compile(r"^M[\d.]+,[\d.]+(L[\d.]+,[\d.]+){59}$")
                )
                expect(page.locator("#key-lateness")).to_contain_text("p99")
                page.select_option("#history-period", "1440")
                expect(page.locator("#throughput-caption")).to_have_text("per 10 minutes")
                expect(page.locator("#ht-expired")).to_have_text("≈30")
                if run == "first":
                    page.select_option("#history-period", "60")
                    expect(page.locator("#throughput-caption")).to_have_text("per minute")
                    shoot(page.locator("#history-section"), "history", tmp_path)
                page.close()


def test_a_dead_letter_opens_whole_at_its_address_and_is_dropped_from_it_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """A dead letter's ref opens its own view (its address says which): group, timer,
    attempts, the error with its traceback's frames, the payload. Dropping it there asks
    first, closes the view and leaves one dead letter fewer in Redis."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"d:{i}", "delay_ms": 0, "payload": {"job": i}} for i in range(2)])
    wait_for(lambda: c.stats()["pending"] == 0, 20, "the worker to fire both")

    def fail(o: Outcome) -> None:
        raise RuntimeError("the ledger is down" if o.attempt == 1 else "the ledger refused it")

    twice = Handlers(c, group="billing", max_attempts=2, backoff=Backoff(initial_s=0.01))
    twice.add("expired", fail)
    assert twice.run(stop_when_idle=True)
    assert c.dead_letters_total() == 2
    ref = c.dead_letters()[0].ref
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "dead-letters")
        page.click(f"#dead a[data-dead-ref='{ref}']")
        expect(page.locator("#dead-letter")).to_be_visible()
        expect(page).to_have_url(re.compile(re.escape(f"dead={quote(ref, safe='')}")))
        expect(page.locator("#dl-group")).to_have_text("billing")
        expect(page.locator("#dl-attempts")).to_have_text("2")
        expect(page.locator("#dl-error")).to_contain_text("RuntimeError: the ledger refused it")
        expect(page.locator("#dl-error")).to_contain_text("in fail")  # the handler's frame
        earlier = page.locator("#dl-earlier tbody tr")  # every attempt's error, not the last only
        expect(earlier).to_have_count(1)
        expect(earlier.first).to_contain_text("RuntimeError: the ledger is down")
        expect(page.locator("#dl-payload")).to_contain_text('"job"')
        shoot(page.locator("#dead-letter"), "dead-letter", tmp_path)
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(page.url)  # the same view from its address alone
        expect(again.locator("#dl-group")).to_have_text("billing")
        again.close()
        page.on("dialog", lambda dialog: dialog.accept())
        page.click("#dl-drop")
        expect(page.locator("#message")).to_contain_text(f"{ref}: drop done")
        expect(page.locator("#dead-letter")).to_be_hidden()
        expect(page.locator("#dead-count")).to_have_text("1")
    assert c.dead_letters_total() == 1 and c.dead_letter(ref) is None


def test_a_group_opens_at_its_address_with_its_consumers_and_history_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """A consumer group's name opens its own view: what it owes (as Redis says: the one
    outcome its consumer m2 holds), its consumers, and its own history (the 5 a runner
    handled before, not the other group's dead letters); the address names the group,
    and a bookmark reopens it."""

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"g:{i}", "delay_ms": 0} for i in range(5)])
    wait_for(lambda: c.stats()["pending"] == 0, 20, "the worker to fire the 5")
    ok = Handlers(c, group="mailer", consumer="m1")
    ok.add("expired", lambda o: None)
    assert ok.run(stop_when_idle=True)  # it adds its 5 to the history as it stops, and leaves
    assert dead_letter_expired(c, "audit", "no audit log")
    holding, release = threading.Event(), threading.Event()

    def hold(o: Outcome) -> None:
        holding.set()
        release.wait(20)

    waiting = Handlers(c, group="mailer", consumer="m2")  # a consumer holding one outcome
    waiting.add("expired", hold)
    thread = threading.Thread(target=waiting.run, kwargs={"handle_signals": False}, daemon=True)
    thread.start()
    c.schedule("g:held", 0)
    wait_for(holding.is_set, 20, "consumer m2 to hold g:held")
    try:
        [mailer] = [g for g in c.groups() if g.name == "mailer"]
        assert mailer.pending == 1
        _group_page(chromium, url, mailer, tmp_path)
    finally:
        release.set()
        waiting.stop()
        thread.join(15)


def _group_page(chromium: Any, url: str, mailer: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect  # noqa: PLC0415

    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "groups")
        row = page.locator("#groups tr[data-group-row='mailer']")  # the list: lag first
        expect(row.locator(".waiting")).to_have_text(str(mailer.lag))
        expect(row.locator(".in-hand")).to_have_text(str(mailer.pending))
        expect(row.locator(".dead")).to_have_text("0")
        expect(row.locator(".later")).to_have_text("0")  # in a handler: no Later asked
        expect(row.locator(".runners")).to_contain_text("m2 (1)")
        audit = page.locator("#groups tr[data-group-row='audit']")
        expect(audit.locator(".dead")).to_have_text("5")
        heads = page.locator("#groups thead th").all_inner_texts()
        assert heads[:7] == [
            "group", "waiting", "in hand", "retrying", "later", "dead letters", "paused",
        ]  # fmt: skip
        page.click("#groups a[data-group='mailer']")
        expect(page.locator("#group")).to_be_visible()
        expect(page).to_have_url(re.compile(re.escape("group=mailer")))
        expect(page.locator("#group-name")).to_have_text("mailer")
        expect(page.locator("#gs-pending")).to_have_text(str(mailer.pending))
        expect(page.locator("#group-consumers")).to_contain_text("m2")
        # a runner killed before its flush would leave them short: marked, with why
        expect(page.locator("#gh-handled")).to_have_text("≈5")
        expect(page.locator("#gh-handled")).to_have_attribute("title", re.compile("killed"))
        expect(page.locator("#gh-dead")).to_have_text("≈0")  # the audit group's, not its own
        shoot(page.locator("#group"), "group", tmp_path)
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(url + "#group=audit")
        expect(again.locator("#gh-dead")).to_have_text("≈5")
        expect(again.locator("#gh-handled")).to_have_text("≈0")
        again.click("#group-close")
        expect(again.locator("#group")).to_be_hidden()


def test_dead_letters_filtered_ticked_and_acted_on_at_the_confirmed_count_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """The dead letters a filter selects (its address says which), one ticked and dropped,
    then all re-delivered: each confirmation says how many. One more that matches by
    the time the person says yes is refused whole (nothing re-delivered) and the new
    count shown; confirmed again, all go, and Redis agrees at each step."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"d:{i}", "delay_ms": 0} for i in range(4)])
    wait_for(lambda: c.stats()["pending"] == 0, 20, "the worker to fire the 4")
    assert dead_letter_expired(c, "billing", "the ledger refused it")
    assert dead_letter_expired(c, "audit", "no audit log")
    assert c.dead_letters_total() == 8
    said: list[str] = []

    def yes(dialog: Any) -> None:
        said.append(dialog.message)
        dialog.accept()

    def one_more_then_yes(dialog: Any) -> None:  # a letter that matches lands meanwhile
        c.schedule("d:late", 60_000)
        c.cancel("d:late")
        late = Handlers(c, group="billing", max_attempts=1)
        late.add("cancelled", lambda o: (_ for _ in ()).throw(RuntimeError("ledger down")))
        assert late.run(stop_when_idle=True)
        yes(dialog)

    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "dead-letters")
        page.fill("#df-group", "billing")
        page.fill("#df-error", "LEDGER")
        page.click("#dead-filter button[type=submit]")
        expect(page.locator("#df-count")).to_have_text("4 dead letters match")
        expect(page.locator("#dead tbody tr")).to_have_count(4)
        expect(page).to_have_url(re.compile(re.escape("dgroup=billing")))
        expect(page).to_have_url(re.compile(re.escape("derror=LEDGER")))
        first = c.dead_letters("billing")[0].ref
        page.check(f"input[data-dead-tick='{first}']")
        page.once("dialog", yes)
        page.click("#db-drop-sel")
        expect(page.locator("#message")).to_contain_text("drop: 1 of 1 done")
        assert said == ["Drop 1 selected dead letter?"]
        expect(page.locator("#df-count")).to_have_text("3 dead letters match")
        assert c.dead_letter(first) is None and c.dead_letters_total() == 7

        page.once("dialog", one_more_then_yes)
        page.click("#db-redeliver-all")
        refused = "4 dead letters are selected now, not the 3"
        expect(page.locator("#message")).to_contain_text(refused)
        assert said[-1] == "Re-deliver all 3 dead letters matching group billing, error LEDGER?"
        assert len(c.dead_letters("billing")) == 4  # refused whole: none re-delivered
        expect(page.locator("#df-count")).to_have_text("4 dead letters match")
        shoot(page.locator("#dead-filter").locator(".."), "dead-filter", tmp_path)

        page.once("dialog", yes)
        page.click("#db-redeliver-all")
        expect(page.locator("#message")).to_contain_text("redeliver: 4 of 4 done")
        assert said[-1] == "Re-deliver all 4 dead letters matching group billing, error LEDGER?"
        expect(page.locator("#df-count")).to_have_text("0 dead letters match")
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(url + "#dgroup=audit")  # a filter from its address alone
        expect(again.locator("#df-count")).to_have_text("4 dead letters match")
        expect(again.locator("#df-group")).to_have_value("audit")
        again.click("#df-clear")
        expect(again.locator("#df-count")).to_have_text("")
        expect(again.locator("#dead tbody tr")).to_have_count(4)
    assert c.dead_letters("billing") == [] and c.dead_letters_total() == 4


def test_a_group_is_paused_and_resumed_from_its_view_in_a_browser(
    chromium: Any,
    served: tuple[str, TimerClient],
) -> None:
    """Pause asks first, then the group's view and its row say paused and by whom; its
    running runner takes nothing new (Redis: the outcomes wait as lag) until resume is
    clicked, and then it handles them."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    seen: list[str] = []
    h = Handlers(c, group="mailer")
    h.add("cancelled", lambda o: seen.append(o.id))
    runner = threading.Thread(target=h.run, kwargs={"handle_signals": False}, daemon=True)
    runner.start()
    said: list[str] = []

    def yes(dialog: Any) -> None:
        said.append(dialog.message)
        dialog.accept()

    try:
        wait_for(lambda: [g.name for g in c.groups()] == ["mailer"], 20, "the group")
        with opened(chromium) as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url + "#group=mailer")
            page.once("dialog", yes)
            page.click("#group-pause")
            expect(page.locator("#message")).to_contain_text("mailer: paused")
            assert said == ["Pause group mailer? Its runners take nothing new until resumed."]
            expect(page.locator("#group-paused")).to_contain_text("paused by dashboard")
            paused = page.locator("#groups tr[data-group-row='mailer'] .paused-by")
            expect(paused).to_have_text("paused by dashboard")
            expect(page.locator("#group-resume")).to_be_visible()
            wait_for(lambda: h.stats.paused, 10, "the runner to see the pause")
            for tid in ("p:1", "p:2"):
                c.schedule(tid, 60_000)
                c.cancel(tid)
            wait_for(lambda: any(g.lag == 2 for g in c.groups()), 10, "two outcomes waiting")
            asked = h.stats.pause_checks
            wait_for(lambda: h.stats.pause_checks >= asked + 2, 10, "two more rounds")
            assert seen == [] and c.groups()[0].lag == 2
            page.click("#group-resume")
            expect(page.locator("#message")).to_contain_text("mailer: resumed")
            wait_for(lambda: sorted(seen) == ["p:1", "p:2"], 20, "both handled after resume")
            expect(page.locator("#group-pause")).to_be_visible()
            expect(page.locator("#group-paused")).to_have_text("")
    finally:
        h.stop()
        runner.join(15)


def test_a_worker_opens_at_its_address_with_what_it_says_of_itself_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient], tmp_path: Path
) -> None:
    """A worker's name opens its view: version, host and pid (this process's: the worker
    runs in a thread here), its heartbeat, the four shards it leads, no error; the
    address names it and a bookmark reopens it."""
    from playwright.sync_api import expect  # noqa: PLC0415

    from timer import __version__  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    wait_for(lambda: "w1" in c.worker_cards(), 20, "the worker's card")
    # the view lists the shards whose lease it holds: all four, on a busy machine too
    wait_for(lambda: list(c.leaders().values()).count("w1") == 4, 30, "w1 leading four shards")
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "workers")
        page.click("#workers a[data-worker='w1']")
        expect(page.locator("#worker")).to_be_visible()
        expect(page).to_have_url(re.compile(re.escape("worker=w1")))
        expect(page.locator("#wk-version")).to_have_text(__version__)
        expect(page.locator("#wk-host")).to_have_text(socket.gethostname())
        expect(page.locator("#wk-pid")).to_have_text(str(os.getpid()))
        expect(page.locator("#worker-shards tbody tr")).to_have_count(4)
        expect(page.locator("#worker-error")).to_have_text("none since it started")
        expect(page.locator("#worker-gone")).to_be_hidden()
        shoot(page.locator("#worker"), "worker", tmp_path)
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(url + "#worker=w1")
        expect(again.locator("#wk-host")).to_have_text(socket.gethostname())
        again.click("#worker-close")
        expect(again.locator("#worker")).to_be_hidden()
        # a live refresh's answer that comes after a close does not open the view again
        again.goto(url + "workers#worker=w1")
        expect(again.locator("#wk-host")).to_have_text(socket.gethostname())
        before = int(again.evaluate("document.body.dataset.workerAnswers"))
        held: list[Any] = []
        again.route("**/api/worker?*", lambda route: held.append(route))  # noqa: PLW0108 (playwright wraps a Python function, not a bound builtin)
        with again.expect_request("**/api/worker?*"):
            pass  # the next live event asks for the open worker again: held
        again.click("#worker-close")
        expect(again.locator("#worker")).to_be_hidden()
        for route in held:
            route.continue_()
        # the held answers came in (at least: one asked before the route was set may
        # have come in since `before` was read, on a busy machine), and none reopened it
        answered = before + len(held)
        # polled from here: the page's CSP (script-src 'self') refuses the string a
        # wait_for_function polls with (evaluate goes through the debugger)
        wait_for(
            lambda: int(again.evaluate("document.body.dataset.workerAnswers")) >= answered,
            20,
            "the held worker answers to come in",
        )
        expect(again.locator("#worker")).to_be_hidden()


def test_outcomes_are_searched_by_kind_id_and_payload_field_in_a_browser(
    chromium: Any,
    served: tuple[str, TimerClient],
) -> None:
    """A search by kind, timer glob and a payload field shows what Redis holds that
    matches, newest first, with links to each timer; its address reopens it; clearing
    it brings back the live list."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    for tid, tenant in (("order:1", "acme"), ("order:2", "beta"), ("order:3", "acme")):
        c.schedule(tid, 60_000, payload={"tenant": tenant})
        c.cancel(tid)
    c.schedule("order:4", 60_000, payload={"tenant": "acme"})
    c.complete("order:4")
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "timers")
        page.select_option("#os-kind", "cancelled")
        page.fill("#os-match", "order:*")
        page.fill("#os-field", "tenant")
        page.fill("#os-value", "acme")
        page.click("#outcome-search button[type=submit]")
        expect(page.locator("#os-count")).to_have_text("2 found")
        rows = page.locator("#recent tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.nth(0)).to_contain_text("order:3")  # newest first
        expect(rows.nth(1)).to_contain_text("order:1")
        expect(page).to_have_url(re.compile(re.escape("okind=cancelled")))
        expect(page).to_have_url(re.compile(re.escape("ovalue=acme")))
        again = browser.new_page(viewport={"width": 1400, "height": 900})
        again.goto(page.url)
        expect(again.locator("#os-count")).to_have_text("2 found")
        expect(again.locator("#os-field")).to_have_value("tenant")
        again.click("#os-clear")
        expect(again.locator("#os-count")).to_have_text("")
        expect(again.locator("#recent tbody tr")).to_have_count(4)
        g = c.consumer("mailer", "m1")  # a group holding three of the four, one handled
        g.ensure()
        held = g.read(10, None)
        assert len(held) == 4
        g.ack(next(d for d in held if d.outcome.id == "order:2"))
        again.goto(url + "#ogroup=mailer&ostate=in_hand")
        expect(again.locator("#os-count")).to_have_text("3 found")
        expect(again.locator("#os-state")).to_have_value("in_hand")
        expect(again.locator("#recent")).not_to_contain_text("order:2")


def test_every_view_opens_at_its_address_and_its_links_are_real_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """Each view (Overview, Timers, Groups, Dead letters, Schedules, Workers, Shards)
    opens at its own address with its header entry marked, running under the page's
    policy with nothing refused; each header entry is a real href that a click follows
    and the back button undoes; a middle-click on a link opens its address in a new tab
    and leaves the page where it was."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule("d:1", 0)
    assert c.wait("d:1", timeout=20).outcome == "expired"
    assert dead_letter_expired(c, "billing", "the ledger refused it")
    refused: list[str] = []
    with opened(chromium) as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.on("console", lambda m: refused.append(m.text) if "Security" in m.text else None)
        page = context.new_page()
        page.on("pageerror", lambda e: refused.append(str(e)))
        for view, (path, part) in VIEWS.items():
            page.goto(url + path)
            expect(page.locator(part)).to_be_visible()
            entry = page.locator(f"nav a[data-nav='{view}']")
            expect(entry).to_have_attribute("aria-current", "page")
            others = [p for v, (_, p) in VIEWS.items() if v != view and p != part]
            for other in others:
                expect(page.locator(other)).to_be_hidden()
        page.goto(url)
        rendered = page.evaluate("""() => new Promise((done) => addEventListener(
            "tickwheel:rendered", (e) => done(e.detail), {once: true}))""")
        assert rendered >= 0  # a live event drawn, and how long it took (the benchmark's)
        hrefs = page.locator("nav a").evaluate_all("(a) => a.map((x) => x.getAttribute('href'))")
        assert len(hrefs) == 7 and "#" not in hrefs and all(h.startswith("/") for h in hrefs), hrefs
        last = "overview"
        for view in ("groups", "dead", "timers", "schedules", "workers", "shards"):
            follow(page, view)
            page.go_back()
            expect(page.locator(VIEWS[last][1])).to_be_visible()
            page.go_forward()
            expect(page.locator(VIEWS[view][1])).to_be_visible()
            last = view
        follow(page, "groups")
        wait_for(lambda: any(g.name == "billing" for g in c.groups()), 10, "the group")
        link = page.locator("#groups a[data-group='billing']")
        expect(link).to_have_attribute("href", "/groups#group=billing")
        before = page.url
        with context.expect_page() as tab:
            link.click(button="middle")
        tab.value.wait_for_load_state()
        assert tab.value.url == url + "groups#group=billing", tab.value.url
        expect(tab.value.locator("#group-name")).to_have_text("billing")
        assert page.url == before  # the page itself did not move
        expect(page.locator("#group")).to_be_hidden()
        context.close()
    assert refused == [], refused


def _listed(page: Any, table: str) -> list[str]:
    """The timer ids a table lists, in its order."""
    ids: list[str] = page.locator(f"#{table} a[data-timer]").evaluate_all(
        "(a) => a.map((x) => x.dataset.timer)"
    )
    return ids


def test_a_live_update_keeps_the_rows_links_so_a_click_during_one_still_opens_it(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """The live stream redraws the timers due next every second (their countdowns
    change). A redraw keeps each row's link node, so a click whose press lands before one
    and whose release after still opens the link: it once replaced the rows, the release
    fell on a new node and the click was lost (a browser test saw it, 1 run in many)."""
    from playwright.sync_api import expect  # noqa: PLC0415

    url, c = served
    now = c.server_time_ms()
    assert not [
        r
        for r in c.schedule_many(
            [{"id": f"job:{i}", "deadline_ms": now + 600_000 + i * 1000} for i in range(3)]
        )
        if isinstance(r, Exception)
    ]
    with opened(chromium) as browser:
        page = browser.new_page()
        page.goto(url)
        first = page.locator("#next-due a[data-timer='job:0']")
        expect(first).to_be_visible()
        countdown = page.locator("#next-due td.num").first
        was = countdown.text_content()
        page.evaluate("window.__link = document.querySelector(\"#next-due a[data-timer='job:0']\")")
        expect(countdown).not_to_have_text(was or "")  # redrawn with a new countdown
        assert page.evaluate("window.__link.isConnected"), "the redraw replaced the link"
        first.hover()
        page.mouse.down()
        expect(countdown).not_to_have_text(countdown.text_content() or "")  # one more
        page.mouse.up()
        expect(page.locator("#timer-state")).to_have_text("pending")
        expect(page).to_have_url(re.compile(re.escape("/timers#timer=job%3A0")))


def test_the_dashboard_opens_on_the_timers_due_next_and_pages_them_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """On a namespace with timers, the page opened at its root shows the timers due
    next, soonest first whatever their shard, with no click; a timer's link is a real
    address that opens it in the Timers view, and back returns. The Timers view lists
    them all a page at a time (some due at the same ms on several shards), the next page
    going on where the first ended, each at its own address; a filter narrows them."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    now = c.server_time_ms()
    items: list[dict[str, Any]] = [
        {"id": f"job:{i}", "deadline_ms": now + 600_000 + 7_919 * i % 50_000, "priority": i % 3}
        for i in range(52)
    ]
    items += [{"id": f"same:{i}", "deadline_ms": now + 620_000} for i in range(8)]
    assert not [r for r in c.schedule_many(items) if isinstance(r, Exception)]
    order = [x["id"] for x in sorted(items, key=lambda x: (x["deadline_ms"], x["id"]))]
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)
        expect(page.locator("#next-due a[data-timer]")).to_have_count(10)
        assert _listed(page, "next-due") == order[:10]
        first = page.locator(f"#next-due a[data-timer='{order[0]}']")
        href = first.get_attribute("href") or ""
        assert href.startswith("/timers#timer="), href
        first.click()
        expect(page.locator("#timer-state")).to_have_text("pending")
        expect(page.locator("#timer-table")).to_contain_text(order[0])
        expect(page).to_have_url(re.compile(re.escape("/timers#timer=")))
        page.go_back()
        expect(page.locator("#next-due")).to_be_visible()
        assert page.url == url, page.url
        follow(page, "timers")
        expect(page.locator("#pending-list a[data-timer]")).to_have_count(50)
        assert _listed(page, "pending-list") == order[:50]
        next_page = page.locator("#pending-next")
        assert (next_page.get_attribute("href") or "").startswith("/timers#after="), "a real href"
        next_page.click()
        expect(page.locator("#pending-list a[data-timer]")).to_have_count(10)
        assert _listed(page, "pending-list") == order[50:]
        expect(page.locator("#pending-next")).to_be_hidden()
        page.locator(f"#pending-list a[data-timer='{order[55]}']").click()  # and back
        expect(page.locator("#timer-table")).to_contain_text(order[55])
        page.go_back()
        expect(page.locator("#timer-table")).to_be_hidden()
        assert _listed(page, "pending-list") == order[50:]
        page.go_back()  # the first page again
        expect(page.locator("#pending-list a[data-timer]")).to_have_count(50)
        page.fill("#pf-match", "same:*")
        page.fill("#pf-prio", "0")
        page.click("#pending-filter button[type=submit]")
        expect(page.locator("#pending-list a[data-timer]")).to_have_count(8)
        assert _listed(page, "pending-list") == [f"same:{i}" for i in range(8)]
        page.fill("#pf-prio", "high")  # refused in the page, nothing asked
        page.click("#pending-filter button[type=submit]")
        expect(page.locator("#message")).to_contain_text('"high" is not a priority')


def test_a_schedules_armed_occurrence_is_listed_as_its_next_and_cannot_be_ticked_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """The Timers view lists a schedule's armed occurrence as that schedule's next, a
    link to the schedule's view, with no tick box: ticking every timer and cancelling
    them cancels the user's timer and leaves the schedule its occurrence armed."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    armed = c.schedules.create("nightly", cron="0 3 * * *").armed
    assert armed is not None
    c.schedule("job:{1}", 3_600_000)
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(url)
        follow(page, "timers")
        rows = page.locator("#pending-list tbody tr")
        expect(rows).to_have_count(2)
        own = rows.filter(has=page.locator("a[data-sched='nightly']"))
        expect(own).to_contain_text("next of schedule nightly")
        expect(own.locator("input[type=checkbox]")).to_have_count(0)
        expect(page.locator("#pending-count")).to_contain_text("a schedule's next occurrence")
        expect(page.locator("input[data-pending]")).to_have_count(1)
        page.check("#pending-all")
        page.click("#pb-cancel")
        expect(page.locator("#message")).to_contain_text("cancel: 1 of 1 done")
        own.locator("a[data-sched='nightly']").click()
        expect(page).to_have_url(re.compile(re.escape("schedule=nightly")))
    timer = c.get("job:{1}")
    assert timer is not None and timer.state == "cancelled"
    after = c.schedules.get("nightly")
    assert after is not None and after.armed == armed
    occurrence = c.get(armed)
    assert occurrence is not None and occurrence.state == "pending"


# Each text of each chart: its box, in the chart's own units and on the screen, against
# the box of the SVG that draws it ("60,000" once read "0,000": cut at the left).
LABELS_OUTSIDE = """async () => {
  const {chart} = await import("/static/chart.js");
  const out = [];
  const points = Array.from({length: 60}, (_, i) => ({at_ms: Date.UTC(2025, 0, 1, 12, i),
    lateness_p50_ms: 900 * i, lateness_p99_ms: i === 30 ? 60000 : 1000 * i}));
  chart("chart-lateness", points, ["lateness_p50_ms", "lateness_p99_ms"]);
  for (const svg of document.querySelectorAll("svg.chart")) {
    if (!svg.checkVisibility()) continue;
    const [x0, y0, w, h] = svg.getAttribute("viewBox").split(" ").map(Number);
    const outer = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll("text")) {
      const b = t.getBBox(), r = t.getBoundingClientRect();
      if (b.x < x0 || b.y < y0 || b.x + b.width > x0 + w || b.y + b.height > y0 + h
          || r.left < outer.left || r.top < outer.top
          || r.right > outer.right || r.bottom > outer.bottom) {
        const at = [b.x, b.y, b.width, b.height].map((v) => v.toFixed(1)).join(" ");
        out.push(`${svg.id}: "${t.textContent}" at x y w h ${at}`);
      }
    }
  }
  const top = [...document.querySelectorAll("#chart-lateness text")].map((t) => t.textContent);
  return {out, top};
}"""


def test_the_charts_labels_lie_inside_their_box_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """Every label of every chart of the history, the lateness one at 60,000 ms top, lies
    within its SVG's box, in its own units and on the screen, at widths where the charts
    sit three abreast (narrowest) and one a row."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule_many([{"id": f"h:{i}", "delay_ms": 0} for i in range(20)])
    with opened(chromium) as browser:
        for width in (1000, 1280, 1920, 600):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(url)
            expect(page.locator("#chart-throughput text").first).to_be_attached()
            got = page.evaluate(LABELS_OUTSIDE)
            assert "60,000" in got["top"], got
            assert got["out"] == [], (width, got["out"])
            page.close()


# Each visible button, field and menu of a view that is not its own kind's look: the
# page's corner and border, not the browser's grey; its text readable on its background.
CONTROLS_OFF = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).map((v) => v / 255)
      .map((v) => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const probe = document.createElement("div");
  document.body.append(probe);
  const colour = (v) => { probe.style.color = `var(${v})`; return getComputedStyle(probe).color; };
  const allowed = new Set([colour("--control"), colour("--accent"), colour("--control-hover")]);
  const border = new Set([colour("--control-line"), colour("--accent")]);
  probe.remove();
  const out = [];
  const controls = "main button, main input:not([type=checkbox]), main select";
  for (const el of document.querySelectorAll(controls)) {
    if (!el.checkVisibility()) continue;
    const s = getComputedStyle(el), name = el.id || el.textContent.trim() || el.placeholder;
    if (s.borderTopLeftRadius !== "4px") out.push(`${name}: radius ${s.borderTopLeftRadius}`);
    if (!allowed.has(s.backgroundColor)) out.push(`${name}: background ${s.backgroundColor}`);
    if (!border.has(s.borderTopColor)) out.push(`${name}: border ${s.borderTopColor}`);
    const a = lum(s.color), b = lum(s.backgroundColor);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    if (ratio < 4.5) out.push(`${name}: contrast ${ratio.toFixed(2)}`);
  }
  return out;
}"""


def test_buttons_fields_and_menus_look_alike_in_both_themes_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """In the light and the dark theme, every visible button, field and menu of every
    view has the page's look (not the browser's default grey) and text readable on it."""
    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    c.schedule("d:1", 0)
    assert c.wait("d:1", timeout=20).outcome == "expired"
    assert dead_letter_expired(c, "billing", "the ledger refused it")
    c.schedule("job:1", 3_600_000)
    c.schedules.create("nightly", cron="0 3 * * *")
    with opened(chromium) as browser:
        for scheme in ("light", "dark"):
            size = {"width": 1400, "height": 900}
            context = browser.new_context(color_scheme=scheme, viewport=size)
            page = context.new_page()
            for view, (path, part) in VIEWS.items():
                page.goto(url + path + ("#find=*&state=any" if view == "timers" else ""))
                page.locator(part).wait_for()
                if view == "dead":
                    page.locator("#dead a[data-dead-ref]").first.wait_for()
                page.mouse.move(0, 0)  # no control under the pointer
                assert page.evaluate(CONTROLS_OFF) == [], (scheme, view)
            context.close()


# How far each field's placeholder overflows the room inside it (px, its own font): a
# hint cut off mid-sentence is a hint the user never reads whole.
PLACEHOLDER_OVERFLOW = """() => {
  const ctx = document.createElement("canvas").getContext("2d");
  const out = {};
  for (const el of document.querySelectorAll("#new-schedule input[placeholder]")) {
    const s = getComputedStyle(el);
    ctx.font = `${s.fontStyle} ${s.fontWeight} ${s.fontSize} ${s.fontFamily}`;
    const room = el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    out[el.id] = ctx.measureText(el.placeholder).width - room;
  }
  return out;
}"""


def test_the_new_schedule_hint_is_shown_whole_in_a_browser(
    chromium: Any, served: tuple[str, TimerClient]
) -> None:
    """The spec field's hint (a cron or an interval, each with an example) fits its field
    at 1400x1000: it was cut off at "or every, e.g."; and `every 1m`, typed as the list
    reads, creates the interval 1m."""
    from playwright.sync_api import expect  # noqa: PLC0415

    assert CHROMIUM is not None, "TICKWHEEL_REQUIRE_BROWSER is set but chromium is not on PATH"
    url, c = served
    with opened(chromium) as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "schedules")
        expect(page.locator("#sched-spec")).to_be_visible()
        over = page.evaluate(PLACEHOLDER_OVERFLOW)
        assert set(over) >= {"sched-name", "sched-spec", "sched-tz"}, over
        assert all(px <= 0 for px in over.values()), over
        hint = page.locator("#sched-spec").get_attribute("placeholder") or ""
        assert "0 8 * * MON-FRI" in hint and "30s" in hint, hint
        page.fill("#sched-name", "tick")
        page.fill("#sched-spec", "every 1m")
        page.click("#new-schedule button")
        expect(page.locator("#message")).to_contain_text("schedule tick created")
        expect(page.locator("#schedules tr[data-schedule='tick']")).to_contain_text("every 1m")
    made = c.schedules.get("tick")
    assert made is not None and made.spec.recurrence.every_ms == 60_000, made
