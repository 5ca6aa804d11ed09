// Workers: each live one's heartbeat, shards led and rate; one worker's own view
// (#worker=<id>): what it says of itself (version, host, pid, start, counters,
// lateness, last error), its heartbeat and the shards it leads.

import {$, api, duration, esc, ms, put, rows, say, time, workerLink} from "./util.js";
import {go, view} from "./nav.js";

export function renderWorkers(o, open) {
  rows("workers", o.workers, (w) => `<tr><td>${workerLink(w.id)}</td><td>${ms(w.heartbeat_age_ms)}</td>
    <td class="num">${w.shards_led}</td><td class="num">${w.expired_per_s}</td></tr>`, "no worker has announced itself");
  if (open && !$("worker").hidden) showWorker(open, false);
}

// Each call is numbered: only the latest may draw, and only while the address still names
// its worker. A live refresh's answer that comes after a close (or after another worker was
// opened) would show the view again; and a lock that dropped calls while one was under way
// dropped the opening of another worker with them.
let shown = 0;
export async function showWorker(id, scroll) {
  const mine = ++shown;
  try {
    const w = await api(`/api/worker?id=${encodeURIComponent(id)}`);
    const answers = document.body.dataset;  // answers taken, drawn or not (a test waits on it)
    answers.workerAnswers = String((Number(answers.workerAnswers) || 0) + 1);
    if (mine !== shown || view().worker !== id) return;
    const c = w.card || {};
    $("worker-name").textContent = w.id;
    $("worker-gone").hidden = w.live;
    const up = c.started_ms ? `${time(c.started_ms)} (up ${ms(Date.now() - c.started_ms)})` : "–";
    const late = (v) => v == null ? "–" : ms(v);
    put($("worker-card").tBodies[0], [
      ["version", esc(c.version ?? "–")], ["host", esc(c.host ?? "–")], ["pid", c.pid ?? "–"],
      ["python", esc(c.python ?? "–")], ["started (UTC)", up],
      ["heartbeat age", w.heartbeat_age_ms == null ? "–" : ms(w.heartbeat_age_ms)],
      ["lease", c.lease_ms ? duration(c.lease_ms) : "–"], ["fired", c.fired ?? "–"], ["swept", c.swept ?? "–"],
      ["takeovers", c.takeovers ?? "–"], ["leases lost", c.leases_lost ?? "–"],
      ["redis errors", c.redis_errors ?? "–"],
      ["lateness p50 / p99", `${late(c.lateness_p50_ms)} / ${late(c.lateness_p99_ms)}`],
    ].map(([k, v]) => `<tr><th>${k}</th><td id="wk-${k.split(" ")[0]}">${v}</td></tr>`).join(""));
    rows("worker-shards", w.shards, (s) => `<tr><td>${s.shard}</td><td>${s.epoch}</td><td>${ms(s.lease_ttl_ms)}</td>
      <td>${s.pending}</td><td>${ms(s.lag_ms)}</td></tr>`, "it leads no shard now");
    $("worker-error").textContent = c.last_error ? `${time(c.last_error_ms)}  ${c.last_error}` : "none since it started";
    $("worker").hidden = false;
    if (scroll) $("worker").scrollIntoView({block: "nearest"});
  } catch (e) {
    if (mine !== shown) return;
    $("worker").hidden = true;
    say(e.message);
  }
}

export function startWorkers() {
  $("worker-close").onclick = () => go({worker: ""});
}
