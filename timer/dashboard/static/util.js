// What every view's module uses: an element by id, escaping, how times and durations
// read, the API call (a POST carries the page's CSRF token), messages, links that are
// addresses, and paged tables.

export const $ = (id) => document.getElementById(id);

// Make `el`'s content what `html` says, keeping every node that stays the same (its tag
// and attributes): a live update that changes only a countdown keeps each row's link, so
// a click that lands during one (its press on the old node, its release on the new) still
// opens it, and a box or a field keeps what the user did to it. The new content is parsed
// in `el`'s own context (a table's body, an SVG).
const drawn = new WeakMap();
export function put(el, html) {
  if (drawn.get(el) === html) return;
  const fresh = el.cloneNode(false);
  fresh.innerHTML = html;
  morph(el, fresh);
  drawn.set(el, html);
}

function morph(into, from) {
  const want = [...from.childNodes];
  want.forEach((w, i) => {
    const h = into.childNodes[i];
    if (!h) into.appendChild(w);
    else if (!alike(h, w)) into.replaceChild(w, h);
    else if (h.nodeType === Node.ELEMENT_NODE) morph(h, w);
    else if (h.nodeValue !== w.nodeValue) h.nodeValue = w.nodeValue;
  });
  while (into.childNodes.length > want.length) into.lastChild.remove();
}

function alike(a, b) {  // the one may stay for the other (its text or children aside)
  if (a.nodeName !== b.nodeName) return false;  // an element's tag, or #text, #comment
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  return a.attributes.length === b.attributes.length && [...b.attributes].every((x) => a.getAttribute(x.name) === x.value);
}

export const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

// how long until a deadline: "4s500ms", or "overdue 3m21s" once it passed ("in -3m" read oddly)
export const until = (v) => v == null ? "–" : v < 0 ? `overdue ${ms(-v)}` : ms(v);
// a long text (a note of up to 1,000 characters) cut for a table's cell; the whole in its title
export const cut = (text, most = 80) => {
  const s = String(text ?? "");
  return s.length > most ? `<span title="${esc(s)}">${esc(s.slice(0, most - 1))}…</span>` : esc(s);
};

// A duration written as the CLI writes one (timer/durable/model/durations.py
// format_duration_ms): largest units first, none that is 0: 350ms, 1s500ms, 1h30m, 2d3h.
export const duration = (v) => {
  if (v == null) return "–";
  let rest = Math.round(Math.abs(v));
  if (!rest) return "0s";
  let said = "";
  for (const [size, unit] of [[86400000, "d"], [3600000, "h"], [60000, "m"], [1000, "s"], [1, "ms"]]) {
    const n = Math.floor(rest / size);
    rest -= n * size;
    if (n) said += `${n}${unit}`;
  }
  return (v < 0 ? "-" : "") + said;
};
// An age or a time left, as the CLI writes one (cli/output.py age_text): 350ms, 3s250ms,
// and in whole seconds from 10 s on: 6m40s, 1h14m59s (not 6 min 40 s, nor 400.0 s).
export const ms = (v) => {
  if (v == null) return "–";
  const a = Math.round(Math.abs(v));
  return (v < 0 && a ? "-" : "") + duration(a >= 10000 ? Math.floor(a / 1000) * 1000 : a);
};
export const time = (v) => v == null ? "–" : new Date(v).toISOString().replace("T", " ").replace("Z", " UTC");

export const NS = new URLSearchParams(location.search).get("ns");
const SEARCH = NS ? `?ns=${encodeURIComponent(NS)}` : "";

// The address of a view (its path) showing what `params` say (its hash): a real href,
// so a middle-click or "open in a new tab" opens the same view; the namespace kept.
export function address(path, params) {
  // an empty value clears its key (a link that leaves what was open in the view)
  const kept = Object.entries(params || {}).filter(([, v]) => v !== "" && v != null);
  const hash = new URLSearchParams(kept).toString();
  return `${path}${SEARCH}${hash ? "#" + hash : ""}`;
}
// Links to one thing's view, as every table writes them (data-* names what they open).
export const timerLink = (id) => `<a href="${esc(address("/timers", {timer: id}))}" data-timer="${esc(id)}">${esc(id)}</a>`;
export const groupLink = (name) => `<a href="${esc(address("/groups", {group: name}))}" data-group="${esc(name)}">${esc(name)}</a>`;
export const workerLink = (id) => `<a href="${esc(address("/workers", {worker: id}))}" data-worker="${esc(id)}">${esc(id)}</a>`;
export const scheduleLink = (name) => `<a href="${esc(address("/schedules", {schedule: name}))}" data-sched="${esc(name)}">${esc(name)}</a>`;
export const deadLink = (ref) => `<a href="${esc(address("/dead-letters", {dead: ref}))}" data-dead-ref="${esc(ref)}">${esc(ref)}</a>`;
export const shardLink = (shard) => `<a href="${esc(address("/shards", {shard}))}" data-shard-link="${shard}">${shard}</a>`;

export function say(text, ok) {
  const m = $("message");
  m.textContent = text;
  m.className = ok ? "ok" : "error";
}

export function csrfToken() {  // the SameSite=Strict cookie the server set with this page
  const m = document.cookie.match(/(?:^|;\s*)tickwheel_csrf=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : "";
}

export async function api(path, options) {
  options = options || {};
  if (options.method === "POST") {  // the server refuses a POST without the page's token
    options.headers = {...(options.headers || {}), "X-CSRF-Token": csrfToken()};
  }
  const join = path.includes("?") ? "&" : "?";  // a query of its own keeps the namespace too
  const response = await fetch(NS ? `${path}${join}ns=${encodeURIComponent(NS)}` : path, options);
  const data = await response.json().catch(() => ({error: `HTTP ${response.status}`}));
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

export const postJson = (path, body) => api(path, {method: "POST",
  headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});

export function parseDuration(text) {
  const m = /^\s*(\d+)\s*(ms|s|m|h)\s*$/.exec(text);
  if (!m) return null;
  return Number(m[1]) * {ms: 1, s: 1000, m: 60000, h: 3600000}[m[2]];
}

// Everything at once after an action (the live stream brings it within a second): the
// page's main module says how.
let refresher = async () => {};
export function onRefresh(fn) { refresher = fn; }
export function refresh() { return refresher(); }

export const shownOf = {};  // a paged table's id -> {items, render, empty, size, page}

// Fill `table` with a row per item; with `size`, a page of that many at a time and a
// pager under it (the page kept across the live updates).
export function rows(table, items, render, empty, size) {
  const body = $(table).tBodies[0];
  let shown = items;
  if (size) {
    const pages = Math.max(1, Math.ceil(items.length / size));
    const page = Math.min((shownOf[table] || {}).page || 0, pages - 1);
    shownOf[table] = {items, render, empty, size, page};
    shown = items.slice(page * size, (page + 1) * size);
    pager(table, page, pages, items.length, size);
  }
  put(body, shown.length ? shown.map(render).join("") :
    `<tr><td class="none" colspan="9">${empty}</td></tr>`);
}

function pager(table, page, pages, total, size) {
  let p = $(`${table}-pager`);
  if (!p) {
    p = document.createElement("div");
    p.id = `${table}-pager`;
    p.className = "pager";
    $(table).after(p);
    p.onclick = (event) => {
      const b = event.target.closest("button[data-page]");
      if (!b) return;
      const s = shownOf[table];
      s.page = Number(b.dataset.page);
      rows(table, s.items, s.render, s.empty, s.size);
    };
  }
  p.hidden = pages <= 1;
  put(p, `<button data-page="${page - 1}" ${page ? "" : "disabled"}>‹ previous</button>
    <span class="muted">${page * size + 1}–${Math.min(total, (page + 1) * size)} of ${total}</span>
    <button data-page="${page + 1}" ${page + 1 < pages ? "" : "disabled"}>next ›</button>`);
}
