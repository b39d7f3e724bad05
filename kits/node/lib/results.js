// What a record's function says about its record, and how the kit turns
// return values and thrown errors into the answer's results
// (docs/delivery.md, "Answer").

/** The member keeps 512 bytes of a record's error; the rest is not sent. */
const MAX_ERROR_BYTES = 512;

/**
 * A record's outcome, as `failed()` and `fenced()` make it. A class of
 * its own so that a function returning some object of its own that
 * happens to have a `status` is not read as an outcome.
 */
class Outcome {
  /**
   * @param {"done" | "failed" | "fenced"} status
   * @param {string} error
   */
  constructor(status, error) {
    this.status = status;
    this.error = error;
    Object.freeze(this);
  }
}

const DONE = new Outcome("done", "");

/**
 * The record fails this attempt: the member retries it after
 * `--retry-backoff` and, after `--max-attempts`, sends it to the dead-letter
 * topic. Returning it is the same as throwing an error with that message.
 *
 * @param {string} reason
 */
export function failed(reason) {
  return new Outcome("failed", cut(String(reason)));
}

/**
 * The record's fence was refused by the sink: a later owner of its range
 * has written. The member retries it with its fence read afresh and never
 * dead-letters it; the range's next owner sends it under its own token.
 *
 * @param {string} reason
 */
export function fenced(reason) {
  return new Outcome("fenced", cut(String(reason)));
}

/**
 * Thrown by a record's (or batch's) function when a sink refused the
 * record's fence: the record is answered `fenced`, as `fenced()` makes it.
 */
export class FencedError extends Error {
  /** @param {string} [message] */
  constructor(message = "a later owner of the record's range has written") {
    super(message);
    this.name = "FencedError";
  }
}

/**
 * Thrown when the endpoint itself cannot work now (its database is down,
 * it is overloaded): the whole request is answered 503, with
 * `Retry-After` when `retryAfter` (seconds) is given, and the member sends
 * it again later without counting an attempt against any record. Nothing
 * is dead-lettered because the endpoint is in trouble.
 */
export class UnavailableError extends Error {
  /**
   * @param {string} [message]
   * @param {{retryAfter?: number}} [options]
   */
  constructor(message = "the endpoint is unavailable", options = {}) {
    super(message);
    this.name = "UnavailableError";
    this.retryAfter = options.retryAfter;
  }
}

/**
 * The outcome of a value a function resolved with: failed() and fenced()
 * as they say, anything else done.
 *
 * @param {unknown} value
 * @returns {Outcome}
 */
export function outcomeOfValue(value) {
  return value instanceof Outcome ? value : DONE;
}

/**
 * The outcome of a thrown value: fenced for a FencedError, failed with
 * the error's message for anything else. An UnavailableError is not a
 * record's outcome: callers look for it first.
 *
 * @param {unknown} err
 * @returns {Outcome}
 */
export function outcomeOfError(err) {
  if (err instanceof FencedError) {
    return fenced(err.message);
  }
  if (err instanceof Error) {
    return failed(err.message || err.name);
  }
  return failed(String(err));
}

/** @param {Outcome} o */
export function isDone(o) {
  return o.status === "done";
}

export { DONE };

/**
 * A result as the answer carries it: {"status": "done"} without an error.
 *
 * @param {Outcome} o
 */
export function wireResult(o) {
  return o.status === "done" ? { status: "done" } : { status: o.status, error: o.error };
}

/**
 * s cut to at most MAX_ERROR_BYTES bytes of UTF-8, not inside a character.
 *
 * @param {string} s
 */
export function cut(s) {
  if (Buffer.byteLength(s) <= MAX_ERROR_BYTES) {
    return s;
  }
  let out = "";
  let n = 0;
  for (const ch of s) {
    n += Buffer.byteLength(ch);
    if (n > MAX_ERROR_BYTES - 3) {
      return out + "…";
    }
    out += ch;
  }
  return out;
}
