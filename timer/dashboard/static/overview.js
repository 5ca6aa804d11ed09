// The Overview: the counts, what needs attention now, the lateness of recent
// expirations, and the history's totals and charts.

import {$, address, api, esc, groupLink, put, rows, say} from "./util.js";
import {chart} from "./chart.js";

export function renderOverview(o) {
  $("pending").textContent = o.pending;
  $("workers-count").textContent = o.workers.length;
  const pm = o.outcomes_last_minute;
  $("pm-expired").textContent = pm.expired;
  $("pm-completed").textContent = pm.completed;
  $("pm-cancelled").textContent = pm.cancelled;
  $("dead-count").textContent = o.dead_letters;
  const most = Math.max(1, ...o.lateness.map((b) => b.count));
  // a bar is an SVG of its width: the page's policy allows no style attribute
  rows("lateness", o.lateness.filter((b) => b.count), (b) => `<tr><td>${esc(b.bucket)}</td>
    <td><svg class="bar" width="${Math.max(1, Math.round(200 * b.count / most))}" height="12" aria-hidden="true"><rect width="100%" height="100%"/></svg> ${b.count}</td></tr>`,
    "no recent expirations");
  attention(o);
}

// What an operator may have to act on, each a link to the view where they would.
function attention(o) {
  const items = [];
  if (o.dead_letters) {
    items.push(`<a href="${address("/dead-letters")}">${o.dead_letters.toLocaleString()} dead ${o.dead_letters === 1 ? "letter" : "letters"}</a> to re-deliver or drop`);
  }
  for (const g of o.groups.filter((x) => x.paused_since_ms)) items.push(`group ${groupLink(g.name)} is paused (${g.lag ?? "?"} waiting)`);
  const leaderless = o.shards.filter((s) => !s.leader).length;
  if (leaderless) items.push(`<a href="${address("/shards")}">${leaderless} ${leaderless === 1 ? "shard has" : "shards have"} no leader</a>: their timers wait`);
  if (!o.workers.length && o.pending) items.push(`<a href="${address("/workers")}">no live worker</a> while ${o.pending.toLocaleString()} ${o.pending === 1 ? "timer is" : "timers are"} pending`);
  const late = o.shards.filter((s) => s.lag_ms > 5000).length;
  if (late) items.push(`<a href="${address("/shards")}">${late} ${late === 1 ? "shard sweeps" : "shards sweep"} more than 5 s late</a>`);
  put($("attention"), items.length ? items.map((i) => `<li>${i}</li>`).join("") :
    '<li class="none">nothing needs attention now</li>');
}

// The history (kept a minute at a time in Redis by the workers and runners): totals and
// three charts of the period, a point a bin; fetched at load, every 30 s, on a change.
export async function loadHistory() {  // not "history": that is the window's own
  try {
    const h = await api(`/api/history/${$("history-period").value}`);
    // each count that may be short: marked, and why (heard over pub/sub, or lost by a
    // process killed before its flush)
    const why = h.why_approximate || {};
    for (const [k, n] of Object.entries(h.totals)) if ($(`ht-${k}`)) {
      $(`ht-${k}`).textContent = (why[k] ? "≈" : "") + n.toLocaleString();
      $(`ht-${k}`).title = why[k] || "";
    }
    $("throughput-caption").textContent = h.step_minutes === 1 ? "per minute" : `per ${h.step_minutes} minutes`;
    chart("chart-throughput", h.points, ["scheduled", "expired", "handled", "failed"], why);
    chart("chart-lateness", h.points, ["lateness_p50_ms", "lateness_p99_ms"]);
    chart("chart-backlog", h.points, ["pending", "dead"], why);
  } catch (e) {
    say(`Could not read the history: ${e.message}`);
  }
}

export function startOverview() {
  loadHistory();
  setInterval(loadHistory, 30_000);
  $("history-period").onchange = loadHistory;
}
