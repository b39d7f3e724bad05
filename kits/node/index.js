// keyshare-endpoint: a delivery endpoint for `keyshare member --deliver`
// (docs/delivery.md) from an async function of one record, or of a
// request's records.

import { createServer } from "node:http";

import { checkOptions, listener } from "./lib/listener.js";
import { runBatch, runRecords } from "./lib/run.js";

export { FencedError, UnavailableError, failed, fenced } from "./lib/results.js";
export { DEADLINE_HEADER, RequestStoppedError } from "./lib/listener.js";
export { WIRE_VERSION, decodeRequest } from "./lib/wire.js";
export { StateNotKeptError } from "./lib/state.js";

/**
 * How long an idle connection is kept, longer than the 90 s after which
 * the member's HTTP client (Go's net/http) drops one it is not using: the
 * member closes an idle connection first, and never sends a request on
 * one the endpoint is closing at that instant (a POST is not sent again by
 * the client, so that request would be trouble and wait a backoff).
 */
export const KEEP_ALIVE_MS = 120_000;

/**
 * A request listener calling fn once per record.
 *
 * @param {import("./index.js").RecordFunction} fn
 * @param {import("./index.js").EndpointOptions} [options]
 */
export function recordListener(fn, options) {
  mustBeFunction(fn, "recordListener");
  const o = checkOptions(options);
  return listener((records, keys, stop, call) => runRecords(fn, records, keys, stop, call, o.limit), o);
}

/**
 * A request listener calling fn once per request, with its records.
 *
 * @param {import("./index.js").BatchFunction} fn
 * @param {import("./index.js").EndpointOptions} [options]
 */
export function batchListener(fn, options) {
  mustBeFunction(fn, "batchListener");
  const o = checkOptions(options);
  return listener((records, _keys, stop, call) => runBatch(fn, records, stop, call, o.limit), o);
}

/**
 * An HTTP server (not yet listening) calling fn once per record.
 *
 * @param {import("./index.js").RecordFunction} fn
 * @param {import("./index.js").EndpointOptions} [options]
 */
export function createEndpoint(fn, options) {
  return server(recordListener(fn, options));
}

/**
 * An HTTP server (not yet listening) calling fn once per request.
 *
 * @param {import("./index.js").BatchFunction} fn
 * @param {import("./index.js").EndpointOptions} [options]
 */
export function createBatchEndpoint(fn, options) {
  return server(batchListener(fn, options));
}

/** @param {ReturnType<typeof recordListener>} handle */
function server(handle) {
  // TCP keepalive finds a member host that vanished under an open
  // request (the member's own side probes the same way).
  const s = createServer({ keepAlive: true, keepAliveInitialDelay: 15_000 }, handle);
  s.keepAliveTimeout = KEEP_ALIVE_MS;
  // A slow record is waited for by the member as long as its connection
  // lives; no socket timeout here either. The request itself (headers and
  // body) must still arrive in time.
  s.timeout = 0;
  return s;
}

/**
 * @param {unknown} fn
 * @param {string} name
 */
function mustBeFunction(fn, name) {
  if (typeof fn !== "function") {
    throw new TypeError(`${name}: the first argument is ${typeof fn}, want an async function`);
  }
}
