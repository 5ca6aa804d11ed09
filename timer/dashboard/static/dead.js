// Dead letters: the live list, or what a filter selects (group, error text, a glob on
// the timer id; in the address as dgroup, derror, dmatch). Re-deliver or drop those
// ticked, or all the filter selects: the confirmation says how many, and the server
// does nothing unless that count still holds (409: the page shows the new one). One
// dead letter whole (#dead=<ref>): its outcome, every attempt's error, its payload.

import {$, api, deadLink, esc, postJson, put, refresh, rows, say, time, timerLink} from "./util.js";
import {go, view} from "./nav.js";

const deadTicked = new Set();

export function deadFilter() {
  const v = view();
  return {group: v.dgroup || "", error: v.derror || "", match: v.dmatch || ""};
}
export function deadFiltered() {
  const f = deadFilter();
  return Boolean(f.group || f.error || f.match);
}

export function renderDead(dead) {  // a live event's list, unless a filter's is shown
  if (deadFiltered()) loadDead(false); else showDeadRows(dead, null);
}

function showDeadRows(dead, counted) {
  rows("dead", dead, (d) => `<tr><td class="pick"><input type="checkbox" data-dead-tick="${esc(d.ref)}" ${deadTicked.has(d.ref) ? "checked" : ""}></td>
      <td class="num">${deadLink(d.ref)}</td><td class="num">${esc(d.group)}</td><td class="num">${esc(d.outcome ? d.outcome.id : "–")}</td>
      <td class="num">${d.attempts}</td><td>${esc(d.error.split("\n")[0])}</td><td class="action">
      <button data-dead="${esc(d.ref)}" data-act="redeliver">re-deliver</button>
      <button class="danger" data-dead="${esc(d.ref)}" data-act="drop">drop</button></td></tr>`,
      deadFiltered() ? "no dead letters match" : "no dead letters", 20);
  $("df-count").textContent = counted === null ? "" :
    `${counted.matching.toLocaleString()}${counted.more ? "+" : ""} ${counted.matching === 1 && !counted.more ? "dead letter matches" : "dead letters match"}`;
  $("dead-all").checked = false;
}

let deadLoading = false, deadLoaded = 0;
export async function loadDead(now) {  // the filtered list: at once when asked, else every 5 s
  if (deadLoading || (!now && Date.now() - deadLoaded < 5000)) return null;
  deadLoading = true;
  try {
    const got = await api(`/api/dead/matching?${new URLSearchParams(deadFilter())}`);
    deadLoaded = Date.now();
    showDeadRows(got.dead_letters, got);
    return got;
  } catch (e) {
    say(e.message);
    return null;
  } finally {
    deadLoading = false;
  }
}

async function deadBulk(action, all) {
  const verb = action === "redeliver" ? "Re-deliver" : "Drop";
  let body;
  if (all) {
    const got = await loadDead(true);
    if (!got) return;
    if (got.more) return say(`more than ${got.matching.toLocaleString()} match: narrow the filter first`);
    if (!got.matching) return say("no dead letters match");
    const f = deadFilter(), said = Object.entries(f).filter(([, v]) => v).map(([k, v]) => `${k} ${v}`);
    const what = said.length ? ` matching ${said.join(", ")}` : "";
    if (!confirm(`${verb} all ${got.matching} dead ${got.matching === 1 ? "letter" : "letters"}${what}?`)) return;
    body = {...f, expect: got.matching};
  } else {
    const refs = [...deadTicked];
    if (!refs.length) return say("tick the dead letters to act on first");
    if (!confirm(`${verb} ${refs.length} selected dead ${refs.length === 1 ? "letter" : "letters"}?`)) return;
    body = {refs, expect: refs.length};
  }
  try {
    const done = await postJson(`/api/dead/bulk/${action}`, body);
    say(`${action}: ${done.done} of ${done.matched} done` +
      (done.missing.length ? `, ${done.missing.length} gone meanwhile` : ""), true);
    deadTicked.clear();
  } catch (e) {
    say(e.message);
  }
  if (deadFiltered()) loadDead(true);
  refresh();
}

async function deadAct(ref, action) {
  if (!confirm(`${action} dead letter ${ref}?`)) return false;
  try {
    await api(`/api/dead/${ref}/${action}`, {method: "POST"});
    say(`${ref}: ${action} done`, true);
    refresh();
    return true;
  } catch (e) {
    say(e.message);
    return false;
  }
}

let deadShown = 0;  // as a worker's view: only the latest call draws, while the address names it
export async function showDead(ref) {  // one dead letter, whole: its outcome, error, payload
  const mine = ++deadShown;
  try {
    const d = await api(`/api/dead/${ref}`);
    if (mine !== deadShown || view().dead !== ref) return;
    const o = d.outcome;
    $("dl-ref").textContent = d.ref;
    put($("dl-table").tBodies[0], [
      ["group", esc(d.group)], ["timer", o ? timerLink(o.id) : "– (trimmed from its stream first)"],
      ["outcome", o ? esc(o.outcome) : "–"], ["attempts", d.attempts],
      ["last consumer", esc(d.consumer)], ["failed (UTC)", time(d.failed_ms)],
      ["deadline (UTC)", o ? time(o.deadline_ms) : "–"], ["decided (UTC)", o ? time(o.decided_ms) : "–"],
    ].map(([k, v]) => `<tr><th>${k}</th><td id="dl-${k.split(" ")[0]}">${v}</td></tr>`).join(""));
    $("dl-error").textContent = d.error;
    rows("dl-earlier", d.earlier, (e) => `<tr><td class="num">${e.attempt}</td><td>${time(e.failed_ms)}</td>
      <td><details><summary>${esc(e.error.split("\n")[0])}</summary><pre>${esc(e.error)}</pre></details></td></tr>`,
      d.attempts > 1 ? "not kept (it failed before this release kept them)" : "none: its first attempt was its last");
    $("dl-payload").textContent = o ? JSON.stringify(o.payload, null, 2) : "–";
    $("dead-letter").hidden = false;
    $("dead-letter").scrollIntoView({block: "nearest"});
  } catch (e) {
    if (mine !== deadShown) return;
    $("dead-letter").hidden = true;
    say(e.message);
  }
}

export function startDead() {
  $("dead-filter").onsubmit = (event) => {
    event.preventDefault();
    deadTicked.clear();
    go({dgroup: $("df-group").value.trim(), derror: $("df-error").value.trim(), dmatch: $("df-match").value.trim()});
    loadDead(true);
  };
  $("df-clear").onclick = () => {
    deadTicked.clear();
    go({dgroup: "", derror: "", dmatch: ""});
  };
  $("dead-all").onchange = (event) => {
    for (const box of document.querySelectorAll("input[data-dead-tick]")) {
      box.checked = event.target.checked;
      if (box.checked) deadTicked.add(box.dataset.deadTick); else deadTicked.delete(box.dataset.deadTick);
    }
  };
  $("db-redeliver-sel").onclick = () => deadBulk("redeliver", false);
  $("db-drop-sel").onclick = () => deadBulk("drop", false);
  $("db-redeliver-all").onclick = () => deadBulk("redeliver", true);
  $("db-drop-all").onclick = () => deadBulk("drop", true);
  $("dl-redeliver").onclick = async () => { if (await deadAct(view().dead, "redeliver")) go({dead: ""}); };
  $("dl-drop").onclick = async () => { if (await deadAct(view().dead, "drop")) go({dead: ""}); };
  $("dl-close").onclick = () => go({dead: ""});
  $("dead").onclick = async (event) => {
    const tick = event.target.closest("input[data-dead-tick]");
    if (tick) {
      if (tick.checked) deadTicked.add(tick.dataset.deadTick); else deadTicked.delete(tick.dataset.deadTick);
      return;
    }
    const b = event.target.closest("button[data-dead]");
    if (b) deadAct(b.dataset.dead, b.dataset.act);
  };
}
