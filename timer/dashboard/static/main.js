// The page's entry: the header (namespace, server, read-only, the theme), the live
// stream every view is drawn from, and apply(): what the address says, shown.

import {$, NS, api, esc, onRefresh, put, say, time} from "./util.js";
import {currentView, showView, startNavigation, view} from "./nav.js";
import {renderOverview, startOverview} from "./overview.js";
import {find, lookup, renderRecent, searchOf, searching, searchOutcomes, startTimers} from "./timers.js";
import {renderGroups, showGroup, startGroups} from "./groups.js";
import {deadFilter, deadFiltered, loadDead, renderDead, showDead, startDead} from "./dead.js";
import {renderSchedules, showSchedule, startSchedules} from "./schedules.js";
import {renderWorkers, showWorker, startWorkers} from "./workers.js";
import {renderShards, showDue, startShards} from "./shards.js";
import {loadNextDue, loadPending, pendingOf, renderPending, showPendingFilter, startPending} from "./pending.js";

function renderHeader(o) {
  const readOnly = o.read_only;  // the server marked the page so too, before its first paint
  document.body.classList.toggle("read-only", readOnly);
  $("read-only").hidden = !readOnly;
  const select = $("namespace");
  if (select.options.length !== o.namespaces.length) {
    select.innerHTML = o.namespaces.map((n) => `<option>${esc(n)}</option>`).join("");
  }
  select.value = o.namespace;
  $("server").textContent = o.server;
  $("updated").textContent = `updated ${time(o.now_ms)}`;
}

function renderAll(snap) {  // one event of the live stream: everything every view shows
  const o = snap.overview;
  renderHeader(o);
  renderOverview(o);
  renderShards(o);
  renderWorkers(o, view().worker);
  renderGroups(o, snap.dead);
  renderRecent(o);
  renderDead(snap.dead);
  renderSchedules(snap.schedules);
  renderPending();
}

async function refresh() {  // at once after an action (the stream brings it within a second)
  try {
    renderAll({overview: await api("/api/overview"), dead: await api("/api/dead"),
      schedules: await api("/api/schedules")});
  } catch (e) {
    say(`Could not refresh: ${e.message}`);
  }
}

function follow() {  // live updates: the server pushes a snapshot every second
  const source = new EventSource(NS ? `/api/live?ns=${encodeURIComponent(NS)}` : "/api/live");
  source.onmessage = (event) => {
    const snap = JSON.parse(event.data);
    if (snap.error) return say(`Could not refresh: ${snap.error}`);
    const start = performance.now();
    renderAll(snap);
    // how long the page's own work took (the dashboard benchmark listens)
    window.dispatchEvent(new CustomEvent("tickwheel:rendered", {detail: performance.now() - start}));
  };
  source.onerror = () => { $("updated").textContent = "reconnecting…"; };
}

// What the address says, shown: the view (its path), then what its hash opens; each
// part is fetched again only when its own keys changed.
const shown = {};
function apply() {
  const name = showView();
  const v = view();
  const pending = JSON.stringify(pendingOf());
  if (name === "timers" && (pending !== shown.pending || shown.view !== "timers")) {
    showPendingFilter();
    loadPending(true);
    shown.pending = pending;
  }
  if (name === "overview" && shown.view !== "overview") loadNextDue();
  if (v.shard !== shown.shard && v.shard != null) showDue(v.shard);
  if (v.timer !== shown.timer) {
    $("timer-id").value = v.timer || "";
    if (v.timer) lookup(v.timer); else put($("timer"), "");
  }
  if ((v.find !== shown.find || v.state !== shown.state) && v.find != null) {
    $("find-match").value = v.find;
    $("find-state").value = v.state || "pending";
    find(false);
  }
  if (v.group !== shown.group) {
    if (v.group) showGroup(v.group, true); else $("group").hidden = true;
  }
  const df = deadFilter();
  if (df.group !== shown.dgroup || df.error !== shown.derror || df.match !== shown.dmatch) {
    $("df-group").value = df.group;
    $("df-error").value = df.error;
    $("df-match").value = df.match;
    if (deadFiltered()) loadDead(true); else if (shown.dgroup !== undefined) refresh();
    Object.assign(shown, {dgroup: df.group, derror: df.error, dmatch: df.match});
  }
  const q = searchOf(), was = shown.search || "";
  if (JSON.stringify(q) !== was) {
    $("os-kind").value = q.kind;
    $("os-match").value = q.match;
    $("os-field").value = q.field;
    $("os-value").value = q.value;
    $("os-since").value = q.since;
    $("os-group").value = q.group;
    $("os-state").value = q.state;
    if (searching()) searchOutcomes();
    else { $("os-count").textContent = ""; if (was) refresh(); }
    shown.search = JSON.stringify(q);
  }
  if (v.schedule !== shown.schedule) {
    if (v.schedule) showSchedule(v.schedule, true); else $("schedule").hidden = true;
    shown.schedule = v.schedule;
  }
  if (v.worker !== shown.worker) {
    if (v.worker) showWorker(v.worker, true); else $("worker").hidden = true;
  }
  if (v.dead !== shown.dead) {
    if (v.dead) showDead(v.dead); else $("dead-letter").hidden = true;
  }
  Object.assign(shown, {shard: v.shard, timer: v.timer, find: v.find, state: v.state, dead: v.dead,
    group: v.group, worker: v.worker, view: currentView()});
}

function showTheme() {  // the button names the theme it switches to
  $("theme").textContent = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
}
function startTheme() {
  $("theme").onclick = () => {
    const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    localStorage.setItem("tickwheel-theme", next);
    showTheme();
  };
  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", (event) => {
    if (!localStorage.getItem("tickwheel-theme")) {  // no choice made here: follow the system
      document.documentElement.dataset.theme = event.matches ? "dark" : "light";
      showTheme();
    }
  });
  showTheme();
}

onRefresh(refresh);
startTheme();
startNavigation(apply);
startTimers();
startGroups();
startDead();
startSchedules();
startWorkers();
startShards();
startPending();
refresh();
follow();
startOverview();
apply();  // what the address says: a link or a bookmark opens on its view
