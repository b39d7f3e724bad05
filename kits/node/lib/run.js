// Running a request's records through the user's function: one call per
// record (runRecords) or one per request (runBatch).

import { DONE, UnavailableError, failed, fenced, isDone, outcomeOfError, outcomeOfValue } from "./results.js";

/**
 * What became of a request's records: an outcome per record, or the
 * reason there is none for some of them.
 *
 * @typedef {{outcomes: import("./results.js").Outcome[]}
 *   | {unavailable: UnavailableError}
 *   | {stopped: unknown}
 *   | {broken: Error}} RunResult
 */

/**
 * Calls fn on each record. A key's records run one after another in the
 * request's order, which is their offset order; different keys (and
 * records without a key) run at once, each call holding a place of
 * limit. After a key's first record that is not done, its later records
 * are not called and are answered as it was (failed or fenced): the
 * member sends them again after it, and applying them now would apply
 * them out of order.
 *
 * No call starts once stop has stopped (the member closed the request,
 * or its deadline passed), nor after a call threw an UnavailableError.
 *
 * @param {(record: any, call: any) => unknown} fn
 * @param {any[]} records
 * @param {Array<string | null>} keys
 * @param {import("./stop.js").Stop} stop
 * @param {import("./stop.js").CallContext} call
 * @param {import("./limit.js").Limit} limit
 * @returns {Promise<RunResult>}
 */
export async function runRecords(fn, records, keys, stop, call, limit) {
  /** @type {Array<import("./results.js").Outcome | undefined>} */
  const outcomes = new Array(records.length);
  /** @type {UnavailableError | null} */
  let unavailable = null;

  const runKey = async (/** @type {number[]} */ indices) => {
    /** @type {import("./results.js").Outcome | null} */
    let stoppedBy = null;
    for (const i of indices) {
      if (stoppedBy !== null) {
        outcomes[i] = stoppedBy.status === "fenced" ? fenced("an earlier record of the key was fenced") : failed("an earlier record of the key failed");
        continue;
      }
      if (!(await limit.acquire(stop))) {
        return;
      }
      try {
        if (stop.stopped || unavailable !== null) {
          return;
        }
        outcomes[i] = outcomeOfValue(await fn(records[i], call));
      } catch (err) {
        if (err instanceof UnavailableError) {
          unavailable ??= err;
          return;
        }
        outcomes[i] = outcomeOfError(err);
      } finally {
        limit.release();
      }
      if (!isDone(outcomes[i])) {
        stoppedBy = outcomes[i];
      }
    }
  };

  if (records.length === 1) {
    await runKey([0]); // the usual request without --batch-size: no grouping
  } else {
    await Promise.all(byKey(keys).map(runKey));
  }
  if (unavailable !== null) {
    return { unavailable };
  }
  if (outcomes.includes(undefined) || outcomes.length < records.length) {
    return { stopped: stop.reason };
  }
  return { outcomes: /** @type {import("./results.js").Outcome[]} */ (outcomes) };
}

/**
 * The records' indices grouped by key, each group in request order; a
 * record without a key is a group of its own (it has no order to keep).
 *
 * @param {Array<string | null>} keys
 * @returns {number[][]}
 */
export function byKey(keys) {
  /** @type {Map<string, number[]>} */
  const groups = new Map();
  /** @type {number[][]} */
  const out = [];
  keys.forEach((k, i) => {
    if (k === null) {
      out.push([i]);
      return;
    }
    let g = groups.get(k);
    if (g === undefined) {
      g = [];
      groups.set(k, g);
      out.push(g);
    }
    g.push(i);
  });
  return out;
}

/**
 * Calls fn once with all the request's records, holding one place of
 * limit. fn resolves with nothing (every record done) or a list of one
 * entry per record: failed() or fenced(), an Error (failed with its
 * message; a FencedError fenced), anything else done. A FencedError
 * thrown fences every record, an UnavailableError makes the request
 * trouble, any other error fails every record.
 *
 * @param {(records: any[], call: any) => unknown} fn
 * @param {any[]} records
 * @param {import("./stop.js").Stop} stop
 * @param {import("./stop.js").CallContext} call
 * @param {import("./limit.js").Limit} limit
 * @returns {Promise<RunResult>}
 */
export async function runBatch(fn, records, stop, call, limit) {
  if (!(await limit.acquire(stop))) {
    return { stopped: stop.reason };
  }
  let value;
  try {
    if (stop.stopped) {
      return { stopped: stop.reason };
    }
    value = await fn(records, call);
  } catch (err) {
    if (err instanceof UnavailableError) {
      return { unavailable: err };
    }
    return { outcomes: records.map(() => outcomeOfError(err)) };
  } finally {
    limit.release();
  }
  if (value === undefined || value === null) {
    return { outcomes: records.map(() => DONE) };
  }
  if (!Array.isArray(value) || value.length !== records.length) {
    const got = Array.isArray(value) ? `${value.length} results` : typeof value;
    return { broken: new Error(`the batch function returned ${got} for ${records.length} records: want nothing (all done) or one result per record, in order`) };
  }
  const unavailable = value.find((v) => v instanceof UnavailableError);
  if (unavailable !== undefined) {
    return { unavailable };
  }
  return { outcomes: value.map((v) => (v instanceof Error ? outcomeOfError(v) : outcomeOfValue(v))) };
}
