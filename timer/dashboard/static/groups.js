// Consumer groups: each one's lag (waiting), what it holds in hand, its dead letters,
// whether it is paused and its runners; the per-key limits in use; one group's own view (#group=<name>): its consumers, what it owes, its limits
// and its own history (handled, failed, dead a minute, the last hour), paused and
// resumed from there.

import {$, api, esc, groupLink, ms, postJson, refresh, rows, say, time} from "./util.js";
import {chart} from "./chart.js";
import {go, view} from "./nav.js";

let lastOverview = null;

// Each group's dead letters, counted from those the live event lists (the oldest 200):
// exact while that is all of them, else at least that many ("+").
function deadOf(dead, total) {
  const counts = {};
  for (const d of dead) counts[d.group] = (counts[d.group] || 0) + 1;
  const all = dead.length >= total;
  return (name) => `${counts[name] || 0}${all ? "" : "+"}`;
}

// The list, lag first: the groups with the most waiting on top, each with what it holds
// in hand (delivered, not settled; of those, retrying after a failure and waiting at
// their handler's request), its dead letters, whether it is
// paused, and its runners (consumers, with what each holds).
export function renderGroups(o, dead) {
  lastOverview = o;
  if (view().group) showGroup(view().group, false);
  const deadIn = deadOf(dead || [], o.dead_letters);
  const groups = [...o.groups].sort((a, b) => (b.lag ?? -1) - (a.lag ?? -1) || (a.name < b.name ? -1 : 1));
  rows("groups", groups, (g) => `<tr data-group-row="${esc(g.name)}"><td>${groupLink(g.name)}</td>
    <td class="num waiting">${g.lag ?? "?"}</td><td class="num in-hand">${g.pending}</td><td class="num retrying">${g.retrying}</td><td class="num later">${g.later ?? 0}</td>
    <td class="num dead">${deadIn(g.name)}</td><td class="paused-by">${g.paused_since_ms ? `<span class="paused">paused</span> by ${esc(g.paused_by)}` : "–"}</td>
    <td class="runners">${g.consumers.map((c) => `${esc(c.name)} (${c.pending})`).join(", ") || "–"}</td><td>${ms(g.oldest_pending_age_ms)}</td></tr>`, "no consumer groups");
  rows("limits", o.limits, (l) => `<tr><td>${esc(l.group)}</td><td>${esc(l.limit)}</td>
    <td>${esc(l.value)}</td><td class="running num">${l.running}</td><td>${l.runners.map(esc).join(", ")}</td></tr>`,
    "no handler runs under a per-key limit now");
}

export async function showGroup(name, fetchHistory) {
  const g = lastOverview && lastOverview.groups.find((x) => x.name === name);
  $("group-name").textContent = name;
  $("group").hidden = false;
  $("group-sums").hidden = !g;
  if (g) {
    $("gs-pending").textContent = g.pending;
    $("gs-retrying").textContent = g.retrying;
    $("gs-later").textContent = g.later ?? 0;
    $("gs-lag").textContent = g.lag ?? "?";
    $("gs-oldest").textContent = ms(g.oldest_pending_age_ms);
    const paused = g.paused_since_ms != null;
    $("group-pause").hidden = paused;
    $("group-resume").hidden = !paused;
    $("group-paused").textContent = paused ? `paused by ${g.paused_by} at ${time(g.paused_since_ms)}: its runners take nothing new` : "";
    rows("group-consumers", g.consumers, (c) => `<tr><td>${esc(c.name)}</td><td>${c.pending}</td><td>${ms(c.idle_ms)}</td></tr>`, "no consumers");
    rows("group-limits", lastOverview.limits.filter((l) => l.group === name), (l) => `<tr><td>${esc(l.limit)}</td>
      <td>${esc(l.value)}</td><td>${l.running}</td><td>${l.runners.map(esc).join(", ")}</td></tr>`, "no per-key limit in use now");
  } else if (lastOverview && fetchHistory) {
    say(`no consumer group ${name} in this namespace`);
  }
  if (!fetchHistory) return;
  try {
    const h = await api(`/api/history/60/group/${encodeURIComponent(name)}`);
    $("group-sums").hidden = false;
    const why = h.why_approximate || {};  // a runner killed before its flush: short
    for (const k of ["handled", "failed", "dead"]) {
      $(`gh-${k}`).textContent = (why[k] ? "≈" : "") + h.totals[k].toLocaleString();
      $(`gh-${k}`).title = why[k] || "";
    }
    chart("chart-group", h.points, ["handled", "failed", "dead"], why);
  } catch (e) {
    say(e.message);
  }
}

async function groupAct(action) {  // pause or resume the open group's runners
  const name = view().group;
  if (action === "pause" && !confirm(`Pause group ${name}? Its runners take nothing new until resumed.`)) return;
  try {
    await postJson(`/api/groups/${action}`, {group: name});
    say(`${name}: ${action}d`, true);
    refresh();
  } catch (e) {
    say(e.message);
  }
}

export function startGroups() {
  $("group-close").onclick = () => go({group: ""});
  $("group-pause").onclick = () => groupAct("pause");
  $("group-resume").onclick = () => groupAct("resume");
}
