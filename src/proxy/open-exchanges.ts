/**
 * The engine exchanges the router could still end with an answer, router-wide, for the shutdown: the
 * attempts waiting for an engine's answer and the event streams being relayed. When the grace period
 * is over each one still open is ended so, rather than having its connection cut with nothing to say
 * why (an SDK reading a cut connection sees a network error, or a stream that merely stops): an attempt
 * still waiting fails, and its request is answered 503 `router_shutting_down`; a stream ends with its
 * dialect's error event, `router_shutting_down`, and the end its clients wait for. A body that is not
 * a stream, already begun, has no such end: the cut that follows is its end.
 */
export class OpenExchanges {
  private readonly ends = new Set<() => void>();

  /** An exchange began: `end` ends it as above. */
  add(end: () => void): void {
    this.ends.add(end);
  }

  /** The exchange is over (or went past where it could be ended so). */
  delete(end: () => void): void {
    this.ends.delete(end);
  }

  get size(): number {
    return this.ends.size;
  }

  /** Ends every exchange still open; returns how many. */
  endAll(): number {
    const open = [...this.ends];
    this.ends.clear();
    for (const end of open) end();
    return open.length;
  }
}
