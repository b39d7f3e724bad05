// createEndpoint over real HTTP: what a record's function returns or
// throws becomes the answer docs/delivery.md defines.

import assert from "node:assert/strict";
import { Agent } from "node:http";
import { test } from "node:test";

import { FencedError, UnavailableError, createEndpoint, failed, fenced, KEEP_ALIVE_MS } from "../index.js";
import { body, keptLog, listen, post, rec, sleep } from "./support/http.js";

test("results come from return values and thrown errors", async (t) => {
  const url = await listen(
    t,
    createEndpoint(async (r) => {
      switch (r.key?.toString()) {
        case "returns-failed":
          return failed("no stock");
        case "throws":
          throw new Error("bad value");
        case "returns-fenced":
          return fenced("token 1187 < 1200");
        case "throws-fenced":
          throw new FencedError("stale");
        case "throws-string":
          throw "plain"; // eslint-disable-line no-throw-literal
        case "returns-object":
          return { status: "failed" }; // the function's own object: done
      }
    }),
  );
  const keys = ["ok", "returns-failed", "throws", "returns-fenced", "throws-fenced", "throws-string", "returns-object", null];
  const res = await post(url, body(keys.map((k, i) => rec(i, k))));
  assert.equal(res.status, 200);
  assert.equal(res.headers["content-type"], "application/json");
  assert.deepEqual(res.json, {
    results: [
      { status: "done" },
      { status: "failed", error: "no stock" },
      { status: "failed", error: "bad value" },
      { status: "fenced", error: "token 1187 < 1200" },
      { status: "fenced", error: "stale" },
      { status: "failed", error: "plain" },
      { status: "done" },
      { status: "done" },
    ],
  });
});

test("one record is answered with its result too", async (t) => {
  const url = await listen(t, createEndpoint(async () => fenced("a later owner wrote")));
  const res = await post(url, body([rec(7, "k")]));
  assert.deepEqual(res.json, { results: [{ status: "fenced", error: "a later owner wrote" }] });
});

test("a long error is cut to 512 bytes, not inside a character", async (t) => {
  const url = await listen(t, createEndpoint(async () => failed("é".repeat(1000))));
  const { json } = await post(url, body([rec(1, "k")]));
  const error = json.results[0].error;
  assert.ok(Buffer.byteLength(error) <= 512, `${Buffer.byteLength(error)} bytes`);
  assert.match(error, /^(é)+…$/);
});

test("a key's records run in order and stop at its first failure; other keys go on", async (t) => {
  const calls = [];
  const url = await listen(
    t,
    createEndpoint(async (r) => {
      calls.push(r.offset);
      await sleep(r.key.toString() === "a" ? 5 : 1);
      if (r.offset === 1) {
        return failed("offset 1 fails");
      }
      if (r.offset === 4) {
        throw new FencedError("stale");
      }
    }),
  );
  const records = [rec(0, "a"), rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, "c"), rec(5, "b"), rec(6, "c")];
  const { json } = await post(url, body(records));
  assert.deepEqual(
    json.results.map((r) => r.status),
    ["done", "failed", "done", "failed", "fenced", "done", "fenced"],
  );
  assert.equal(json.results[3].error, "an earlier record of the key failed");
  assert.equal(json.results[6].error, "an earlier record of the key was fenced");
  assert.deepEqual(calls.filter((o) => [0, 1, 3].includes(o)), [0, 1], "key a: 3 is not called after 1 failed");
  assert.deepEqual(calls.filter((o) => [2, 5].includes(o)), [2, 5], "key b in order");
  assert.ok(!calls.includes(6), "key c: 6 is not called after 4 was fenced");
});

test("records of different keys run at once, up to concurrency over all requests", async (t) => {
  let running = 0;
  let most = 0;
  const url = await listen(
    t,
    createEndpoint(
      async () => {
        running++;
        most = Math.max(most, running);
        await sleep(20);
        running--;
      },
      { concurrency: 3 },
    ),
  );
  const answers = await Promise.all([0, 1, 2].map((n) => post(url, body([rec(n * 2, `k${n}`), rec(n * 2 + 1, `j${n}`)]))));
  for (const a of answers) {
    assert.deepEqual(a.json.results, [{ status: "done" }, { status: "done" }]);
  }
  assert.equal(most, 3, "6 keys over 3 requests, 3 at once");
});

test("an UnavailableError answers the request 503 with Retry-After and starts nothing more", async (t) => {
  const calls = [];
  const url = await listen(
    t,
    createEndpoint(
      async (r) => {
        calls.push(r.offset);
        if (r.offset === 0) {
          throw new UnavailableError("database down", { retryAfter: 2.5 });
        }
      },
      { concurrency: 1 },
    ),
  );
  const res = await post(url, body([rec(0, "a"), rec(1, "b"), rec(2, "c")]));
  assert.equal(res.status, 503);
  assert.equal(res.headers["retry-after"], "3");
  assert.equal(res.text, "database down");
  assert.deepEqual(calls, [0]);
});

test("a request past its Keyshare-Deadline is not applied and is answered 504", async (t) => {
  let calls = 0;
  const url = await listen(t, createEndpoint(async () => calls++));
  const res = await post(url, body([rec(1, "k")]), { headers: { "Keyshare-Deadline": String(Date.now() - 1) } });
  assert.equal(res.status, 504);
  assert.match(res.text, /deadline passed before all its records started: its Keyshare-Deadline .* passed/);
  assert.equal(calls, 0);
});

test("the deadline aborts the running call's signal and starts no later record", { timeout: 5000 }, async (t) => {
  const seen = [];
  const url = await listen(
    t,
    createEndpoint(async (r, call) => {
      seen.push({ offset: r.offset, deadline: call.deadline?.getTime() });
      await new Promise((resolve) => call.signal.addEventListener("abort", resolve, { once: true }));
      seen.push({ offset: r.offset, reason: call.signal.reason.why });
    }),
  );
  const deadline = Date.now() + 150;
  const res = await post(url, body([rec(1, "k"), rec(2, "k")]), { headers: { "Keyshare-Deadline": String(deadline) } });
  assert.equal(res.status, 504);
  assert.deepEqual(seen, [
    { offset: 1, deadline },
    { offset: 1, reason: "deadline" },
  ]);
});

test("a request answered before its deadline is answered as usual", async (t) => {
  const url = await listen(t, createEndpoint(async () => {}));
  const res = await post(url, body([rec(1, "k")]), { headers: { "Keyshare-Deadline": String(Date.now() + 60_000) } });
  assert.deepEqual(res.json, { results: [{ status: "done" }] });
});

test("a malformed Keyshare-Deadline is answered 400", async (t) => {
  const log = keptLog();
  const url = await listen(t, createEndpoint(async () => {}, { log }));
  const res = await post(url, body([rec(1, "k")]), { headers: { "Keyshare-Deadline": "soon" } });
  assert.equal(res.status, 400);
  assert.match(res.text, /Keyshare-Deadline "soon" is not milliseconds since the Unix epoch/);
  assert.equal(log.lines.length, 1);
});

test("a request the member closes aborts its call and starts no later record", { timeout: 5000 }, async (t) => {
  const started = [];
  let aborted;
  const gone = new Promise((resolve) => {
    aborted = resolve;
  });
  const url = await listen(
    t,
    createEndpoint(async (r, call) => {
      started.push(r.offset);
      await new Promise((resolve) => call.signal.addEventListener("abort", resolve, { once: true }));
      aborted(call.signal.reason.why);
    }),
  );
  const agent = new Agent();
  const pending = post(url, body([rec(1, "k"), rec(2, "k")]), { agent }).catch((err) => err);
  await sleep(50);
  agent.destroy(); // the member closes the connection (a revoked range)
  assert.equal(await gone, "closed");
  assert.equal((await pending).code, "ECONNRESET");
  await sleep(20);
  assert.deepEqual(started, [1]);
});

test("the bearer token is checked", async (t) => {
  const url = await listen(t, createEndpoint(async () => {}, { token: "s3cret" }));
  const none = await post(url, body([rec(1, "k")]));
  assert.equal(none.status, 401);
  assert.equal(none.headers["www-authenticate"], "Bearer");
  assert.doesNotMatch(none.text, /s3cret/);
  const wrong = await post(url, body([rec(1, "k")]), { headers: { Authorization: "Bearer s3cre" } });
  assert.equal(wrong.status, 401);
  const right = await post(url, body([rec(1, "k")]), { headers: { Authorization: "Bearer s3cret" } });
  assert.equal(right.status, 200);
});

test("a method other than POST is answered 405", async (t) => {
  const url = await listen(t, createEndpoint(async () => {}));
  const res = await post(url, "", { method: "PUT" });
  assert.equal(res.status, 405);
  assert.equal(res.headers.allow, "POST");
});

test("a body over maxBodyBytes is answered 413", async (t) => {
  const url = await listen(t, createEndpoint(async () => {}, { maxBodyBytes: 100 }));
  const res = await post(url, body([rec(1, "k"), rec(2, "k")]));
  assert.equal(res.status, 413);
  assert.match(res.text, /over 100 bytes \(maxBodyBytes\): lower the member's --batch-size/);
});

test("connections are kept between requests", async (t) => {
  const server = createEndpoint(async () => {});
  let connections = 0;
  server.on("connection", () => connections++);
  const url = await listen(t, server);
  assert.equal(server.keepAliveTimeout, KEEP_ALIVE_MS);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  for (let i = 0; i < 3; i++) {
    const res = await post(url, body([rec(i, "k")]), { agent });
    assert.equal(res.status, 200);
  }
  assert.equal(connections, 1);
});

test("bad options are refused, naming the option", () => {
  assert.throws(() => createEndpoint(async () => {}, { concurency: 4 }), /unknown option "concurency": the options are concurrency, token/);
  assert.throws(() => createEndpoint(async () => {}, { toString: 4 }), /unknown option "toString"/);
  assert.throws(() => createEndpoint(async () => {}, { concurrency: 0 }), /concurrency 0: want a whole number of calls at once, 1 or more/);
  assert.throws(() => createEndpoint(async () => {}, { token: "" }), /token is empty/);
  assert.throws(() => createEndpoint("not a function"), /the first argument is string, want an async function/);
});
