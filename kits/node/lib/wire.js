// The request body of keyshare's HTTP delivery (docs/delivery.md) and
// the records decoded from it.

import { attachStates, recordPrototype } from "./state.js";

/** The body format this kit reads. Another version is answered 501. */
export const WIRE_VERSION = 1;

/**
 * A request the kit cannot read. `status` is the HTTP status it is
 * answered with: 400 for a body that is not a delivery request, 501 for
 * another body version, 500 for a number JavaScript cannot hold exactly.
 */
export class BadRequestError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.name = "BadRequestError";
    this.status = status;
  }
}

/**
 * Parses a request body into its member and records.
 *
 * Offsets, fences and timestamps are plain numbers, not BigInts: Kafka's
 * offsets and etcd's revisions are 64-bit, but both count one at a time
 * from 0 and stay far below 2^53 (a partition taking a million records a
 * second reaches it after 285 years), and numbers print, compare, go
 * into JSON and into database drivers as they are. A value JSON.parse
 * could not keep exactly is not rounded silently: the request is
 * answered 500, which the member waits out, logging the reason.
 *
 * keys[i] is records[i]'s key as the body has it (base64), or null for
 * a null key: what the kit tells a key's records apart by in a batch.
 *
 * @param {Buffer} body
 * @returns {{member: string, records: import("../index.js").DeliveredRecord[], keys: Array<string | null>}}
 */
export function decodeRequest(body) {
  let parsed;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch (err) {
    throw new BadRequestError(400, `the body is not JSON (${err.message}): want a keyshare delivery request, docs/delivery.md`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new BadRequestError(400, "the body is not a JSON object: want a keyshare delivery request, docs/delivery.md");
  }
  if (parsed.version !== WIRE_VERSION) {
    // Not the records' fault: the member waits for an endpoint that reads
    // this version instead of dead-lettering them.
    throw new BadRequestError(
      501,
      `body version ${JSON.stringify(parsed.version)}: this endpoint (keyshare-endpoint) reads version ${WIRE_VERSION}; upgrade it, or roll the member back`,
    );
  }
  const member = typeof parsed.member === "string" ? parsed.member : "";
  if (!Array.isArray(parsed.records)) {
    throw new BadRequestError(400, `"records" is ${describe(parsed.records)}, want a list`);
  }
  const records = parsed.records.map((r, i) => decodeRecord(r, i, member));
  const keys = parsed.records.map((r) => (typeof r.key === "string" ? r.key : null));
  const badState = attachStates(parsed.records, records, keys);
  if (badState !== null) {
    throw new BadRequestError(400, badState);
  }
  return { member, records, keys };
}

/**
 * @param {any} r
 * @param {number} i
 * @param {string} member
 * @returns {import("../index.js").DeliveredRecord}
 */
function decodeRecord(r, i, member) {
  if (r === null || typeof r !== "object") {
    throw new BadRequestError(400, `record ${i} is ${describe(r)}, want an object`);
  }
  const field = (name) => `record ${i}'s "${name}"`;
  if (typeof r.topic !== "string") {
    throw new BadRequestError(400, `${field("topic")} is ${describe(r.topic)}, want a string`);
  }
  const range = r.range == null ? null : { lo: integer(r.range.lo, field("range.lo")), hi: integer(r.range.hi, field("range.hi")) };
  // The prototype carries state, setState and deleteState (lib/state.js).
  return Object.assign(Object.create(recordPrototype), {
    topic: r.topic,
    partition: integer(r.partition, field("partition")),
    offset: integer(r.offset, field("offset")),
    timestamp: r.timestamp == null ? null : integer(r.timestamp, field("timestamp")),
    key: bytes(r.key, field("key")),
    value: bytes(r.value, field("value")),
    headers: headers(r.headers, field("headers")),
    attempt: integer(r.attempt, field("attempt")),
    hash: integer(r.hash, field("hash")),
    range,
    fence: r.fence == null ? null : integer(r.fence, field("fence")),
    member,
  });
}

/**
 * @param {any} v
 * @param {string} what
 * @returns {number}
 */
function integer(v, what) {
  if (typeof v !== "number" || !Number.isInteger(v)) {
    throw new BadRequestError(400, `${what} is ${describe(v)}, want an integer`);
  }
  if (!Number.isSafeInteger(v)) {
    throw new BadRequestError(500, `${what} is beyond 2^53, where a JavaScript number is no longer exact; this endpoint cannot name the record`);
  }
  return v;
}

/**
 * @param {any} v
 * @param {string} what
 * @returns {Buffer | null}
 */
function bytes(v, what) {
  if (v === null || v === undefined) {
    return null;
  }
  if (typeof v !== "string") {
    throw new BadRequestError(400, `${what} is ${describe(v)}, want base64 or null`);
  }
  return Buffer.from(v, "base64");
}

/**
 * Headers as [name, value] pairs, in order. A name is a string; one that
 * is not valid UTF-8 comes as a Buffer of its exact bytes (the request's
 * "key_bytes"), since a string would hold U+FFFD in place of each invalid
 * byte.
 *
 * @param {any} v
 * @param {string} what
 * @returns {Array<[string | Buffer, Buffer | null]>}
 */
function headers(v, what) {
  if (v === null || v === undefined) {
    return [];
  }
  if (!Array.isArray(v)) {
    throw new BadRequestError(400, `${what} is ${describe(v)}, want a list`);
  }
  return v.map((h, j) => {
    if (h === null || typeof h !== "object" || typeof h.key !== "string") {
      throw new BadRequestError(400, `${what}[${j}] is ${describe(h)}, want {"key": name, "value": base64 or null}`);
    }
    const name = typeof h.key_bytes === "string" ? Buffer.from(h.key_bytes, "base64") : h.key;
    return [name, bytes(h.value, `${what}[${j}].value`)];
  });
}

/**
 * A value for an error message: its JSON, cut short.
 *
 * @param {any} v
 */
function describe(v) {
  if (v === undefined) {
    return "missing";
  }
  const s = JSON.stringify(v);
  return s.length > 40 ? s.slice(0, 40) + "…" : s;
}
