// Shards: each one's leader, epoch, lease left, pending, outcomes and sweep lag, and the
// next due timers of the one chosen (#shard=3), refreshed with the rest.

import {$, api, esc, ms, rows, say, shardLink, time, timerLink} from "./util.js";
import {go} from "./nav.js";

let dueShard = null;

export function renderShards(o) {
  rows("shards", o.shards, (s) => `<tr data-shard="${s.shard}"><td>${shardLink(s.shard)}</td>
    <td class="leader">${s.leader ? esc(s.leader) : '<span class="none">none</span>'}</td>
    <td class="num">${s.epoch}</td><td>${ms(s.lease_ttl_ms)}</td><td class="pending num">${s.pending}</td><td class="num">${s.outcomes}</td><td>${ms(s.lag_ms)}</td></tr>`, "no shards");
  if (dueShard !== null) showDue(dueShard);
}

export async function showDue(shard) {
  dueShard = shard;
  try {
    const d = await api(`/api/shards/${shard}/due`);
    $("due-title").textContent = `Next due on shard ${shard}`;
    rows("due", d.due, (t) => `<tr><td>${timerLink(t.id)}</td>
      <td>${time(t.deadline_ms)}</td><td>${ms(t.time_left_ms)}</td></tr>`, "nothing pending");
  } catch (e) {
    say(e.message);
  }
}

export function startShards() {
  $("shards").onclick = (event) => {  // anywhere on a row, as on its number's link
    const tr = event.target.closest("tr[data-shard]");
    if (tr && !event.target.closest("a")) go({shard: tr.dataset.shard});
  };
}
