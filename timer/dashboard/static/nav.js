// The page's views and their addresses. A view is a path (/groups); what it shows is
// in the hash (/groups#group=mailer, /timers#find=job%3A*&state=pending), so a view can
// be linked, bookmarked and opened in a new tab, and the back and forward buttons move
// between views. Every link is a real href; a plain click on one to a view of this page
// is taken here (no reload: the live stream stays), any other (middle, ctrl, shift) is
// the browser's. Forms change the hash through go(); apply() (the main module's) shows
// what the address says: at load, after a link or a form, and on back or forward.

import {$, NS, address} from "./util.js";

export const VIEWS = {
  overview: {path: "/", title: "Overview"},
  timers: {path: "/timers", title: "Timers"},
  groups: {path: "/groups", title: "Groups"},
  dead: {path: "/dead-letters", title: "Dead letters"},
  schedules: {path: "/schedules", title: "Schedules"},
  workers: {path: "/workers", title: "Workers"},
  shards: {path: "/shards", title: "Shards"},
};
const BY_PATH = Object.fromEntries(Object.entries(VIEWS).map(([name, v]) => [v.path, name]));

// The view that shows each key of the hash: an address of the page from before it had
// views (/#group=mailer, a bookmark) opens on that view.
const OWNER = {
  timer: "timers", find: "timers", state: "timers", okind: "timers", omatch: "timers",
  ofield: "timers", ovalue: "timers", osince: "timers", ogroup: "timers", ostate: "timers",
  pmatch: "timers", pfield: "timers", pvalue: "timers", pprio: "timers", after: "timers",
  group: "groups", dead: "dead", dgroup: "dead", derror: "dead", dmatch: "dead",
  schedule: "schedules", worker: "workers", shard: "shards",
};

export function currentView() {
  return BY_PATH[location.pathname.replace(/(.)\/$/, "$1")] || "overview";
}

export function view() {  // what the address's hash says
  return Object.fromEntries(new URLSearchParams(location.hash.slice(1)));
}

let applier = () => {};

// Change what this view shows: `patch` over the hash (a key set to "" is dropped).
export function go(patch) {
  const next = {...view(), ...patch};
  for (const k of Object.keys(next)) if (next[k] === "" || next[k] == null) delete next[k];
  const hash = "#" + new URLSearchParams(next).toString();
  if (hash !== location.hash) history.pushState(null, "", hash === "#" ? location.pathname + location.search : hash);
  applier();
}

function open(href) {  // another view (or this one afresh), as a link says
  history.pushState(null, "", href);
  window.scrollTo(0, 0);
  applier();
}

// Show the current view's parts (and only those), and mark its entry in the navigation.
export function showView() {
  const name = currentView();
  for (const part of document.querySelectorAll("[data-view]")) part.hidden = part.dataset.view !== name;
  for (const a of document.querySelectorAll("nav a[data-nav]")) {
    if (a.dataset.nav === name) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  document.title = `${VIEWS[name].title} · tickwheel`;
  return name;
}

// An address of the page from before it had views (/#group=mailer): the view that shows
// it, in its place; at load, and when only the hash was changed (a typed or pasted one).
function canonical() {
  if (currentView() !== "overview") return;
  const owner = Object.keys(view()).map((k) => OWNER[k]).find(Boolean);
  if (owner) history.replaceState(null, "", VIEWS[owner].path + location.search + location.hash);
}

export function startNavigation(apply) {
  applier = () => { canonical(); apply(); };
  canonical();
  for (const a of document.querySelectorAll("nav a[data-nav]")) a.href = address(VIEWS[a.dataset.nav].path);
  if (NS) for (const a of document.querySelectorAll("a.card[href]")) a.href = address(a.getAttribute("href"));
  document.addEventListener("click", (event) => {
    if (event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;  // the browser's
    const a = event.target.closest("a[href]");
    if (!a || a.target || a.hasAttribute("download")) return;
    const to = new URL(a.href);
    if (to.origin !== location.origin || !(to.pathname in BY_PATH) || to.search !== location.search) return;
    event.preventDefault();
    // a link to a thing in this same view keeps the rest of what the view shows (the
    // search a found timer came from); a new tab opens the thing alone
    if (to.pathname === location.pathname && !a.dataset.nav) go(Object.fromEntries(new URLSearchParams(to.hash.slice(1))));
    else open(to.pathname + to.search + to.hash);
  });
  window.addEventListener("popstate", applier);
  $("namespace").onchange = (event) => {
    location.search = `?ns=${encodeURIComponent(event.target.value)}`;
  };
}
