// Decoding a delivery request's body (docs/delivery.md, "Request").

import assert from "node:assert/strict";
import { test } from "node:test";

import { decodeRequest } from "../index.js";
import { body, rec } from "./support/http.js";

const decode = (/** @type {unknown} */ b) => decodeRequest(Buffer.from(typeof b === "string" ? b : JSON.stringify(b)));

/** Runs f and returns what it threw. */
function thrown(f) {
  try {
    f();
  } catch (err) {
    return err;
  }
  assert.fail("no error thrown");
}

test("every field of a record is decoded", () => {
  const r = rec(42, "order-17", {
    headers: [
      { key: "traceparent", value: Buffer.from("00-4bf9").toString("base64") },
      { key: "empty", value: "" },
      { key: "none", value: null },
      { key: "traceparent", value: Buffer.from("again").toString("base64") },
    ],
    attempt: 3,
  });
  const { member, records, keys } = decode(body([r]));
  assert.equal(member, "m-1");
  assert.deepEqual(keys, [r.key]);
  const [got] = records;
  assert.equal(got.topic, "orders");
  assert.equal(got.partition, 3);
  assert.equal(got.offset, 42);
  assert.equal(got.timestamp, 1767323045123);
  assert.deepEqual(got.key, Buffer.from("order-17"));
  assert.deepEqual(got.value, Buffer.from("value-42"));
  assert.deepEqual(got.headers, [
    ["traceparent", Buffer.from("00-4bf9")],
    ["empty", Buffer.alloc(0)],
    ["none", null],
    ["traceparent", Buffer.from("again")],
  ]);
  assert.equal(got.attempt, 3);
  assert.equal(got.hash, 2864434397);
  assert.deepEqual(got.range, { lo: 2147483648, hi: 4294967296 });
  assert.equal(got.fence, 1187);
  assert.equal(got.member, "m-1");
});

test("null stays null and empty stays empty", () => {
  const [got] = decode(body([rec(1, null, { value: "", timestamp: null, range: null, fence: null })])).records;
  assert.equal(got.key, null);
  assert.deepEqual(got.value, Buffer.alloc(0));
  assert.equal(got.timestamp, null);
  assert.equal(got.range, null);
  assert.equal(got.fence, null);
  const [nullValue] = decode(body([rec(2, "k", { value: null })])).records;
  assert.equal(nullValue.value, null);
});

test("a header name that is not UTF-8 comes as its exact bytes", () => {
  const raw = Buffer.from([0x61, 0xff, 0x62]);
  const [got] = decode(body([rec(1, "k", { headers: [{ key: "a\ufffdb", key_bytes: raw.toString("base64"), value: "" }] })])).records;
  assert.deepEqual(got.headers[0][0], raw);
});

test("fields the kit does not know are ignored", () => {
  const { records } = decode({ ...body([rec(1, "k", { future: { x: 1 } })]), also: "new" });
  assert.equal(records[0].offset, 1);
  assert.equal("future" in records[0], false);
});

test("the largest exact offset is kept; a larger one is refused, not rounded", () => {
  const max = Number.MAX_SAFE_INTEGER;
  assert.equal(decode(body([rec(max, "k")])).records[0].offset, max);
  // 2^53 + 1 has no number of its own: JSON.parse would make it 2^53.
  const text = JSON.stringify(body([rec(0, "k")])).replace('"offset":0', '"offset":9007199254740993');
  const err = thrown(() => decode(text));
  assert.equal(err.status, 500);
  assert.match(err.message, /record 0's "offset" is beyond 2\^53/);
});

test("another body version is answered 501", () => {
  const err = thrown(() => decode({ version: 2, member: "m", records: [] }));
  assert.equal(err.status, 501);
  assert.match(err.message, /body version 2: this endpoint \(keyshare-endpoint\) reads version 1/);
});

test("a body that is not a delivery request is answered 400, naming what is wrong", () => {
  for (const [b, want] of [
    ["{", /the body is not JSON/],
    ["[1]", /not a JSON object/],
    [{ version: 1, member: "m" }, /"records" is missing, want a list/],
    [body([rec(1, "k", { offset: "7" })]), /record 0's "offset" is "7", want an integer/],
    [body([rec(1, "k"), rec(2, "k", { key: 5 })]), /record 1's "key" is 5, want base64 or null/],
    [body([rec(1, "k", { headers: [{ value: "" }] })]), /record 0's "headers"\[0\] is/],
    [body([rec(1, "k", { topic: null })]), /record 0's "topic" is null, want a string/],
  ]) {
    const err = thrown(() => decode(b));
    assert.equal(err.status, 400, err.message);
    assert.match(err.message, want);
  }
});
