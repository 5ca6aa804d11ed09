// The job-timeout flow from Node: schedule a job's timeout, notify its key (the job is
// done), wait for the outcome; let another time out; receive their webhooks and check the
// signatures; handle both outcomes through a consumer group over Server-Sent Events, and
// settle everything the group was given. Configuration: see README.md here. Prints one
// JSON object of what happened.
"use strict";
const http = require("node:http");
const {Tickwheel, TickwheelError, verifySignature} = require("./tickwheel");

const env = process.env;
function usage(message) {  // a setting missing or wrong: say which, and what to set
  console.error(`demo.js: ${message} (see the README beside demo.js)`);
  process.exit(2);
}
if (!env.API) usage("set API to the HTTP API's base URL, e.g. API=http://127.0.0.1:8000");
const secret = env.WEBHOOK_SECRET;
const hookPort = Number(env.WEBHOOK_PORT);
if (secret && secret.length < 16) {
  usage("WEBHOOK_SECRET must be at least 16 characters, as `tickwheel handle --webhook-secret` " +
    "requires");
}
if (secret && !(Number.isInteger(hookPort) && hookPort > 0 && hookPort < 65536)) {
  usage("WEBHOOK_SECRET is set: set WEBHOOK_PORT too, the port `tickwheel handle --webhook` " +
    "posts to (e.g. 9000), or unset WEBHOOK_SECRET to skip the webhooks");
}
if (env.WEBHOOK_PORT && !secret) {
  usage("WEBHOOK_PORT is set: set WEBHOOK_SECRET too, the one given to `tickwheel handle`");
}
const client = new Tickwheel(env.API, env.TOKEN, env.NS || env.TICKWHEEL_NAMESPACE || "default");

// Receives signed webhooks on `port`: `.seen` resolves with the verified bodies once each
// of the `want` ids came. Every signed post is answered 204 (a runner's earlier outcomes
// too, and its retries of them) until `.close()`, at the end of the run.
function receiveWebhooks(port, want) {
  const seen = new Map();
  let resolveSeen;
  const done = new Promise((resolve) => { resolveSeen = resolve; });
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      if (!verifySignature(secret, req.headers["tickwheel-signature"], raw)) {
        res.writeHead(401).end();
        return;
      }
      const body = JSON.parse(raw);
      if (want.includes(body.id)) {
        seen.set(body.id, {...body, key: req.headers["tickwheel-idempotency-key"]});
      }
      res.writeHead(204).end();
      if (want.every((id) => seen.has(id))) resolveSeen(seen);
    });
  });
  server.on("error", (e) => usage(`WEBHOOK_PORT ${port}: ${e.message}`));
  server.listen(port, "127.0.0.1");
  return {seen: done, close: () => new Promise((resolve) => {
    server.close(resolve);
    server.closeIdleConnections();
  })};
}

async function main() {
  const run = `node-${process.pid}`;
  const done = `job:{${run}}`, late = `job:{${run}-late}`;
  const hooks = secret ? receiveWebhooks(hookPort, [done, late]) : null;
  const made = await client.schedule({id: done, delay_ms: 60000, payload: {from: "node"},
    watch: [`${done}:finished`]});
  const again = await client.schedule({id: done, delay_ms: 60000, payload: {from: "node"},
    watch: [`${done}:finished`]});
  const notified = await client.notify([`${done}:finished`]);
  const completed = await client.wait(done, 10);
  await client.schedule({id: late, delay_ms: 200});
  const expired = await client.wait(late, 20);
  let missing = null;
  try { await client.get("no-such-timer"); } catch (e) {
    if (!(e instanceof TickwheelError)) throw e;
    missing = {status: e.status, kind: e.kind, exit_code: e.exitCode};
  }
  const received = hooks ? Object.fromEntries(await hooks.seen) : {};
  // as a handler: this run's outcomes through a consumer group, over SSE, each acked;
  // another run's (the group reads what it has not settled yet) are acked unhandled
  const group = env.GROUP || "node-demo", consumer = "node-1";
  const handled = {};
  let settled = 0;
  const stop = new AbortController();
  for await (const o of client.outcomes(group, consumer, {signal: stop.signal})) {
    await client.ack(group, [o.ref]);
    settled += 1;
    if (o.id === done || o.id === late) {
      handled[o.id] = {outcome: o.outcome, attempt: o.attempt, ref: o.ref};
    }
    if (handled[done] && handled[late]) break;
  }
  stop.abort();
  // the stream reads ahead of us: settle what it was given and we never saw (taken back
  // once idle for a second), so the group holds nothing back from trimming
  for (let quiet = 0; quiet < 2;) {
    const batch = await client.outcomesBatch(group, consumer, {waitMs: 1100, reclaimIdleMs: 1000});
    if (batch.length) await client.ack(group, batch.map((o) => o.ref));
    settled += batch.length;
    quiet = batch.length ? 0 : quiet + 1;
  }
  if (hooks) await hooks.close();
  console.log(JSON.stringify({created: made.created, again: again.created,
    notified: notified.completed, completed: completed.outcome, expired: expired.outcome,
    lateness_ms: expired.lateness_ms, missing, webhooks: received, handled, group, settled}));
}

main().catch((e) => {
  const refused = e instanceof TypeError && e.message === "fetch failed";
  if (refused) {  // nothing listens at API: say so, not a stack
    const why = e.cause && e.cause.code ? ` (${e.cause.code})` : "";
    console.error(`demo.js: cannot reach API=${env.API}${why}: is \`tickwheel serve\` running there?`);
  } else {
    console.error(e.stack || String(e));
  }
  process.exit(1);
});
