import { describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { SseTap, type SseEvent } from '../../src/proxy/sse-tap.js';

const collect = (chunks: string[]): { events: SseEvent[]; tap: SseTap } => {
  const tap = new SseTap();
  const events = chunks.flatMap((c) => tap.push(c));
  return { events, tap };
};

describe('SseTap', () => {
  it('reads data events, joins multi-line data, skips comments and keeps event names', () => {
    const { events, tap } = collect(['data: {"a":1}\n\n: keep-alive\n\ndata: line1\ndata: line2\r\n\r\nevent: error\ndata:x\n\ndata: [DONE]\n\n']);
    expect(events).toEqual([{ data: '{"a":1}' }, { data: 'line1\nline2' }, { event: 'error', data: 'x' }, { data: '[DONE]' }]);
    expect(tap.atBoundary).toBe(true);
  });

  it('reads a block whose only field is `error:` (llama.cpp’s mid-stream error) as an error event, its value the data', () => {
    const error = '{"code":500,"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error"}';
    expect(collect([`data: {"a":1}\n\nerror: ${error}\n\ndata: [DONE]\n\n`]).events).toEqual([{ data: '{"a":1}' }, { event: 'error', data: error }, { data: '[DONE]' }]);
    // without its blank line, as the stream's last block
    const tap = new SseTap();
    tap.push(`error: ${error}`);
    expect(tap.closeTail()?.event).toEqual({ event: 'error', data: error });
    // an `error:` line beside data or an event name is still an unknown field, skipped
    expect(collect(['error: x\ndata: y\n\n']).events).toEqual([{ data: 'y' }]);
  });

  it('a block whose lines end in a lone carriage return is read line by line, also when its blank line is two line feeds', () => {
    expect(collect(['data: a\rdata: b\n\n']).events).toEqual([{ data: 'a\nb' }]);
    expect(collect(['data: a\n\n', 'data: b\rdata: c\n\n']).events).toEqual([{ data: 'a' }, { data: 'b\nc' }]);
  });

  it('knows when what was fed stops inside an event', () => {
    expect(collect(['data: {"a"']).tap.atBoundary).toBe(false);
    expect(collect(['data: {"a":1}\n']).tap.atBoundary).toBe(false);
    expect(collect(['data: {"a":1}\n\n']).tap.atBoundary).toBe(true);
  });

  it('reads an event far larger than its chunks whole, and knows it is inside it until it ends', () => {
    const tap = new SseTap();
    const data = 'x'.repeat(1 << 20);
    const text = `data: {"a":1}\n\ndata: ${data}\n\ndata: [DONE]\n\n`;
    const events: SseEvent[] = [];
    const boundaries: boolean[] = [];
    for (let at = 0; at < text.length; at += 4096) {
      events.push(...tap.push(text.slice(at, at + 4096)));
      boundaries.push(tap.atBoundary);
    }
    expect(events).toEqual([{ data: '{"a":1}' }, { data }, { data: '[DONE]' }]);
    expect(boundaries.slice(1, -1).every((b) => !b)).toBe(true); // inside the big event
    expect(boundaries.at(-1)).toBe(true);
    // a blank line split over three chunks ("\r\n" | "\r" | "\n") still ends the event
    const cr = new SseTap();
    expect([...cr.push('data: a'), ...cr.push('bc\r\n'), ...cr.push('\r'), ...cr.push('\ndata: d\r\n\r\n')]).toEqual([{ data: 'abc' }, { data: 'd' }]);
    const partial = new SseTap();
    partial.push('data: {"a":1}\n\ndata: ');
    partial.push('x'.repeat(10));
    partial.push('yz\n');
    expect(partial.atBoundary).toBe(false);
    expect(partial.rest()).toBe(`data: ${'x'.repeat(10)}yz\n`);
  });

  it('closes the incomplete tail into a last whole event, its blank line added', () => {
    const { tap } = collect(['data: {"a":1}\n\ndata: [DO', 'NE]\n']);
    expect(tap.closeTail()).toEqual({ raw: 'data: [DONE]\n\n', event: { data: '[DONE]' } });
    expect(tap.closeTail()).toBeUndefined();
    expect(tap.atBoundary).toBe(true);
    expect(collect(['data: {"a":1}\n\n']).tap.closeTail()).toBeUndefined();
    expect(collect(['event: message_stop\r\ndata: {}\r\n']).tap.closeTail()).toEqual({ raw: 'event: message_stop\r\ndata: {}\n\n', event: { event: 'message_stop', data: '{}' } });
  });

  it('ends an event at a blank line of mixed endings, and never at a `\r\n` taken for two', () => {
    expect(collect(['data: a\n\r\ndata: b\r\n\ndata: c\r\r\ndata: d\r\n\r\n']).events).toEqual([{ data: 'a' }, { data: 'b' }, { data: 'c' }, { data: 'd' }]);
    // a `\r` at a chunk's end waits for the next character: `\r\n` is one ending
    const tap = new SseTap();
    expect(tap.push('data: a\r\n\r')).toEqual([]);
    expect(tap.atBoundary).toBe(false);
    expect(tap.push('\ndata: b\r\n\r\n')).toEqual([{ data: 'a' }, { data: 'b' }]);
    expect(collect(['data: a\r\ndata: b\r\n']).events).toEqual([]);
  });

  it('counts what it holds of an unfinished event', () => {
    const tap = new SseTap();
    tap.push('data: {"a":1}\n\ndata: 12');
    tap.push('345');
    expect(tap.heldChars).toBe('data: 12345'.length);
    tap.push('\n\n');
    expect(tap.heldChars).toBe(0);
  });

  it('yields the same events however the stream is cut into chunks (property)', () => {
    const payload = fc.stringMatching(/^[^\r\n]{0,20}$/);
    const event = fc.array(payload, { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(fc.array(event, { maxLength: 8 }), fc.constantFrom('\n', '\r\n'), fc.array(fc.nat(), { maxLength: 20 }), (events, eol, cuts) => {
        const text = events.map((lines) => lines.map((l) => `data: ${l}${eol}`).join('') + eol).join('');
        const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
        const chunks: string[] = [];
        let last = 0;
        for (const p of [...points, text.length]) {
          chunks.push(text.slice(last, p));
          last = p;
        }
        const whole = collect([text]);
        const cut = collect(chunks);
        expect(cut.events).toEqual(whole.events);
        expect(cut.events).toEqual(events.map((lines) => ({ data: lines.join('\n') })));
        expect(cut.tap.atBoundary).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('decodes bytes cut anywhere, inside two-, three- and four-byte characters too, as the whole text (property)', () => {
    // no line breaks in an event's data or in the unfinished tail: a blank line there ("\r\r") would end one more event
    const noBreaks = (maxLength: number): fc.Arbitrary<string> => fc.string({ unit: 'binary', maxLength }).map((v) => v.replace(/[\r\n]/g, ''));
    fc.assert(
      fc.property(fc.array(noBreaks(12), { maxLength: 8 }), noBreaks(4), fc.array(fc.nat(), { maxLength: 24 }), (events, tail, cuts) => {
        const text = events.map((data) => `data: ${data}\n\n`).join('') + tail;
        const bytes = Buffer.from(text, 'utf8');
        const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
        const tap = new SseTap();
        const raw: string[] = [];
        let last = 0;
        for (const p of [...points, bytes.length]) {
          raw.push(...tap.segments(bytes.subarray(last, p)).map((s) => s.raw));
          last = p;
        }
        const whole = new SseTap();
        const expected = whole.segments(bytes).map((s) => s.raw);
        expect(raw).toEqual(expected);
        expect(raw).toEqual(events.map((data) => `data: ${data}\n\n`));
        expect(tap.rest()).toBe(whole.rest());
      }),
      { numRuns: 500 },
    );
  });

  it('cuts the same raw blocks, tail and separator as the blank lines of the whole text, in any line ending, however it is chunked (property)', () => {
    // every ending SSE allows, mixed within a stream; comment lines; a carriage return arriving alone at a chunk's end
    const line = fc.oneof(
      fc.stringMatching(/^[^\r\n]{0,12}$/).map((v) => `data: ${v}`),
      fc.constant(': keep-alive'),
      fc.constant('event: delta'),
    );
    const eol = fc.constantFrom('\n', '\r\n', '\r');
    const block = fc.tuple(fc.array(fc.tuple(line, eol), { minLength: 1, maxLength: 3 }), eol).map(([lines, end]) => lines.map(([l, e]) => l + e).join('') + end);
    fc.assert(
      fc.property(fc.array(block, { maxLength: 6 }), fc.string({ maxLength: 8 }), fc.array(fc.nat(), { maxLength: 12 }), (blocks, tail, cuts) => {
        const text = blocks.join('') + tail;
        // the reference: the whole text cut at each leftmost blank line (two line endings, `\r\n` one of
        // them, never two; a `\r` at the very end may yet be the start of one)
        const expected: string[] = [];
        const boundary = /(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?=[^\n]))/g;
        let from = 0;
        for (let m = boundary.exec(text); m; m = boundary.exec(text)) {
          expected.push(text.slice(from, m.index + m[0].length));
          from = m.index + m[0].length;
        }
        const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((a, b) => a - b);
        const tap = new SseTap();
        const raws: string[] = [];
        let last = 0;
        for (const p of [...points, text.length]) {
          tap.feed(Buffer.from(text.slice(last, p)));
          for (let seg = tap.next(); seg; seg = tap.next()) raws.push(seg.raw);
          last = p;
        }
        expect(raws).toEqual(expected);
        expect(tap.atBoundary).toBe(from === text.length);
        const whole = new SseTap();
        whole.segments(text);
        expect(tap.atBoundary).toBe(whole.atBoundary);
        expect(tap.rest()).toBe(text.slice(from));
        expect(tap.rest()).toBe('');
      }),
      { numRuns: 500 },
    );
  });
});
