// The node:http request listener: what every request goes through before
// and after its records run (method, token, body, version, deadline, the
// answer).

import { createHash, timingSafeEqual } from "node:crypto";

import { Limit } from "./limit.js";
import { wireResult } from "./results.js";
import { withStateChange } from "./state.js";
import { CallContext, Stop } from "./stop.js";
import { BadRequestError, decodeRequest } from "./wire.js";

/** The request header with the request's deadline, Unix milliseconds. */
export const DEADLINE_HEADER = "keyshare-deadline";

/** Node's timers hold at most this many milliseconds (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Why a request's signal was aborted: `why` is "deadline" when its
 * Keyshare-Deadline passed, "closed" when the member closed the request
 * (it stopped working on the records: their range moved, it is leaving, or
 * the deadline and its grace passed).
 */
export class RequestStoppedError extends Error {
  /**
   * @param {"deadline" | "closed"} why
   * @param {string} message
   */
  constructor(why, message) {
    super(message);
    this.name = "RequestStoppedError";
    this.why = why;
  }
}

/** The options every endpoint takes, with their defaults. */
const DEFAULTS = Object.freeze({
  concurrency: 16,
  token: /** @type {string | undefined} */ (undefined),
  maxBodyBytes: 64 << 20,
  log: (/** @type {string} */ line) => console.error(`keyshare-endpoint: ${line}`),
});

/**
 * The options filled in with their defaults, or a TypeError naming the
 * one that is wrong.
 *
 * @param {Record<string, unknown>} [options]
 */
export function checkOptions(options = {}) {
  for (const name of Object.keys(options)) {
    if (!Object.hasOwn(DEFAULTS, name)) {
      throw new TypeError(`unknown option ${JSON.stringify(name)}: the options are ${Object.keys(DEFAULTS).join(", ")}`);
    }
  }
  const o = { ...DEFAULTS, ...options };
  if (o.token !== undefined && (typeof o.token !== "string" || o.token.trim() === "")) {
    throw new TypeError("token is empty or not a string: give the token the member sends (the first line of its --deliver-token-file), or leave it out");
  }
  if (!Number.isInteger(o.maxBodyBytes) || o.maxBodyBytes < 1) {
    throw new TypeError(`maxBodyBytes ${JSON.stringify(o.maxBodyBytes)}: want a whole number of bytes, above --batch-size times the largest record`);
  }
  if (typeof o.log !== "function") {
    throw new TypeError("log is not a function: want (line: string) => void");
  }
  return { ...o, limit: new Limit(/** @type {number} */ (o.concurrency)) };
}

/**
 * A request listener that decodes each request and hands its records to
 * run, then answers with what run says.
 *
 * @param {(records: any[], keys: Array<string | null>, stop: Stop, call: CallContext) => Promise<import("./run.js").RunResult>} run
 * @param {ReturnType<typeof checkOptions>} o
 * @returns {(req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => void}
 */
export function listener(run, o) {
  const wantToken = o.token === undefined ? null : digest(`Bearer ${o.token.trim()}`);
  return (req, res) => {
    serveRequest(req, res, run, o, wantToken).catch((err) => {
      if (res.destroyed) {
        return; // the member went away mid-request: it sends the records again
      }
      if (err instanceof BadRequestError) {
        o.log(`answering ${err.status}: ${err.message}`);
        return answer(res, err.status, err.message);
      }
      o.log(`answering 500: ${err?.stack ?? err}`);
      answer(res, 500, `keyshare-endpoint failed: ${err?.message ?? err}`);
    });
  };
}

/**
 * @param {import("node:http").IncomingMessage} req
 * @param {import("node:http").ServerResponse} res
 * @param {Parameters<typeof listener>[0]} run
 * @param {ReturnType<typeof checkOptions>} o
 * @param {Buffer | null} wantToken
 */
async function serveRequest(req, res, run, o, wantToken) {
  if (req.method !== "POST") {
    res.setHeader("Allow", "POST");
    return answer(res, 405, `${req.method} is not a delivery: keyshare's member POSTs records`);
  }
  // A wrong token is the member's set-up, not the records': 401 makes it
  // wait and send again rather than fail them.
  if (wantToken !== null && !timingSafeEqual(digest(req.headers.authorization ?? ""), wantToken)) {
    res.setHeader("WWW-Authenticate", "Bearer");
    return answer(res, 401, "missing or wrong bearer token: check the member's --deliver-token-file");
  }
  const deadline = parseDeadline(req.headers[DEADLINE_HEADER]);
  const body = await readBody(req, o.maxBodyBytes);
  if (body === null) {
    res.setHeader("Connection", "close");
    return answer(res, 413, `the body is over ${o.maxBodyBytes} bytes (maxBodyBytes): lower the member's --batch-size, or raise maxBodyBytes`);
  }
  const { member, records, keys } = decodeRequest(body);
  const stop = new Stop();
  res.on("close", () => {
    if (!res.writableFinished) {
      stop.stop(new RequestStoppedError("closed", "the member closed the request"));
    }
  });
  const timer = deadline === null ? undefined : armDeadline(deadline, stop);
  let result;
  try {
    result = await run(records, keys, stop, new CallContext(stop, deadline, member));
  } finally {
    clearTimeout(timer);
  }
  if ("outcomes" in result) {
    res.setHeader("Content-Type", "application/json");
    return answer(res, 200, JSON.stringify({ results: result.outcomes.map((o, i) => withStateChange(wireResult(o), records[i])) }));
  }
  if ("unavailable" in result) {
    const after = result.unavailable.retryAfter;
    if (after !== undefined && Number.isFinite(after) && after >= 0) {
      res.setHeader("Retry-After", String(Math.ceil(after)));
    }
    return answer(res, 503, result.unavailable.message);
  }
  if ("broken" in result) {
    o.log(`answering 500: ${result.broken.message}`);
    return answer(res, 500, result.broken.message);
  }
  // Past its deadline the member sends the records again: one started now
  // could run beside that attempt (docs/delivery.md). A request the member
  // closed has no one left to answer.
  answer(res, 504, `the request's deadline passed before all its records started: ${result.stopped?.message ?? result.stopped}`);
}

/**
 * @param {Date} deadline
 * @param {Stop} stop
 */
function armDeadline(deadline, stop) {
  const passed = () => stop.stop(new RequestStoppedError("deadline", `its Keyshare-Deadline ${deadline.toISOString()} passed`));
  const ms = deadline.getTime() - Date.now();
  if (ms <= 0) {
    passed();
    return undefined;
  }
  return ms > MAX_TIMER_MS ? undefined : setTimeout(passed, ms);
}

/**
 * The Keyshare-Deadline header as a Date, or null without one.
 *
 * @param {string | string[] | undefined} v
 */
function parseDeadline(v) {
  if (v === undefined) {
    return null;
  }
  const text = Array.isArray(v) ? v[0] : v;
  if (!/^\d{1,15}$/.test(text.trim())) {
    throw new BadRequestError(400, `Keyshare-Deadline ${JSON.stringify(text.slice(0, 40))} is not milliseconds since the Unix epoch`);
  }
  return new Date(Number(text.trim()));
}

/**
 * The request's body, or null once it is over max bytes.
 *
 * @param {import("node:http").IncomingMessage} req
 * @param {number} max
 * @returns {Promise<Buffer | null>}
 */
function readBody(req, max) {
  if (Number(req.headers["content-length"]) > max) {
    return Promise.resolve(null);
  }
  return new Promise((resolve, reject) => {
    /** @type {Buffer[]} */
    const chunks = [];
    let size = 0;
    const onData = (/** @type {Buffer} */ chunk) => {
      size += chunk.length;
      if (size > max) {
        req.off("data", onData);
        req.resume(); // the rest is read and dropped; the connection closes after the 413
        resolve(null);
        return;
      }
      chunks.push(chunk);
    };
    req.on("data", onData);
    req.on("end", () => resolve(size > max ? null : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)));
    req.on("error", reject);
  });
}

/**
 * Answers status with body; nothing when the connection is gone.
 *
 * @param {import("node:http").ServerResponse} res
 * @param {number} status
 * @param {string} body
 */
function answer(res, status, body) {
  if (res.headersSent || res.destroyed) {
    return;
  }
  if (!res.hasHeader("Content-Type")) {
    res.setHeader("Content-Type", "text/plain; charset=utf-8");
  }
  res.writeHead(status, { "Content-Length": Buffer.byteLength(body) });
  // A string, not a Buffer: node sends a string body in the same write as
  // the headers, where a Buffer takes a writev of its own (a fifth of the
  // kit's CPU per request on loopback).
  res.end(body);
}

/**
 * A fixed-size digest, so that comparing tokens takes the same time
 * whatever their lengths.
 *
 * @param {string} s
 */
function digest(s) {
  return createHash("sha256").update(s).digest();
}
