// The job-timeout flow from Node: schedule a job's timeout, notify its key (the job is
// done), wait for the outcome; let another time out; receive their webhooks and check the
// signatures; handle both outcomes through a consumer group over Server-Sent Events. Configure with API, TOKEN, NS, WEBHOOK_SECRET, WEBHOOK_PORT (env); prints
// one JSON object of what happened. Run `tickwheel handle --webhook
// http://127.0.0.1:$WEBHOOK_PORT/ --on all` beside it for the webhook part.
"use strict";
const http = require("node:http");
const {Tickwheel, TickwheelError, verifySignature} = require("./tickwheel");

const env = process.env;
const client = new Tickwheel(env.API, env.TOKEN, env.NS || "default");
const secret = env.WEBHOOK_SECRET;

function receiveWebhooks(port, want) {  // resolves with the verified bodies of `want` ids
  const seen = new Map();
  return new Promise((resolve) => {
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
        seen.set(body.id, {...body, key: req.headers["tickwheel-idempotency-key"]});
        res.writeHead(204).end();
        if (want.every((id) => seen.has(id))) server.close(() => resolve(seen));
      });
    });
    server.listen(port, "127.0.0.1");
  });
}

async function main() {
  const run = `node-${process.pid}`;
  const done = `job:{${run}}`, late = `job:{${run}-late}`;
  const hooks = secret ? receiveWebhooks(Number(env.WEBHOOK_PORT), [done, late]) : null;
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
  const received = hooks ? Object.fromEntries(await hooks) : {};
  // as a handler: this run's outcomes through a consumer group, over SSE, each acked
  const handled = {};
  for await (const o of client.outcomes(`node-${run}`, "node-1")) {  // break: the stream ends
    if (o.id !== done && o.id !== late) {  // another run's: not ours to handle, but settled
      await client.ack(`node-${run}`, [o.ref]);
      continue;
    }
    handled[o.id] = {outcome: o.outcome, attempt: o.attempt, ref: o.ref};
    await client.ack(`node-${run}`, [o.ref]);
    if (handled[done] && handled[late]) break;
  }
  console.log(JSON.stringify({created: made.created, again: again.created,
    notified: notified.completed, completed: completed.outcome, expired: expired.outcome,
    lateness_ms: expired.lateness_ms, missing, webhooks: received, handled}));
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
