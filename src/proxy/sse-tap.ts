/**
 * Reads a Server-Sent Events stream as it passes, without holding it up: the bytes are relayed as they
 * arrive; the tap only remembers the incomplete tail of the current event. It reports whole events
 * (their `data` joined per the SSE rules) and whether the relayed bytes end on an event boundary, so a
 * final error event can be appended without corrupting a half-sent one.
 */

export interface SseEvent {
  /** `data:` lines joined with "\n" (one leading space after the colon stripped). */
  data: string;
  /** The `event:` name, if any. */
  event?: string;
}

export class SseTap {
  private pending = '';
  /** The relayed bytes end exactly after a blank line (or nothing was relayed). */
  atBoundary = true;

  /** Feeds a chunk of the stream; returns the events it completed. */
  push(chunk: Buffer | string): SseEvent[] {
    const text = typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    if (text.length === 0) return [];
    this.pending += text;
    const events: SseEvent[] = [];
    for (;;) {
      const match = /\r\n\r\n|\n\n|\r\r/.exec(this.pending);
      if (!match) break;
      const block = this.pending.slice(0, match.index);
      this.pending = this.pending.slice(match.index + match[0].length);
      const event = parseBlock(block);
      if (event) events.push(event);
    }
    this.atBoundary = this.pending.length === 0;
    return events;
  }

  /** What to write before an extra event so that it starts on a boundary. */
  separator(): string {
    if (this.atBoundary) return '';
    return this.pending.endsWith('\n') || this.pending.endsWith('\r') ? '\n' : '\n\n';
  }
}

function parseBlock(block: string): SseEvent | undefined {
  const data: string[] = [];
  let event: string | undefined;
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') event = value;
  }
  if (data.length === 0 && event === undefined) return undefined;
  return { data: data.join('\n'), ...(event !== undefined ? { event } : {}) };
}
