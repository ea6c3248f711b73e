/**
 * Reads a Server-Sent Events stream as it passes, without holding it up: the caller relays bytes as
 * they arrive, and the tap keeps only the incomplete tail of the current event. It reports whole
 * events (their `data` joined per the SSE rules, and their exact raw text), and whether what was
 * fed ends on an event boundary (the relay writes whole events only, so that a final error event never
 * follows half of one). A character split across chunks is kept whole: a chunk that ends in ASCII (an event
 * ends in a line feed) is decoded on its own, and from the first chunk that does not, a StringDecoder
 * decodes the rest (made only then: it holds a buffer of its own, one more allocation a stream).
 */
import { StringDecoder } from 'node:string_decoder';

export interface SseEvent {
  /** `data:` lines joined with "\n" (one leading space after the colon stripped). */
  data: string;
  /**
   * The `event:` name, if any. A block whose only field is `error:` (some llama.cpp builds' mid-stream
   * error, `error: {"code":500,…}`) is read as `event: error` with that value as its data.
   */
  event?: string;
  /** Whether `data` holds a usage object: found once, by `carriesUsage` (usage.ts), for everyone who asks. */
  usage?: boolean;
}

/** A stretch of the stream: one complete event block with its blank line, or a comment-only block. */
export interface SseSegment {
  raw: string;
  event: SseEvent | undefined;
}

/**
 * A blank line: two line endings in a row, each of the three SSE allows (`\r\n`, `\n`, `\r`), mixed
 * too. A `\r` followed by `\n` is one ending, never two, so a `\r` that ends what has come so far
 * is not taken as the second ending until the next character says it is not the start of `\r\n`.
 * `lastIndex` says where to look from.
 */
const BOUNDARY = /(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?=[^\n]))/g;
const HAS_BOUNDARY = /(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?=[^\n]))/;

export class SseTap {
  private decoder: StringDecoder | undefined;
  /** Text fed and not yet read whole from `start` on (what is before `start` was read). */
  private pending = '';
  private start = 0;
  /**
   * While the block at `start` is incomplete, the chunks fed after `pending`, joined only once one of
   * them ends it: appending each chunk to `pending` and searching it again copied and read the whole
   * block per chunk, quadratic in a large event (16 MB in 64 KiB chunks took seconds of the loop).
   */
  private parts: string[] = [];
  /** The block at `start` has no blank line yet: only `tail` and a new chunk are searched for one. */
  private incomplete = false;
  /** The last characters (up to 3) of the incomplete block: a blank line may start there and end in the next chunk. */
  private tail = '';
  /** Characters in `parts`. */
  private partsChars = 0;
  /**
   * `pending` holds a carriage return, so a block may end in `\r\n\r\n` or `\r\r` and is found with
   * BOUNDARY. Without one (engines end lines with `\n`) a block ends at the next `\n\n`, found with
   * `indexOf`, which allocates nothing: a stream is read block by block, one per token.
   */
  private cr = false;
  /** What was fed ends exactly after a blank line (or nothing was fed): nothing of an event is held. */
  atBoundary = true;

  /** Feeds a chunk of the stream; returns the events it completed. */
  push(chunk: Buffer | string): SseEvent[] {
    return this.segments(chunk).flatMap((s) => (s.event ? [s.event] : []));
  }

  /** Feeds a chunk; returns the complete blocks it finished, raw text included. */
  segments(chunk: Buffer | string): SseSegment[] {
    this.feed(chunk);
    const out: SseSegment[] = [];
    for (let segment = this.next(); segment !== undefined; segment = this.next()) out.push(segment);
    return out;
  }

  /** Feeds a chunk without reading it: {@link next} then takes its complete blocks one at a time. */
  feed(chunk: Buffer | string): void {
    const text = typeof chunk === 'string' ? chunk : this.decode(chunk);
    if (text.length === 0) return;
    if (!this.cr && text.includes('\r')) this.cr = true;
    if (this.incomplete) {
      const probe = this.tail + text;
      if (!(this.cr ? HAS_BOUNDARY.test(probe) : probe.includes('\n\n'))) {
        this.parts.push(text);
        this.partsChars += text.length;
        this.tail = probe.slice(-3);
        return;
      }
      this.pending = this.pending.slice(this.start) + this.parts.join('') + text;
      this.parts = [];
      this.partsChars = 0;
      this.incomplete = false;
      this.start = 0;
      return;
    }
    this.pending = this.start === 0 ? this.pending + text : this.pending.slice(this.start) + text;
    this.start = 0;
  }

  private decode(chunk: Buffer): string {
    // a last byte below 0x80 ends a whole character: nothing of this chunk waits for the next one
    if (this.decoder === undefined && (chunk.length === 0 || (chunk[chunk.length - 1] as number) < 0x80)) return chunk.toString('utf8');
    this.decoder ??= new StringDecoder('utf8');
    return this.decoder.write(chunk);
  }

  /** The next complete block fed, or undefined when what is left is incomplete. */
  next(): SseSegment | undefined {
    if (this.incomplete) {
      this.atBoundary = false;
      return undefined;
    }
    const { pending, start } = this;
    let index: number;
    let end: number;
    if (this.cr) {
      BOUNDARY.lastIndex = start;
      const match = BOUNDARY.exec(pending);
      index = match ? match.index : -1;
      end = match ? index + match[0].length : -1;
    } else {
      index = pending.indexOf('\n\n', start);
      end = index + 2;
    }
    if (index < 0) {
      this.atBoundary = start === pending.length;
      if (!this.atBoundary) {
        this.incomplete = true;
        this.tail = pending.slice(Math.max(start, pending.length - 3));
      }
      return undefined;
    }
    // the usual block, one `data: ` line (no carriage return anywhere, and its first line feed is the
    // blank line's): its data read straight from what is pending, without the block cut out first
    const oneLine = !this.cr && pending.startsWith('data: ', start) && pending.indexOf('\n', start) === index;
    const segment = { raw: pending.slice(start, end), event: oneLine ? { data: pending.slice(start + 6, index) } : parseBlock(pending.slice(start, index)) };
    if (end === pending.length) this.clear();
    else this.start = end;
    this.atBoundary = end === pending.length;
    return segment;
  }

  private clear(): void {
    this.pending = '';
    this.start = 0;
    this.cr = false;
    if (this.parts.length > 0) this.parts = []; // a new array only when one was used (an event per chunk is the rule)
    this.partsChars = 0;
    this.incomplete = false;
    this.tail = '';
  }

  /** Characters fed and not yet read as whole blocks (an incomplete event's, while it is held). */
  get heldChars(): number {
    return this.pending.length - this.start + this.partsChars;
  }

  /** What was fed and not read as a whole block. */
  private unread(): string {
    return this.pending.slice(this.start) + (this.parts.length > 0 ? this.parts.join('') : '');
  }

  /** The incomplete tail (for a stream that ends without a final blank line). */
  rest(): string {
    const tail = this.unread() + (this.decoder?.end() ?? '');
    this.clear();
    this.atBoundary = true;
    return tail;
  }

  /**
   * The incomplete tail as a whole block, its blank line added (a stream's last event without one,
   * as some llama.cpp builds end), or undefined when nothing but line endings is left. Reads it.
   */
  closeTail(): SseSegment | undefined {
    const text = this.rest().replace(/[\r\n]+$/, '');
    return text === '' ? undefined : { raw: `${text}\n\n`, event: parseBlock(text) };
  }
}

function parseBlock(block: string): SseEvent | undefined {
  // the usual block, one `data: ` line, without splitting it into lines
  if (block.startsWith('data: ') && !block.includes('\n') && !block.includes('\r')) return { data: block.slice(6) };
  const data: string[] = [];
  let event: string | undefined;
  let error: string[] | undefined;
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
    else if (field === 'error') (error ??= []).push(value);
  }
  // SSE has no `error` field, so a client's parser (the openai SDK's) skips the block and takes the
  // `data: [DONE]` after it for a finished answer: llama.cpp's server_sent_event(sink, "error", …)
  // writes its mid-stream failure so. Read as an error event, it is relayed and counted as one.
  if (data.length === 0 && event === undefined) return error ? { data: error.join('\n'), event: 'error' } : undefined;
  return { data: data.join('\n'), ...(event !== undefined ? { event } : {}) };
}
