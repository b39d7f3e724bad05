// The request's stop and the signal a call sees.

import assert from "node:assert/strict";
import { test } from "node:test";

import { CallContext, Stop } from "../lib/stop.js";

test("a signal asked for before the stop aborts with it", () => {
  const stop = new Stop();
  const call = new CallContext(stop, null, "m");
  const signal = call.signal;
  let heard = 0;
  stop.onStop(() => heard++);
  assert.equal(signal.aborted, false);
  stop.stop(new Error("closed"));
  stop.stop(new Error("again")); // once only
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.message, "closed");
  assert.equal(heard, 1);
});

test("a signal asked for after the stop is aborted already", () => {
  const stop = new Stop();
  stop.stop("deadline");
  const signal = new CallContext(stop, null, "m").signal;
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason, "deadline");
});

test("a listener forgotten is not run", () => {
  const stop = new Stop();
  let heard = 0;
  const forget = stop.onStop(() => heard++);
  forget();
  stop.stop("x");
  assert.equal(heard, 0);
});
