/**
 * What the relays of every stream hold of events their engines have not finished, router-wide. A
 * stream's relay holds an event until its blank line comes (only whole events reach a client), up to
 * `MAX_EVENT_CHARS` (relay.ts: a Responses API stream's last event carries the whole answer).
 * That bound is a stream's: a replica that sent events without end to 150 streams at once held 956 MB
 * of the router (about 130 would have reached a 4 GiB heap's limit and ended the process, every
 * tenant's requests with it). Past the router's limit, a stream that holds more than
 * {@link SHARE_CHARS} is cut as it grows; a stream of ordinary events (a token each) never is.
 */
export class HeldEvents {
  private total = 0;

  constructor(
    /** Characters every stream together may hold before the large holders are cut. */
    readonly limitChars: number,
  ) {}

  /** Characters held now, over every stream. */
  get chars(): number {
    return this.total;
  }

  /**
   * A stream's share went from `before` to `after` characters. Answers whether that stream is to be cut:
   * the router holds more than its limit and this stream more than its fair share.
   */
  move(before: number, after: number): boolean {
    this.total += after - before;
    return after > SHARE_CHARS && this.total > this.limitChars;
  }
}

/** What a stream may hold however full the router is: far more than any event but an answer's last. */
export const SHARE_CHARS = 64 * 1024;

/**
 * The router's limit: an eighth of its V8 heap's limit, or of the memory its container may use when
 * that is less (`process.constrainedMemory()`, 0 or undefined when unknown): held text is one byte a
 * character, or two, and the chart's 512 MiB pod would be killed long before a 4 GiB heap filled.
 */
export function heldEventsLimit(heapLimitBytes: number, constrainedBytes: number | undefined): number {
  const bound = constrainedBytes !== undefined && constrainedBytes > 0 ? Math.min(heapLimitBytes, constrainedBytes) : heapLimitBytes;
  return Math.floor(bound / 8);
}
