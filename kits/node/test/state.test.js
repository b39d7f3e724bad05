// Keyed state (docs/delivery.md, "Keyed state") through the kit, over
// real HTTP: the state each record comes with, the change in its result.

import assert from "node:assert/strict";
import { test } from "node:test";

import { createBatchEndpoint, createEndpoint, decodeRequest, failed } from "../index.js";
import { body, keptLog, listen, post, rec } from "./support/http.js";

const value = (/** @type {string | null} */ s) => ({ value: s === null ? null : Buffer.from(s).toString("base64") });
const sent = (/** @type {string | null} */ s) => ({ state: value(s) });
const PREVIOUS = { state: { previous: true } };

/** Counts the key's records in its state; "fail" fails (its change dropped), "stop" deletes. */
async function count(/** @type {any} */ record) {
  if (record.value.toString() === "fail") {
    record.setState(Buffer.from("999"));
    return failed("told to");
  }
  if (record.value.toString() === "stop") {
    return record.deleteState();
  }
  const n = record.state === null ? 0 : Number(record.state.toString());
  record.setState(Buffer.from(String(n + 1)));
}

const decode = (/** @type {object[]} */ records) => decodeRequest(Buffer.from(JSON.stringify(body(records)))).records;

test("a record reads the state it was sent; none without --state", () => {
  const [a, b, c, d] = decode([rec(1, "a", sent("12")), rec(2, "b", sent(null)), rec(3, "c", { state: { value: "" } }), rec(4, "d")]);
  assert.deepEqual([a.state, b.state, c.state, d.state], [Buffer.from("12"), null, Buffer.alloc(0), null]);
  assert.deepEqual([a.stateKept, b.stateKept, c.stateKept, d.stateKept], [true, true, true, false]);
  assert.equal(JSON.stringify(a).includes("state"), false, "the state stays out of a record's JSON");
});

test("a key's later record reads what its earlier ones left", () => {
  const [a1, b1, a2, a3] = decode([rec(1, "a", sent("3")), rec(2, "b", sent("x")), rec(3, "a", PREVIOUS), rec(4, "a", PREVIOUS)]);
  assert.deepEqual(a2.state, Buffer.from("3"), "nothing changed yet: the state sent with offset 1");
  a1.setState(Buffer.from("4"));
  assert.deepEqual(a2.state, Buffer.from("4"));
  assert.deepEqual(a3.state, Buffer.from("4"), "offset 3 changed nothing: what offset 1 left");
  a2.deleteState();
  assert.equal(a3.state, null);
  assert.deepEqual(b1.state, Buffer.from("x"), "another key's state is its own");
});

test("a state the kit cannot read is answered 400, naming it", async (t) => {
  const url = await listen(t, createEndpoint(count, { log: keptLog() }));
  for (const [state, want] of [
    ["MTI=", `record 0's "state" is "MTI="`],
    [{}, `record 0's "state.value" is missing`],
    [{ value: 12 }, `record 0's "state.value" is 12`],
    [{ previous: true }, "no earlier record of the key in this request"],
  ]) {
    const res = await post(url, body([rec(1, "a", { state })]));
    assert.equal(res.status, 400, JSON.stringify(state));
    assert.match(res.text, new RegExp(want.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")));
  }
});

test("results carry a done record's change: put, empty, delete, none", async (t) => {
  const url = await listen(
    t,
    createEndpoint(async (r) => {
      if (r.offset === 1) r.setState(Buffer.from("s"));
      if (r.offset === 2) r.setState(new Uint8Array(0));
      if (r.offset === 3) r.deleteState();
    }),
  );
  const res = await post(url, body([1, 2, 3, 4].map((i) => rec(i, `k${i}`, sent("old")))));
  assert.deepEqual(res.json.results, [
    { status: "done", state: value("s") },
    { status: "done", state: { value: "" } },
    { status: "done", state: { value: null } },
    { status: "done" },
  ]);
});

test("a batch of one key counts on from record to record", async (t) => {
  const url = await listen(t, createEndpoint(count));
  const res = await post(url, body([rec(1, "a", sent("3")), rec(2, "b", sent(null)), rec(3, "a", PREVIOUS), rec(4, "a", PREVIOUS), rec(5, "b", PREVIOUS)]));
  assert.deepEqual(
    res.json.results.map((r) => r.state),
    [value("4"), value("1"), value("5"), value("6"), value("2")],
  );
});

test("a failed record changes nothing, nor do its key's later ones", async (t) => {
  const url = await listen(t, createEndpoint(count));
  const res = await post(url, body([rec(1, "a", sent(null)), rec(2, "a", { ...PREVIOUS, value: Buffer.from("fail").toString("base64") }), rec(3, "a", PREVIOUS)]));
  assert.deepEqual(res.json.results, [
    { status: "done", state: value("1") },
    { status: "failed", error: "told to" },
    { status: "failed", error: "an earlier record of the key failed" },
  ]);
});

test("a change without --state answers 503 naming --state", async (t) => {
  const url = await listen(t, createEndpoint(count));
  const res = await post(url, body([rec(1, "a")]));
  assert.equal(res.status, 503, "the member's set-up, not the record: it waits, dead-lettering nothing");
  assert.match(res.text, /run keyshare member with --state/);
});

test("a null key has no state; a state is bytes", async (t) => {
  const url = await listen(
    t,
    createEndpoint(async (r) => {
      r.setState(r.key === null ? Buffer.from("1") : "text");
    }),
  );
  const res = await post(url, body([rec(1, null, sent(null)), rec(2, "a", sent(null))]));
  assert.equal(res.json.results[0].status, "failed");
  assert.match(res.json.results[0].error, /null key, which has no state/);
  assert.match(res.json.results[1].error, /a state is bytes; pass Buffer.from\(text\)/);
});

test("a batch function's later records see its earlier changes; a failed result's change is dropped", async (t) => {
  const url = await listen(
    t,
    createBatchEndpoint(async (records) => {
      for (const r of records) {
        r.setState(Buffer.from(String(Number(r.state?.toString() ?? "0") + 1)));
      }
      return records.map((r) => (r.offset === 5 ? failed("no") : undefined));
    }),
  );
  const res = await post(url, body([rec(1, "a", sent("7")), rec(2, "b", sent(null)), rec(3, "a", PREVIOUS), rec(4, "b", PREVIOUS), rec(5, "c", sent(null))]));
  assert.deepEqual(res.json.results, [
    { status: "done", state: value("8") },
    { status: "done", state: value("1") },
    { status: "done", state: value("9") },
    { status: "done", state: value("2") },
    { status: "failed", error: "no" },
  ]);
});
