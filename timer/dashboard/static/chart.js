// The history's line charts: one SVG each, a point a bin, the largest value and 0 on a
// left axis, the period's first and last minute under it.

import {$, esc, put, time} from "./util.js";

export const COLOURS = {scheduled: "#8a63d2", expired: "#4a7bd0", completed: "#2e9e5b", cancelled: "#8b93a4",
  handled: "#1f9e89", failed: "#d0493a", dead: "#b4742f", pending: "#4a7bd0",
  lateness_p50_ms: "#2e9e5b", lateness_p99_ms: "#d0493a"};

// A series that may be short (the API's why_approximate: heard over pub/sub, or flushed
// every few seconds) is marked "≈", its key's tooltip saying why.

export const W = 400, H = 120;
// How wide the axis' labels may be, in the chart's own units: a 10-unit font's digit is
// at most 0.62 of it in the fonts a system-ui stack picks, a comma less. The axis is as
// wide as its longest label needs (a fixed 36 cut the first digit of "60,000").
const CHAR = 6.4, GAP = 4;

export function chart(id, points, keys, why = {}) {
  const T = 6;
  const values = points.flatMap((p) => keys.map((k) => p[k]).filter((v) => v != null));
  const top = Math.max(1, ...values);
  const topLabel = top.toLocaleString();
  const L = Math.max(24, Math.ceil(topLabel.length * CHAR) + 2 * GAP);
  const x = (i) => L + i * (W - L - 4) / Math.max(1, points.length - 1);
  const y = (v) => H - 16 - v * (H - 16 - T) / top;  // under it, the times: their descent inside too
  const paths = keys.map((k) => {
    let d = "";
    points.forEach((p, i) => { if (p[k] != null) d += `${d ? "L" : "M"}${x(i).toFixed(1)},${y(p[k]).toFixed(1)}`; });
    // a value with no neighbour draws no line: a dot, so one busy minute still shows
    const dots = points.map((p, i) => p[k] != null && (points[i - 1] || {})[k] == null && (points[i + 1] || {})[k] == null
      ? `<circle cx="${x(i).toFixed(1)}" cy="${y(p[k]).toFixed(1)}" r="2.5" fill="${COLOURS[k]}"/>` : "").join("");
    return `<path d="${d}" stroke="${COLOURS[k]}" stroke-width="1.5" fill="none" data-series="${k}"><title>${k}</title></path>${dots}`;
  }).join("");
  const first = points.length ? time(points[0].at_ms).slice(11, 16) : "";
  const last = points.length ? time(points[points.length - 1].at_ms).slice(11, 16) : "";
  const svg = $(id);
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  put(svg, `<line class="grid" x1="${L}" x2="${W}" y1="${y(top)}" y2="${y(top)}"/>
    <line class="grid" x1="${L}" x2="${W}" y1="${y(0)}" y2="${y(0)}"/>
    <text x="${L - GAP}" y="${y(top) + 4}" text-anchor="end">${topLabel}</text>
    <text x="${L - GAP}" y="${y(0) + 4}" text-anchor="end">0</text>
    <text x="${L}" y="${H - 4}">${first}</text><text x="${W - 2}" y="${H - 4}" text-anchor="end">${last}${last ? " UTC" : ""}</text>${paths}`);
  put($(id.replace("chart-", "key-")), keys.map((k) =>
    `<span class="key"${why[k] ? ` title="${esc(why[k])}"` : ""}>${swatch(COLOURS[k])}${k.replace("lateness_", "").replace("_ms", "")}${why[k] ? " ≈" : ""}</span>`).join(""));
}

// A series' colour in its key: a little SVG (no style attribute: the page's policy allows
// the stylesheet's styles only).
const swatch = (colour) => `<svg class="swatch" width="10" height="4" aria-hidden="true"><rect width="10" height="4" fill="${colour}"/></svg>`;
