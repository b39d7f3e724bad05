// createBatchEndpoint over real HTTP: one call per request, its records
// in request order, its answer one result per record.

import assert from "node:assert/strict";
import { test } from "node:test";

import { FencedError, UnavailableError, createBatchEndpoint, failed, fenced } from "../index.js";
import { body, keptLog, listen, post, rec, sleep } from "./support/http.js";

test("the function gets the request's records in order, decoded", async (t) => {
  let got;
  const url = await listen(
    t,
    createBatchEndpoint(async (records, call) => {
      got = { offsets: records.map((r) => r.offset), keys: records.map((r) => r.key?.toString() ?? null), member: call.member };
    }),
  );
  const res = await post(url, body([rec(5, "a"), rec(6, null), rec(7, "a")]));
  assert.deepEqual(res.json, { results: [{ status: "done" }, { status: "done" }, { status: "done" }] });
  assert.deepEqual(got, { offsets: [5, 6, 7], keys: ["a", null, "a"], member: "m-1" });
});

test("one entry per record becomes one result per record", async (t) => {
  const url = await listen(
    t,
    createBatchEndpoint(async () => [undefined, failed("no"), fenced("stale"), new Error("broke"), new FencedError("later owner"), { any: "value" }]),
  );
  const res = await post(url, body([0, 1, 2, 3, 4, 5].map((i) => rec(i, `k${i}`))));
  assert.deepEqual(res.json.results, [
    { status: "done" },
    { status: "failed", error: "no" },
    { status: "fenced", error: "stale" },
    { status: "failed", error: "broke" },
    { status: "fenced", error: "later owner" },
    { status: "done" },
  ]);
});

test("a thrown error answers every record", async (t) => {
  for (const [err, status] of [
    [new Error("database refused the batch"), "failed"],
    [new FencedError("a later owner wrote"), "fenced"],
  ]) {
    const url = await listen(
      t,
      createBatchEndpoint(async () => {
        throw err;
      }),
    );
    const { json } = await post(url, body([rec(1, "a"), rec(2, "b")]));
    assert.deepEqual(json.results, [
      { status, error: err.message },
      { status, error: err.message },
    ]);
  }
});

test("an UnavailableError, thrown or as an entry, answers 503", async (t) => {
  const thrower = await listen(
    t,
    createBatchEndpoint(async () => {
      throw new UnavailableError("pool exhausted", { retryAfter: 1 });
    }),
  );
  const a = await post(thrower, body([rec(1, "a")]));
  assert.equal(a.status, 503);
  assert.equal(a.headers["retry-after"], "1");
  const entry = await listen(t, createBatchEndpoint(async () => [undefined, new UnavailableError("replica lagging")]));
  const b = await post(entry, body([rec(1, "a"), rec(2, "b")]));
  assert.equal(b.status, 503);
  assert.equal(b.text, "replica lagging");
});

test("results that are not one per record are the endpoint's bug: 500, logged", async (t) => {
  const log = keptLog();
  const url = await listen(t, createBatchEndpoint(async () => [undefined], { log }));
  const res = await post(url, body([rec(1, "a"), rec(2, "b")]));
  assert.equal(res.status, 500);
  assert.match(res.text, /the batch function returned 1 results for 2 records/);
  assert.equal(log.lines.length, 1);
});

test("concurrency bounds the batches running at once", async (t) => {
  let running = 0;
  let most = 0;
  const url = await listen(
    t,
    createBatchEndpoint(
      async () => {
        running++;
        most = Math.max(most, running);
        await sleep(20);
        running--;
      },
      { concurrency: 2 },
    ),
  );
  await Promise.all([0, 1, 2, 3, 4].map((i) => post(url, body([rec(i, `k${i}`)]))));
  assert.equal(most, 2);
});

test("a batch past its deadline is not called", async (t) => {
  let calls = 0;
  const url = await listen(t, createBatchEndpoint(async () => calls++));
  const res = await post(url, body([rec(1, "a")]), { headers: { "Keyshare-Deadline": String(Date.now() - 1) } });
  assert.equal(res.status, 504);
  assert.equal(calls, 0);
});
