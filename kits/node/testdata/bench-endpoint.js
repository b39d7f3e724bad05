// The endpoint of bench_test.go: Parallel Consumer's workload (each
// record's work uniform in 0–5 ms, drawn from its offset as keyshare-bench
// draws it) slept at an endpoint built with the kit.
//
//   node testdata/bench-endpoint.js --expect N [--mode record|batch] [--concurrency 100] [--work-ms 5]
//
// It prints "listening on PORT", then, once N distinct records are done,
// "done N ELAPSED_MS SLEPT_MS": the time from the first record done to the
// N-th, and the sum of the sleeps the records took (node's timers wake on
// whole milliseconds, so a record slept at least 1 ms, and about the
// work's truncated milliseconds plus the event loop's lateness).
// --mode record calls the function once per record (a request's keys at
// once); --mode batch once per request, its records one after another,
// as keyshare-bench's own endpoint does.

import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

import { createBatchEndpoint, createEndpoint } from "../index.js";

const { values: args } = parseArgs({
  options: {
    port: { type: "string", default: "0" },
    expect: { type: "string" },
    mode: { type: "string", default: "record" },
    concurrency: { type: "string", default: "100" },
    "work-ms": { type: "string", default: "5" },
  },
});
const expect = Number(args.expect);
if (!Number.isInteger(expect) || expect < 1 || !["record", "batch"].includes(args.mode)) {
  console.error("bench-endpoint.js: want --expect N (records), --mode record or batch");
  process.exit(2);
}
const maxWorkNs = BigInt(Math.round(Number(args["work-ms"]) * 1e6));
const mask = (1n << 64n) - 1n;

/** A record's work in ms: keyshare-bench's uniformWork, a mix of its offset. */
function workMs(/** @type {number} */ offset, /** @type {number} */ partition) {
  if (maxWorkNs === 0n) {
    return 0;
  }
  let x = (BigInt(offset) * 0x9e3779b97f4a7c15n + BigInt(partition)) & mask;
  x ^= x >> 31n;
  x = (x * 0xbf58476d1ce4e5b9n) & mask;
  x ^= x >> 29n;
  return Number(x % (maxWorkNs + 1n)) / 1e6;
}

const done = new Set();
let first = 0;
let slept = 0;

/** @param {import("../index.js").DeliveredRecord} r */
async function work(r) {
  const ms = workMs(r.offset, r.partition);
  if (ms > 0) {
    const began = performance.now();
    await sleep(ms);
    slept += performance.now() - began;
  }
  if (done.has(r.offset)) {
    return;
  }
  done.add(r.offset);
  if (done.size === 1) {
    first = performance.now();
  }
  if (done.size === expect) {
    console.log(`done ${expect} ${(performance.now() - first).toFixed(1)} ${slept.toFixed(1)}`);
  }
}

const options = { concurrency: Number(args.concurrency) };
const server =
  args.mode === "batch"
    ? createBatchEndpoint(async (records) => {
        for (const r of records) {
          await work(r);
        }
      }, options)
    : createEndpoint(work, options);

server.listen(Number(args.port), "127.0.0.1", () => {
  console.log(`listening on ${server.address().port}`);
});
