// Timers: one timer looked up by id (#timer=<id>) with its actions, the search by id
// glob and state (#find=…&state=…) with bulk actions on those ticked, and the recent
// outcomes, or a search of them (#okind, omatch, ofield, ovalue, osince, ogroup, ostate).

import {$, api, duration, esc, put, ms, parseDuration, postJson, rows, say, shownOf, time, timerLink} from "./util.js";
import {go, view} from "./nav.js";

// What showTimer lays out itself; any other field the timer has (its note, its trace)
// gets a row of its own, so a field declared in timer/durable/model/fields.py shows up here.
const LAID_OUT = new Set(["id", "state", "shard", "deadline_ms", "decided_ms", "created_ms",
  "time_left_ms", "watch", "notified", "need", "payload", "done", "max_total_ms", "absorbed"]);

function showTimer(t) {
  const pending = t.state === "pending";
  const more = Object.entries(t).filter(([k, v]) => !LAID_OUT.has(k) && v !== null)
    .map(([k, v]) => `<tr><th>${esc(k)}</th><td id="timer-${esc(k)}">${esc(String(v))}</td></tr>`).join("");
  put($("timer"), `<table id="timer-table">
    <tr><th>id</th><td>${esc(t.id)}</td></tr>
    <tr><th>state</th><td id="timer-state">${esc(t.state)}</td></tr>
    <tr><th>shard</th><td>${t.shard}</td></tr>
    <tr><th>deadline</th><td>${time(t.deadline_ms)}${!pending ? "" : t.time_left_ms < 0 ? ` (overdue by ${ms(-t.time_left_ms)})` : ` (in ${ms(t.time_left_ms)})`}</td></tr>
    <tr><th>decided</th><td>${time(t.decided_ms)}</td></tr>
    ${watchRow(t)}
    ${t.max_total_ms ? `<tr><th>cap</th><td id="timer-cap">never due after ${time(t.created_ms + t.max_total_ms)} (max_total_ms ${duration(t.max_total_ms)}, however it heartbeats)</td></tr>` : ""}
    ${t.absorbed ? `<tr><th>debounce</th><td id="timer-absorbed">${t.absorbed} later call${t.absorbed === 1 ? "" : "s"} absorbed by this window</td></tr>` : ""}
    ${more}</table><pre>${esc(JSON.stringify(t.payload, null, 2))}</pre>
    ${pending ? `<div class="action"><button class="danger" id="cancel">Cancel</button><button id="complete">Complete</button>
      <input id="delay" placeholder="e.g. 30s" size="8"> <button id="reschedule">Reschedule</button></div>` : ""}`);
  if (!pending) return;
  $("cancel").onclick = () => act(t.id, "cancel", {});
  $("complete").onclick = () => act(t.id, "complete", {});
  $("reschedule").onclick = () => {
    const delay = parseDuration($("delay").value);
    if (delay === null) return say(`"${$("delay").value}" is not a duration: try 500ms, 30s, 2m or 1h`);
    act(t.id, "reschedule", {delay_ms: delay});
  };
}

// A decided timer's outcome keeps the keys notified, not its watch keys or need: its JSON
// leaves those out, and the row shows what it keeps rather than "watch –" (none).
function watchRow(t) {
  if (t.watch === undefined) {
    return t.notified.length ? `<tr><th>notified</th><td id="timer-notified">${t.notified.map(esc).join(", ")}</td></tr>` : "";
  }
  return `<tr><th>watch</th><td>${t.watch.map(esc).join(", ") || "–"} ${t.watch.length ? `(notified: ${t.notified.map(esc).join(", ") || "none"}; needs ${t.need})` : ""}</td></tr>`;
}

export async function lookup(id) {
  try {
    showTimer(await api(`/api/timers/${encodeURIComponent(id)}`));
    $("message").className = "";
  } catch (e) {
    put($("timer"), "");
    say(e.message);
  }
}

async function act(id, action, body) {
  if (!confirm(`${action} timer ${id}?`)) return;
  try {
    const t = await postJson(`/api/timers/${encodeURIComponent(id)}/${action}`, body);
    showTimer(t);
    say(t.done ? `${id}: ${action} done (now ${t.state})` : `${id} was already ${t.state}`, true);
  } catch (e) {
    say(e.message);
  }
}

let found = [], foundCursor = null;

export async function find(more) {
  const match = $("find-match").value.trim() || "*", state = $("find-state").value;
  const q = `match=${encodeURIComponent(match)}&state=${encodeURIComponent(state)}` +
    (more && foundCursor ? `&cursor=${encodeURIComponent(foundCursor)}` : "");
  try {
    const page = await api(`/api/find?${q}`);
    found = (more ? found.concat(page.timers) : page.timers)
      .sort((a, b) => a.deadline_ms - b.deadline_ms);  // soonest first, whatever the shard
    foundCursor = page.cursor;
    if (!more) shownOf.found = undefined;  // a new search starts at its first page
    rows("found", found, (t) => `<tr><td class="pick"><input type="checkbox" data-found="${esc(t.id)}"
      ${t.state === "pending" ? "" : "disabled"}></td><td>${timerLink(t.id)}</td>
      <td>${esc(t.state)}</td><td class="num">${t.shard}</td><td>${time(t.deadline_ms)}</td><td>${time(t.decided_ms)}</td></tr>`,
      `no timers match ${esc(match)}`, 50);
    $("found").hidden = false;
    $("find-count").textContent = `${found.length} shown${foundCursor ? ", more to scan" : ""}`;
    $("find-more").hidden = !foundCursor;
    $("bulk").hidden = !found.some((t) => t.state === "pending");
    $("found-all").checked = false;
  } catch (e) {
    say(e.message);
  }
}

async function bulk(action, body) {
  const ids = [...document.querySelectorAll("input[data-found]:checked")].map((b) => b.dataset.found);
  if (!ids.length) return say("select the timers to act on first");
  if (!confirm(`${action} ${ids.length} ${ids.length === 1 ? "timer" : "timers"}?`)) return;
  try {
    const done = await postJson(`/api/bulk/${action}`, {ids, ...body});
    say(`${action}: ${done.done} of ${done.selected} done` +
      (done.skipped ? `, ${done.skipped} decided meanwhile` : ""), true);
    find(false);
  } catch (e) {
    say(e.message);
  }
}

// Outcomes by search: kind, a glob on the timer id, a payload field's value, a time
// range, a group's view of them; newest first. While one is shown, the live list of
// recent outcomes waits.
function showOutcomes(list, empty) {
  rows("recent", list, (r) => `<tr><td>${time(r.decided_ms)}</td><td>${r.outcome}</td>
    <td>${timerLink(r.id)}</td><td>${r.outcome === "expired" ? ms(r.lateness_ms) : "–"}</td></tr>`, empty);
}
export function renderRecent(o) {
  if (!searching()) showOutcomes(o.recent, "no outcomes yet");
}
export function searchOf() {
  const v = view();
  return {kind: v.okind || "", match: v.omatch || "", field: v.ofield || "", value: v.ovalue || "",
    since: v.osince || "", group: v.ogroup || "", state: v.ostate || ""};
}
export function searching() {
  const q = searchOf();
  return Boolean(q.kind || q.match || q.field || q.since || q.group || q.state);
}
export async function searchOutcomes() {
  const q = searchOf();
  const params = new URLSearchParams({kind: q.kind, match: q.match, field: q.field, value: q.value,
    group: q.group, state: q.state});
  if (q.since) params.set("since_ms", String(Date.now() - Number(q.since)));
  try {
    const got = await api(`/api/outcomes?${params}`);
    showOutcomes(got.outcomes, "no outcome matches");
    $("os-count").textContent = `${got.outcomes.length}${got.stopped ? "+" : ""} found` +
      (got.stopped ? " (the search read its most: narrow the time)" : "");
  } catch (e) {
    say(e.message);
  }
}

export function startTimers() {
  $("lookup").onsubmit = (event) => {
    event.preventDefault();
    const id = $("timer-id").value.trim();
    if (id === view().timer) lookup(id); else go({timer: id});  // the same again: fresh
  };
  $("find").onsubmit = (event) => {
    event.preventDefault();
    const match = $("find-match").value.trim() || "*", state = $("find-state").value;
    const v = view();
    if (v.find === match && v.state === state) find(false); else go({find: match, state: state});
  };
  $("find-more").onclick = () => find(true);
  $("found-all").onchange = (event) => {
    for (const box of document.querySelectorAll("input[data-found]:not(:disabled)")) box.checked = event.target.checked;
  };
  $("bulk-cancel").onclick = () => bulk("cancel", {});
  $("bulk-complete").onclick = () => bulk("complete", {});
  $("bulk-reschedule").onclick = () => {
    const delay = parseDuration($("bulk-delay").value);
    if (delay === null) return say(`"${$("bulk-delay").value}" is not a duration: try 500ms, 30s, 2m or 1h`);
    bulk("reschedule", {delay_ms: delay});
  };
  $("outcome-search").onsubmit = (event) => {
    event.preventDefault();
    const before = location.hash;
    go({okind: $("os-kind").value, omatch: $("os-match").value.trim(), ofield: $("os-field").value.trim(),
      ovalue: $("os-value").value.trim(), osince: $("os-since").value, ogroup: $("os-group").value.trim(),
      ostate: $("os-state").value});
    if (location.hash === before && searching()) searchOutcomes();  // the same search: again
  };
  $("os-clear").onclick = () => go({okind: "", omatch: "", ofield: "", ovalue: "", osince: "", ogroup: "", ostate: ""});
}
