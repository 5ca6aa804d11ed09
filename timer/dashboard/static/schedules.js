// Recurring schedules: the list with its actions (pause, resume, trigger, backfill,
// delete), the form that creates one, and one schedule whole (#schedule=<name>): its
// recurrence, policies, counts, the occurrence armed now (a link to that timer) and its
// payload; from the live snapshot.

import {$, duration, esc, parseDuration, postJson, put, refresh, rows, say, scheduleLink, time, timerLink} from "./util.js";
import {go, view} from "./nav.js";

let lastSchedules = null;

export function renderSchedules(schedules) {
  lastSchedules = schedules;
  if (view().schedule) showSchedule(view().schedule, false);
  rows("schedules", schedules, (s) => `<tr data-schedule="${esc(s.name)}"><td>${scheduleLink(s.name)}</td>
      <td>${esc(s.when)}</td><td class="state">${esc(s.state)}</td><td>${time(s.next_ms)}</td>
      <td class="fired num">${s.fired}</td><td class="num">${s.missed}</td><td class="action">
      ${s.state === "active" ? `<button data-schedule="${esc(s.name)}" data-act="pause">pause</button>` :
        `<button data-schedule="${esc(s.name)}" data-act="resume">resume</button>`}
      <button data-schedule="${esc(s.name)}" data-act="trigger">trigger</button>
      <button data-schedule="${esc(s.name)}" data-act="backfill">backfill</button>
      <button class="danger" data-schedule="${esc(s.name)}" data-act="delete">delete</button></td></tr>`,
      "no recurring schedules");
  $("schedules").hidden = schedules.length === 0;
  $("no-schedules").hidden = schedules.length > 0;
}

export function showSchedule(name, scroll) {
  if (lastSchedules === null) return;  // the first snapshot shows it
  const s = lastSchedules.find((x) => x.name === name);
  if (!s) {
    $("schedule").hidden = true;
    if (scroll) say(`no schedule ${name} in this namespace`);
    return;
  }
  $("schedule-name").textContent = s.name;
  const span = duration;  // as it was set: exact
  put($("schedule-table").tBodies[0], [
    ["when", esc(s.when)], ["state", esc(s.state)], ["time zone", esc(s.tz)],
    ["next (UTC)", time(s.next_ms)], ["last (UTC)", time(s.last_ms)],
    ["armed", s.armed ? timerLink(s.armed) : "–"],
    ["fired", s.fired], ["missed", s.missed], ["skipped", s.skipped],
    ["missed policy", esc(s.missed_policy)], ["catch up", span(s.catch_up_ms)], ["overlap", esc(s.overlap)],
    ["jitter", span(s.jitter_ms)], ["group", esc(s.group ?? "–")], ["shard", s.shard],
    ["created (UTC)", time(s.created_ms)], ["version", s.version],
  ].map(([k, v]) => `<tr><th>${k}</th><td id="sc-${k.split(" ")[0]}">${v}</td></tr>`).join(""));
  $("schedule-payload").textContent = JSON.stringify(s.payload, null, 2);
  $("schedule").hidden = false;
  if (scroll) $("schedule").scrollIntoView({block: "nearest"});
}

export function startSchedules() {
  $("schedule-close").onclick = () => go({schedule: ""});
  $("schedules").onclick = async (event) => {
    const b = event.target.closest("button[data-schedule]");
    if (!b) return;
    const name = b.dataset.schedule, action = b.dataset.act;
    let body = {};
    if (action === "backfill") {  // fire the occurrences of the last <duration> that did not fire
      const back = parseDuration(prompt(`Backfill ${name}: how far back? (e.g. 1h)`) || "");
      if (back === null) { say("write a duration such as 30s, 10m or 1h"); return; }
      body = {start_ms: Date.now() - back, end_ms: Date.now()};
    } else if ((action === "delete" || action === "trigger") && !confirm(`${action} schedule ${name}?`)) return;
    try {
      const done = await postJson(`/api/schedules/${encodeURIComponent(name)}/${action}`, body);
      say(action === "backfill" ? `${name}: backfilled ${done.created.length}` : `${name}: ${action} done`, true);
      refresh();
    } catch (e) {
      say(e.message);
    }
  };
  $("new-schedule").onsubmit = async (event) => {
    event.preventDefault();
    const spec = $("sched-spec").value.trim();
    const every = parseDuration(spec) !== null;  // "30s": an interval; else a cron expression
    const body = {name: $("sched-name").value.trim(), tz: $("sched-tz").value.trim() || "UTC",
      [every ? "every" : "cron"]: spec};
    try {
      await postJson("/api/schedules", body);
      say(`schedule ${body.name} created`, true);
      refresh();
    } catch (e) {
      say(e.message);
    }
  };
}
