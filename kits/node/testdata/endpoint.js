// A delivery endpoint built with the kit, the one kit_test.go runs beside
// real `keyshare member --deliver` processes. It applies each record by
// appending a JSON line with what the kit decoded to --log (synchronously,
// so the log's order is the order records were applied), and prints
// "listening on PORT" once it listens.
//
//   node testdata/endpoint.js --log applied.jsonl [--port 0] [--batch] [--token T] [--break drop|late]
//
// --token makes it want "Authorization: Bearer T" (the kit's token option).
// --batch serves through createBatchEndpoint, applying a request's records
// one after another; without it createEndpoint calls the function once per
// record. --break makes the endpoint wrong on purpose, so that the Go
// test's checks can be seen to fail: "drop" answers every 50th record done
// without applying it, "late" applies each record up to 100 ms (at random)
// after answering done, so a key's next record can be applied before it.

import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { createBatchEndpoint, createEndpoint } from "../index.js";

const { values: args } = parseArgs({
  options: {
    port: { type: "string", default: "0" },
    log: { type: "string" },
    batch: { type: "boolean", default: false },
    break: { type: "string" },
    token: { type: "string" },
  },
});
if (args.log === undefined) {
  console.error("endpoint.js: --log FILE is required");
  process.exit(2);
}
if (args.break !== undefined && !["drop", "late"].includes(args.break)) {
  console.error(`endpoint.js: --break ${JSON.stringify(args.break)}: want drop or late`);
  process.exit(2);
}

let handled = 0;

/** @param {import("../index.js").DeliveredRecord} r */
function apply(r) {
  handled++;
  if (args.break === "drop" && handled % 50 === 0) {
    return;
  }
  const line = JSON.stringify({
    member: r.member,
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    attempt: r.attempt,
    hash: r.hash,
    range: r.range,
    fence: r.fence,
    key: r.key === null ? null : r.key.toString(),
    value: r.value === null ? null : r.value.toString(),
    headers: r.headers.map(([name, value]) => [name.toString(), value === null ? null : value.toString()]),
    timestamp: r.timestamp,
  });
  if (args.break === "late") {
    setTimeout(() => appendFileSync(args.log, line + "\n"), Math.random() * 100);
    return;
  }
  appendFileSync(args.log, line + "\n");
}

const options = { token: args.token };
const server = args.batch
  ? createBatchEndpoint(async (records) => {
      records.forEach(apply);
    }, options)
  : createEndpoint(async (record) => apply(record), options);

server.listen(Number(args.port), "127.0.0.1", () => {
  console.log(`listening on ${server.address().port}`);
});
