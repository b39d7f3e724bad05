// A counting endpoint built with the kit's keyed state, the one
// state_test.go runs beside real `keyshare member --deliver --state`
// processes. It counts each key's records using only the state the member
// sends (record.state) and answers the new count (record.setState): it
// keeps nothing of its own, so members can crash and ranges move without
// losing a count. Each answered record is a line {"member", "offset"} in
// --log; it prints "listening on PORT" once it listens.
//
//   node testdata/state-endpoint.js --log answers.jsonl [--batch] [--break previous|sent]
//
// --batch serves through createBatchEndpoint; without it createEndpoint
// calls the function once per record. --break breaks the kit on purpose,
// so that the Go test can be seen to fail. "previous": record.state reads
// only the state the request sent, as a kit ignoring "previous" would, so
// a key's later records of a batch count from nothing. "sent": the kit
// drops the state the request sends, so each request counts from nothing.

import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createBatchEndpoint, createEndpoint } from "../index.js";

const { values: args } = parseArgs({
  options: {
    port: { type: "string", default: "0" },
    log: { type: "string" },
    batch: { type: "boolean", default: false },
    break: { type: "string" },
  },
});
if (args.log === undefined || ![undefined, "previous", "sent"].includes(args.break)) {
  console.error("usage: state-endpoint.js --log FILE [--batch] [--break previous|sent]");
  process.exit(2);
}

let broken = false;

/**
 * Replaces the records' state getter (lib/state.js) with one that ignores
 * "previous", or the state sent.
 */
function breakKit(/** @type {any} */ record) {
  const [hidden] = Object.getOwnPropertySymbols(record);
  if (broken || hidden === undefined) {
    return;
  }
  const ignoringPrevious = function () {
    return this[hidden]?.sent ?? null;
  };
  const ignoringSent = function () {
    for (let s = this[hidden]; s?.previous; ) {
      s = s.previous;
      if (s.changed) {
        return s.value;
      }
    }
    return null;
  };
  Object.defineProperty(Object.getPrototypeOf(record), "state", { get: args.break === "previous" ? ignoringPrevious : ignoringSent });
  broken = true;
}

/** @param {import("../index.js").DeliveredRecord} record */
function count(record) {
  if (args.break !== undefined) {
    breakKit(record);
  }
  const n = record.state === null ? 0 : Number(record.state.toString());
  record.setState(Buffer.from(String(n + 1)));
}

/** @param {import("../index.js").DeliveredRecord[]} records */
function logged(records) {
  appendFileSync(args.log, records.map((r) => JSON.stringify({ member: r.member, offset: r.offset }) + "\n").join(""));
}

const options = { concurrency: 64 };
const server = args.batch
  ? createBatchEndpoint(async (records) => {
      records.forEach(count);
      logged(records);
    }, options)
  : createEndpoint(async (record) => {
      count(record);
      logged([record]);
    }, options);

server.listen(Number(args.port), "127.0.0.1", () => {
  console.log(`listening on ${server.address().port}`);
});
