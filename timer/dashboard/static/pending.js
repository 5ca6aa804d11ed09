// The pending timers of every shard by next due (/api/pending: the shards' own order,
// merged). The Timers view lists them a page at a time: a page's cursor is in the
// address (/timers#after=<due>:<id>), so each page can be linked and the back button
// returns to the last; filtered by id glob, payload field and least priority (#pmatch,
// pfield, pvalue, pprio); the ticked ones cancelled, completed or rescheduled together.
// The Overview opens on the first few of them, so a namespace's timers show unclicked.

import {$, address, api, cut, esc, parseDuration, postJson, rows, say, scheduleLink, shardLink, time, timerLink, until} from "./util.js";
import {currentView, go, view} from "./nav.js";

export const PAGE = 50, FIRST = 10;

export function pendingOf() {
  const v = view();
  return {match: v.pmatch || "", field: v.pfield || "", value: v.pvalue || "",
    prio: v.pprio || "", after: v.after || ""};
}

function query(q, limit) {
  const params = new URLSearchParams({limit: String(limit)});
  if (q.match) params.set("match", q.match);
  if (q.field) { params.set("field", q.field); params.set("value", q.value); }
  if (q.prio) params.set("min_priority", q.prio);
  if (q.after) params.set("cursor", q.after);
  return `/api/pending?${params}`;
}

// A schedule's armed occurrence is its next, shown as such with a link to the schedule;
// it has no tick box: cancelling it would leave the schedule with none armed (pause the
// schedule instead).
const SCHEDULES_OWN = "a schedule's next occurrence: pause or change the schedule, not this timer";
const row = (t, pick) => `<tr${t.schedule ? ' class="occurrence"' : ""}>${!pick ? "" : t.schedule ? `<td class="pick" title="${SCHEDULES_OWN}"></td>` :
  `<td class="pick"><input type="checkbox" data-pending="${esc(t.id)}"></td>`}
  <td>${t.schedule ? `<span class="muted">next of schedule</span> ${scheduleLink(t.schedule)} <small>(${timerLink(t.id)})</small>` : timerLink(t.id)}</td><td class="when">${time(t.deadline_ms)}</td><td class="num">${until(t.time_left_ms)}</td>
  <td class="num">${shardLink(t.shard)}</td><td class="num">${t.priority}</td><td>${cut(t.note)}</td></tr>`;

let loading = false, asked = 0;

// The Timers view's page, as the address says; a live update waits while one is on
// its way or boxes are ticked (it would untick them); the last asked is the one shown.
export async function loadPending(force) {
  if (!force && (loading || document.querySelector("input[data-pending]:checked"))) return;
  loading = true;
  const q = pendingOf(), mine = ++asked;
  try {
    const page = await api(query(q, PAGE));
    if (mine !== asked) return;  // a later filter or page was asked for meanwhile
    rows("pending-list", page.timers, (t) => row(t, true),
      q.match || q.field || q.prio ? "no pending timer matches" : "no pending timers", 0);
    $("pending-all").checked = false;
    const n = page.timers.length, own = page.timers.filter((t) => t.schedule).length;
    $("pending-count").textContent = (n ? `${n} shown${own ? ` (${own} of them ${own === 1 ? "a schedule's next occurrence" : "schedules' next occurrences"})` : ""}, due ${time(page.timers[0].deadline_ms)} to ${time(page.timers[n - 1].deadline_ms)}` : "") +
      (page.stopped ? `${n ? "; " : ""}the page read its most before it was full: the next goes on from there` : "");
    const next = $("pending-next");
    next.hidden = !page.cursor;
    if (page.cursor) next.href = address("/timers", {...view(), after: page.cursor, timer: ""});
    $("pending-first").hidden = !q.after;
    $("pending-first").href = address("/timers", {...view(), after: "", timer: ""});
  } catch (e) {
    if (mine === asked) say(e.message);
  } finally {
    if (mine === asked) loading = false;
  }
}

// The Overview's first rows: the timers due next, whatever the shard.
let overviewLoading = false;
export async function loadNextDue() {
  if (overviewLoading) return;
  overviewLoading = true;
  try {
    const page = await api(query({}, FIRST));
    rows("next-due", page.timers, (t) => row(t, false), "no pending timers");
    $("next-more").hidden = !page.cursor;
  } catch (e) {
    say(e.message);
  } finally {
    overviewLoading = false;
  }
}

export function renderPending() {  // each live event: the list shown, afresh
  const name = currentView();
  if (name === "overview") loadNextDue();
  else if (name === "timers") loadPending(false);
}

async function bulk(action, body) {
  const ids = [...document.querySelectorAll("input[data-pending]:checked")].map((b) => b.dataset.pending);
  if (!ids.length) return say("tick the timers to act on first");
  if (!confirm(`${action} ${ids.length} ${ids.length === 1 ? "timer" : "timers"}?`)) return;
  try {
    const done = await postJson(`/api/bulk/${action}`, {ids, ...body});
    say(`${action}: ${done.done} of ${done.selected} done` +
      (done.skipped ? `, ${done.skipped} decided meanwhile` : ""), true);
    loadPending(true);
  } catch (e) {
    say(e.message);
  }
}

export function startPending() {
  for (const a of document.querySelectorAll("#by-state a[data-okind]")) a.href = address("/timers", {okind: a.dataset.okind});
  $("next-more").href = address("/timers");
  $("pending-filter").onsubmit = (event) => {
    event.preventDefault();
    const prio = $("pf-prio").value.trim();
    if (prio && !/^-?\d{1,3}$/.test(prio)) return say(`"${prio}" is not a priority: a whole number from -100 to 100`);
    const before = location.hash;
    go({pmatch: $("pf-match").value.trim(), pfield: $("pf-field").value.trim(),
      pvalue: $("pf-value").value.trim(), pprio: prio, after: ""});
    if (location.hash === before) loadPending(true);  // the same filter: again
  };
  $("pf-clear").onclick = () => go({pmatch: "", pfield: "", pvalue: "", pprio: "", after: ""});
  $("pending-all").onchange = (event) => {
    for (const box of document.querySelectorAll("input[data-pending]")) box.checked = event.target.checked;
  };
  $("pb-cancel").onclick = () => bulk("cancel", {});
  $("pb-complete").onclick = () => bulk("complete", {});
  $("pb-reschedule").onclick = () => {
    const delay = parseDuration($("pb-delay").value);
    if (delay === null) return say(`"${$("pb-delay").value}" is not a duration: try 500ms, 30s, 2m or 1h`);
    bulk("reschedule", {delay_ms: delay});
  };
}

// What the address says of the list, in its form.
export function showPendingFilter() {
  const q = pendingOf();
  $("pf-match").value = q.match;
  $("pf-field").value = q.field;
  $("pf-value").value = q.value;
  $("pf-prio").value = q.prio;
}
