// A record's key state, kept by the member (docs/delivery.md, "Keyed
// state"): with `keyshare member --state` each record comes with its
// key's state, bytes of the endpoint's choosing, and the record's result
// may carry the key's new state back.
//
// In a batch a key's state goes with its first record only; its later
// records are marked "previous", their state being what the endpoint's
// answer for the record before makes it. The kit links each such record
// to that one, so that `record.state` is always the key's state just
// before the record, as the function's changes to the earlier ones left it.

import { UnavailableError } from "./results.js";

/** Where a record keeps its RecordState: out of sight of JSON.stringify. */
const STATE = Symbol("keyshare-endpoint.state");

/**
 * A change of state for a record the member sent without state: it runs
 * without --state, keeps none, and the change would be lost. The
 * member's set-up is wrong, not the record, so the request is answered 503
 * with this message (as an UnavailableError), dead-lettering nothing.
 */
export class StateNotKeptError extends UnavailableError {
  /** @param {string} what */
  constructor(what) {
    super(`${what}: the member sent this record without state, so it keeps none and the change would be lost; run keyshare member with --state`);
    this.name = "StateNotKeptError";
  }
}

/** What the request said of one record's key state, and its change. */
class RecordState {
  /**
   * @param {Buffer | null} sent the state the request carried (null: none)
   * @param {RecordState | null} previous the key's record before, when marked previous
   */
  constructor(sent, previous) {
    this.sent = sent;
    this.previous = previous;
    this.changed = false;
    /** @type {Buffer | null} the change: null deletes */
    this.value = null;
  }

  /**
   * The key's state before the record: walked back, not recursed, since a
   * batch may hold thousands of one key's records.
   *
   * @returns {Buffer | null}
   */
  before() {
    /** @type {RecordState} */
    let s = this;
    while (s.previous !== null) {
      s = s.previous;
      if (s.changed) {
        return s.value;
      }
    }
    return s.sent;
  }
}

/**
 * The methods and getters every decoded record has, on its prototype.
 * They read the record's RecordState, undefined without --state.
 */
export const recordPrototype = {
  /** @returns {boolean} whether the member keeps this record's key state (--state) */
  get stateKept() {
    return this[STATE] !== undefined;
  },

  /** @returns {Buffer | null} the key's state before this record; null for none */
  get state() {
    const s = this[STATE];
    return s === undefined ? null : s.before();
  },

  /** @param {Buffer | Uint8Array} value the key's state once the record is done */
  setState(value) {
    change(this, "setState", stateBytes(value));
  },

  /** Deletes the key's state once the record is done. */
  deleteState() {
    change(this, "deleteState", null);
  },
};

/**
 * @param {any} record
 * @param {string} what
 * @param {Buffer | null} value
 */
function change(record, what, value) {
  const s = record[STATE];
  if (s === undefined) {
    throw new StateNotKeptError(`record.${what}()`);
  }
  if (record.key === null) {
    throw new Error(`record.${what}(): the record at offset ${record.offset} has a null key, which has no state`);
  }
  s.changed = true;
  s.value = value;
}

/**
 * value as a state's bytes (a copy: the caller may reuse its buffer), or
 * a TypeError naming what to pass.
 *
 * @param {unknown} value
 */
function stateBytes(value) {
  if (value instanceof Uint8Array) {
    return Buffer.from(value);
  }
  if (typeof value === "string") {
    throw new TypeError(`setState(${JSON.stringify(value.slice(0, 40))}): a state is bytes; pass Buffer.from(text)`);
  }
  throw new TypeError(`setState(${typeof value}): a state is a Buffer or Uint8Array; deleteState() removes it`);
}

/**
 * Reads each record's "state" into its RecordState, and links a key's
 * records marked previous to the key's record before them. raws are the
 * request's record objects; keys[i] is records[i]'s key as the body has
 * it. Returns an error message for a state the kit cannot read, or null.
 *
 * @param {any[]} raws
 * @param {any[]} records
 * @param {Array<string | null>} keys
 * @returns {string | null}
 */
export function attachStates(raws, records, keys) {
  /** @type {Map<string, RecordState>} by key, the state of its latest record so far */
  const last = new Map();
  for (let i = 0; i < raws.length; i++) {
    const raw = raws[i].state;
    if (raw === undefined || raw === null) {
      continue;
    }
    if (typeof raw !== "object" || Array.isArray(raw)) {
      return `record ${i}'s "state" is ${JSON.stringify(raw).slice(0, 40)}, want {"value": base64 or null} or {"previous": true}`;
    }
    let s;
    if (raw.previous === true) {
      const earlier = keys[i] === null ? undefined : last.get(keys[i]);
      if (earlier === undefined) {
        return `record ${i}'s "state" is previous, but no earlier record of the key in this request carries its state`;
      }
      s = new RecordState(null, earlier);
    } else if (raw.value === null) {
      s = new RecordState(null, null);
    } else if (typeof raw.value === "string") {
      s = new RecordState(Buffer.from(raw.value, "base64"), null);
    } else {
      return `record ${i}'s "state.value" is ${raw.value === undefined ? "missing" : JSON.stringify(raw.value).slice(0, 40)}, want base64 or null`;
    }
    records[i][STATE] = s;
    if (keys[i] !== null) {
      last.set(keys[i], s);
    }
  }
  return null;
}

/**
 * The answer's result for record: its outcome's, with the change the
 * function made to its key's state when done. A record not done changes
 * no state (the member would refuse the answer): its change is dropped.
 *
 * @param {{status: string, error?: string}} result
 * @param {any} record
 */
export function withStateChange(result, record) {
  const s = record[STATE];
  if (s === undefined || !s.changed) {
    return result;
  }
  if (result.status !== "done") {
    s.changed = false;
    s.value = null;
    return result;
  }
  return { ...result, state: { value: s.value === null ? null : s.value.toString("base64") } };
}
