/**
 * What the relays of every stream hold of events their engines have not finished, router-wide. A
 * stream's relay holds an event until its blank line comes (only whole events reach a client), up to
 * `MAX_EVENT_CHARS` (relay.ts: a Responses API stream's last event carries the whole answer). That
 * bound is a stream's: a replica that sent events without end to 140 streams at once took the router
 * past its heap's limit and ended the process, every tenant's requests with it. So, past the router's
 * limit, a stream whose event grows is cut when it holds more than its fair share: the limit over the
 * streams holding anything, and never less than {@link MIN_SHARE_CHARS} (a stream of ordinary events,
 * a token each, or one split across two reads, holds far less). The largest holders go first, and what
 * is held stays within the limit and {@link MIN_SHARE_CHARS} a stream.
 */
export class HeldEvents {
  private total = 0;
  /** Streams holding anything now. */
  private holders = 0;

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
   * it grew, the router holds more than its limit, and the stream more than its fair share.
   */
  move(before: number, after: number): boolean {
    this.total += after - before;
    if (before === 0 && after > 0) this.holders += 1;
    else if (before > 0 && after === 0) this.holders -= 1;
    return after > before && this.total > this.limitChars && after > Math.max(MIN_SHARE_CHARS, this.limitChars / this.holders);
  }
}

/** What a stream may hold however full the router is: more than any ordinary event (a chunk with its logprobs). */
export const MIN_SHARE_CHARS = 16 * 1024;

/**
 * The router's limit: an eighth of its V8 heap's limit, or of the memory its container may use when
 * that is less (`process.constrainedMemory()`, 0 or undefined when unknown): held text is one byte a
 * character, or two, and the chart's 512 MiB pod would be killed long before a 4 GiB heap filled.
 */
export function heldEventsLimit(heapLimitBytes: number, constrainedBytes: number | undefined): number {
  const bound = constrainedBytes !== undefined && constrainedBytes > 0 ? Math.min(heapLimitBytes, constrainedBytes) : heapLimitBytes;
  return Math.floor(bound / 8);
}
