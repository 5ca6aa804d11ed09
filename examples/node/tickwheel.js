// A small tickwheel client for Node (>= 18: global fetch), over the HTTP API that
// `tickwheel serve` answers, and the check of a webhook's signature. No dependency.
"use strict";
const crypto = require("node:crypto");

class TickwheelError extends Error {
  constructor(status, body) {
    super(`${status} ${body.kind}: ${body.error}`);
    this.status = status;
    this.kind = body.kind;        // the library's error class, e.g. "DuplicateTimer"
    this.exitCode = body.exit_code;
  }
}

class Tickwheel {
  constructor(api, token, namespace = "default") {
    this.base = `${api.replace(/\/$/, "")}/v1/namespaces/${encodeURIComponent(namespace)}`;
    this.token = token;
  }

  async call(method, path, body) {
    const response = await fetch(this.base + path, {
      method,
      headers: {"Authorization": `Bearer ${this.token}`, "Content-Type": "application/json"},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await response.json();
    if (!response.ok) throw new TickwheelError(response.status, data);
    return data;
  }

  // {id, delay_ms | deadline_ms, payload?, watch?, need?}: the timer (created: false if it existed)
  schedule(timer) { return this.call("POST", "/timers", timer); }
  scheduleMany(items) { return this.call("POST", "/timers/batch", {items}); }
  get(id) { return this.call("GET", `/timers/${encodeURIComponent(id)}`); }
  cancel(id) { return this.call("POST", `/timers/${encodeURIComponent(id)}/cancel`, {}); }
  notify(keys) { return this.call("POST", "/notify", {keys}); }
  // its outcome once decided; a TickwheelError with status 408 if still pending after timeoutS
  wait(id, timeoutS = 10) {
    return this.call("GET", `/timers/${encodeURIComponent(id)}/outcome?timeout_s=${timeoutS}`);
  }

  // The outcomes of consumer group `group` for `consumer`, as they come (Server-Sent
  // Events): an async iterator of outcomes, each with its `ref`. Settle each with ack,
  // retry or deadLetter; one not settled within reclaimIdleMs is delivered again.
  async *outcomes(group, consumer, {reclaimIdleMs = 60000, signal} = {}) {
    const url = `${this.base}/groups/${encodeURIComponent(group)}/events?consumer=` +
      `${encodeURIComponent(consumer)}&reclaim_idle_ms=${reclaimIdleMs}`;
    const response = await fetch(url, {headers: {"Authorization": `Bearer ${this.token}`}, signal});
    if (!response.ok) throw new TickwheelError(response.status, await response.json());
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {  // one event: "name: value" lines
        const event = {};
        for (const line of buffer.slice(0, end).split("\n")) {
          const at = line.indexOf(": ");
          if (at > 0) event[line.slice(0, at)] = line.slice(at + 2);
        }
        buffer = buffer.slice(end + 2);
        if (event.event === "outcome") yield JSON.parse(event.data);
      }
    }
  }

  // One batch of the group's outcomes for `consumer` (a long poll of at most waitMs);
  // with a short reclaimIdleMs it also takes back what was delivered and never settled.
  async outcomesBatch(group, consumer, {count = 100, waitMs = 1000, reclaimIdleMs = 60000} = {}) {
    const query = `consumer=${encodeURIComponent(consumer)}&count=${count}&wait_ms=${waitMs}` +
      `&reclaim_idle_ms=${reclaimIdleMs}`;
    return (await this.call("GET", `/groups/${encodeURIComponent(group)}/outcomes?${query}`)).outcomes;
  }

  ack(group, refs) { return this.call("POST", `/groups/${encodeURIComponent(group)}/ack`, {refs}); }
  retry(group, ref, delayMs) {
    return this.call("POST", `/groups/${encodeURIComponent(group)}/retry`, {ref, delay_ms: delayMs});
  }
  deadLetter(group, ref, error) {
    return this.call("POST", `/groups/${encodeURIComponent(group)}/dead`, {ref, error});
  }
}

// True if `header` (Tickwheel-Signature: t=<unix seconds>,v1=<hex>) signs the raw request
// body with `secret` and is at most `toleranceS` old.
function verifySignature(secret, header, rawBody, toleranceS = 300, now = Date.now() / 1000) {
  const fields = Object.fromEntries(String(header || "").split(",").map((p) => p.split("=", 2)));
  const t = Number(fields.t);
  if (!Number.isInteger(t) || !fields.v1 || Math.abs(now - t) > toleranceS) return false;
  const expected = crypto.createHmac("sha256", secret)
    .update(Buffer.concat([Buffer.from(`${t}.`), Buffer.from(rawBody)])).digest();
  const given = Buffer.from(fields.v1, "hex");
  return given.length === expected.length && crypto.timingSafeEqual(given, expected);
}

module.exports = {Tickwheel, TickwheelError, verifySignature};
