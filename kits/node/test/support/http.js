// Helpers of the kit's tests: an endpoint on a free port, requests as the
// member sends them, and records to put in them.

import { Agent, request } from "node:http";

/**
 * Listens with server on a free loopback port; closed when the test ends.
 *
 * @param {import("node:test").TestContext} t
 * @param {import("node:http").Server} server
 * @returns {Promise<string>} the server's URL
 */
export async function listen(t, server) {
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${server.address().port}/`;
}

/**
 * POSTs body (an object is sent as JSON) and resolves with the answer.
 *
 * @param {string} url
 * @param {unknown} body
 * @param {{headers?: Record<string, string>, agent?: Agent, method?: string}} [o]
 * @returns {Promise<{status: number, headers: import("node:http").IncomingHttpHeaders, text: string, json: any, socket: import("node:net").Socket}>}
 */
export function post(url, body, o = {}) {
  const bytes = Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: o.method ?? "POST",
      agent: o.agent,
      headers: { "Content-Type": "application/json", "Content-Length": bytes.length, ...o.headers },
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString();
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json, socket: req.socket });
      });
    });
    req.end(bytes);
  });
}

/**
 * A request body of version 1 from member "m-1" with records.
 *
 * @param {object[]} records
 */
export function body(records) {
  return { version: 1, member: "m-1", records };
}

/**
 * A record as the member sends it, offset `offset` of key `key` (a
 * string, or null for a null key), with fields overridden by extra.
 *
 * @param {number} offset
 * @param {string | null} key
 * @param {object} [extra]
 */
export function rec(offset, key, extra = {}) {
  return {
    topic: "orders",
    partition: 3,
    offset,
    timestamp: 1767323045123,
    key: key === null ? null : Buffer.from(key).toString("base64"),
    value: Buffer.from(`value-${offset}`).toString("base64"),
    headers: [],
    attempt: 1,
    hash: 2864434397,
    range: { lo: 2147483648, hi: 4294967296 },
    fence: 1187,
    ...extra,
  };
}

/** Resolves after ms milliseconds. */
export const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));

/** A quiet log for endpoints whose tests expect their lines; it keeps them. */
export function keptLog() {
  /** @type {string[]} */
  const lines = [];
  const log = (/** @type {string} */ line) => lines.push(line);
  return Object.assign(log, { lines });
}
