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

// What an operator may have to act on, one item a cause (the API says which: with no live
// worker, one item saying what follows from it), each linked to the view where they would.
function attention(o) {
  const part = (p) => p.view ? `<a href="${address(p.view)}">${esc(p.text)}</a>` :
    p.group != null ? groupLink(p.group) : esc(p.text);
  const items = o.attention.map((item) => `<li>${item.parts.map(part).join("")}</li>`);
  put($("attention"), items.length ? items.join("") :
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
