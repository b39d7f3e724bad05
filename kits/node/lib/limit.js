// A bound on the calls of the user's function in progress at once.

/**
 * A counting semaphore: at most `size` holders at once, the others waiting
 * in the order they asked.
 */
export class Limit {
  /** @param {number} size */
  constructor(size) {
    if (!Number.isInteger(size) || size < 1) {
      throw new RangeError(`concurrency ${JSON.stringify(size)}: want a whole number of calls at once, 1 or more (the member's --concurrency is 16 by default)`);
    }
    this.size = size;
    this.held = 0;
    /** @type {Array<() => void>} */
    this.waiting = [];
  }

  /**
   * Resolves true once a place is free; the caller must release() it. A
   * wait the request's stop ends meanwhile resolves false, taking no
   * place.
   *
   * @param {import("./stop.js").Stop} stop
   * @returns {Promise<boolean>}
   */
  acquire(stop) {
    if (stop.stopped) {
      return Promise.resolve(false);
    }
    if (this.held < this.size) {
      this.held++;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const grant = () => {
        forget();
        this.held++;
        resolve(true);
      };
      const forget = stop.onStop(() => {
        const i = this.waiting.indexOf(grant);
        if (i >= 0) {
          this.waiting.splice(i, 1);
        }
        resolve(false);
      });
      this.waiting.push(grant);
    });
  }

  release() {
    this.held--;
    const next = this.waiting.shift();
    if (next) {
      next();
    }
  }
}
