// Types of keyshare-endpoint, written by hand beside index.js.

import type { IncomingMessage, Server, ServerResponse } from "node:http";

/** One record of a delivery request, decoded (docs/delivery.md, "Request"). */
export interface DeliveredRecord {
  /** Where the record is in Kafka: topic, partition and offset name it. */
  topic: string;
  partition: number;
  /**
   * A number, exact: a request with an offset beyond 2^53 − 1 is answered
   * 500 rather than rounded.
   */
  offset: number;
  /** The record's Kafka timestamp, ms since the Unix epoch; null without one. */
  timestamp: number | null;
  /** The key's bytes; null for a null key. */
  key: Buffer | null;
  /** The value's bytes; null for a null value. */
  value: Buffer | null;
  /**
   * The headers in order, names may repeat. A name is a string, or a Buffer
   * of its exact bytes when they are not valid UTF-8; a null value is null.
   */
  headers: Array<[name: string | Buffer, value: Buffer | null]>;
  /** 1 the first time this member sends the record, then one more each time. */
  attempt: number;
  /** The record's 32-bit key hash (a null key hashes its offset). */
  hash: number;
  /** The hash range the member holds the record under, lo <= hash < hi. */
  range: { lo: number; hi: number } | null;
  /** The range's fencing token; null when range is. */
  fence: number | null;
  /** The id of the member sending it. */
  member: string;
  /**
   * The key's state before this record, with `keyshare member --state`
   * (docs/delivery.md, "Keyed state"): a Buffer, or null when the key has
   * none. In a batch, a key's later records see what the function set or
   * deleted for the key's records before them. Null too without --state
   * (stateKept tells the two apart). Not an own property: JSON.stringify
   * and object spread leave it out.
   */
  readonly state: Buffer | null;
  /** Whether the member keeps this record's key state (it runs with --state). */
  readonly stateKept: boolean;
  /**
   * Makes value (copied) the key's state once the record is answered done;
   * a record not done changes nothing. Throws a StateNotKeptError (the
   * request is answered 503, naming --state) when the member keeps no
   * state, and an Error (the record fails) for a null key, which has none.
   */
  setState(value: Buffer | Uint8Array): void;
  /** Deletes the key's state once the record is answered done (as setState). */
  deleteState(): void;
}

/** What a call knows about the request it serves. */
export interface CallContext {
  /**
   * Aborted when the request's Keyshare-Deadline passes or the member closes
   * the request; its reason is a RequestStoppedError. Stop, or at least
   * apply nothing, once it is: the member sends the records again.
   */
  signal: AbortSignal;
  /** The request's deadline (the member's --deliver-timeout); null without one. */
  deadline: Date | null;
  /** The id of the member sending the request. */
  member: string;
}

/** A record's outcome other than done, as failed() and fenced() make it. */
export interface Outcome {
  readonly status: "done" | "failed" | "fenced";
  readonly error: string;
}

/**
 * The function of one record. Resolving (with anything but an Outcome)
 * means done; failed(reason) or a thrown Error fails the attempt; fenced()
 * or a thrown FencedError answers fenced; a thrown UnavailableError answers
 * the whole request 503.
 */
export type RecordFunction = (record: DeliveredRecord, call: CallContext) => unknown | Promise<unknown>;

/**
 * The function of a request's records (a batch, with the member's
 * --batch-size). Resolve with nothing when every record is done, or with
 * one entry per record, in order: failed(), fenced(), an Error (failed,
 * or fenced for a FencedError) or anything else (done). A thrown
 * FencedError fences every record, an UnavailableError answers 503, any
 * other error fails every record.
 */
export type BatchFunction = (
  records: DeliveredRecord[],
  call: CallContext,
) => void | unknown[] | Promise<void | unknown[] | undefined | null>;

export interface EndpointOptions {
  /**
   * Calls of the function in progress at once: records for a
   * RecordFunction (over all requests; a request's keys run at once, each
   * key's records one after another), requests for a BatchFunction.
   * Requests beyond it wait, their connections open. Default 16, the
   * member's default --concurrency.
   */
  concurrency?: number;
  /**
   * When set, a request must carry `Authorization: Bearer <token>` (the
   * member's --deliver-token-file); others are answered 401. Default none.
   */
  token?: string;
  /** The largest body read; a larger one is answered 413. Default 64 MiB. */
  maxBodyBytes?: number;
  /** Where the kit's own lines go (requests it cannot read). Default console.error. */
  log?: (line: string) => void;
}

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** An HTTP server (not yet listening) calling fn once per record. */
export function createEndpoint(fn: RecordFunction, options?: EndpointOptions): Server;
/** An HTTP server (not yet listening) calling fn once per request. */
export function createBatchEndpoint(fn: BatchFunction, options?: EndpointOptions): Server;
/** The request listener of createEndpoint, for a server of your own. */
export function recordListener(fn: RecordFunction, options?: EndpointOptions): RequestListener;
/** The request listener of createBatchEndpoint, for a server of your own. */
export function batchListener(fn: BatchFunction, options?: EndpointOptions): RequestListener;

/** The record fails this attempt (retried, then dead-lettered). */
export function failed(reason: string): Outcome;
/** The record's fence was refused by the sink: retried, never dead-lettered. */
export function fenced(reason: string): Outcome;

/** Thrown when a sink refused a record's fence: the record is answered fenced. */
export class FencedError extends Error {
  constructor(message?: string);
}

/** Thrown when the endpoint cannot work now: the request is answered 503. */
export class UnavailableError extends Error {
  constructor(message?: string, options?: { retryAfter?: number });
  /** Seconds the member should wait, sent as Retry-After. */
  readonly retryAfter: number | undefined;
}

/**
 * Thrown by setState and deleteState when the member runs without
 * --state: it keeps no state, so the change would be lost. An
 * UnavailableError: the request is answered 503 with the message, and the
 * member waits, dead-lettering nothing.
 */
export class StateNotKeptError extends UnavailableError {
  constructor(what: string);
}

/** The reason of an aborted CallContext.signal. */
export class RequestStoppedError extends Error {
  readonly why: "deadline" | "closed";
}

/** Parses a request body; throws with the HTTP status it is answered with. */
export function decodeRequest(body: Buffer): { member: string; records: DeliveredRecord[]; keys: Array<string | null> };

/** The body version this kit reads (1). */
export const WIRE_VERSION: number;
/** The request header with the deadline, lower case as node:http has it. */
export const DEADLINE_HEADER: string;
/** How long an idle connection is kept, ms. */
export const KEEP_ALIVE_MS: number;
