// The end of a request's work: its deadline passed or the member closed
// it.

/**
 * A request stopped, or not yet. Like an AbortController, but the
 * AbortSignal a call sees is made only when a call asks for it: node's
 * AbortController is an EventTarget, and two of them per request were a
 * tenth of the kit's CPU per record.
 */
export class Stop {
  constructor() {
    this.stopped = false;
    /** @type {unknown} */
    this.reason = undefined;
    /** @type {Array<() => void>} */
    this.listeners = [];
    /** @type {AbortController | null} */
    this.controller = null;
  }

  /**
   * Stops the request, once: the signal aborts and each listener runs.
   *
   * @param {unknown} reason
   */
  stop(reason) {
    if (this.stopped) {
      return;
    }
    this.stopped = true;
    this.reason = reason;
    this.controller?.abort(reason);
    for (const f of this.listeners.splice(0)) {
      f();
    }
  }

  /**
   * Runs f when the request stops; the function returned forgets f.
   *
   * @param {() => void} f
   */
  onStop(f) {
    this.listeners.push(f);
    return () => {
      const i = this.listeners.indexOf(f);
      if (i >= 0) {
        this.listeners.splice(i, 1);
      }
    };
  }

  /** An AbortSignal that aborts when the request stops. */
  get signal() {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.stopped) {
        this.controller.abort(this.reason);
      }
    }
    return this.controller.signal;
  }
}

/** What a call of the user's function knows about its request. */
export class CallContext {
  #stop;

  /**
   * @param {Stop} stop
   * @param {Date | null} deadline
   * @param {string} member
   */
  constructor(stop, deadline, member) {
    this.#stop = stop;
    this.deadline = deadline;
    this.member = member;
  }

  /** Aborted when the request's deadline passes or the member closes it. */
  get signal() {
    return this.#stop.signal;
  }
}
