/**
 * relayResponse driven by hand: the engine's body handed to the sink in the order a test chooses, so
 * that what arrives while an answer's last bytes are held (the engine's end, its connection breaking)
 * can be put exactly there. The client is a real HTTP client of a real server.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http, { type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type AttemptResult, type AttemptSpec, type StreamDone } from '../../src/proxy/forwarder.js';
import { ChunkBlocks, relayResponse, streamEnd, type AttemptControl, type BodySink, type EngineResponse } from '../../src/proxy/relay.js';
import { StreamSplice } from '../../src/director/resume.js';
import { HeldEvents, MIN_SHARE_CHARS } from '../../src/proxy/held-events.js';
import { FakeTime } from '../helpers/fake-time.js';
import { holdingObserver } from '../helpers/holding-observer.js';
import { rawRequest } from '../helpers/http.js';
import { waitFor } from '../helpers/sim.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** An engine response held by hand: it records pauses and resumes. */
class HandEngine implements EngineResponse {
  paused = false;
  readonly log: string[] = [];
  constructor(readonly headers: http.IncomingHttpHeaders) {}
  pause(): void {
    this.paused = true;
    this.log.push('pause');
  }
  resume(): void {
    this.paused = false;
    this.log.push('resume');
  }
  destroy(): void {
    this.log.push('destroy');
  }
}

/**
 * A server whose one request is relayed from a {@link HandEngine}; `answered` is the observer's hook.
 * Resolves with the sink, the engine and the attempt's end once the relay is set up.
 */
async function relayed(
  headers: http.IncomingHttpHeaders,
  spec: Partial<AttemptSpec>,
  time = new FakeTime(),
  heldEvents?: HeldEvents,
): Promise<{ url: string; ready: Promise<{ sink: BodySink; engine: HandEngine; done: Promise<StreamDone>; res: ServerResponse }> }> {
  let ready: (v: { sink: BodySink; engine: HandEngine; done: Promise<StreamDone>; res: ServerResponse }) => void = () => undefined;
  const setUp = new Promise<{ sink: BodySink; engine: HandEngine; done: Promise<StreamDone>; res: ServerResponse }>((resolve) => (ready = resolve));
  const server = http.createServer((req, res: ServerResponse) => {
    req.resume();
    const engine = new HandEngine(headers);
    let settle: (r: AttemptResult) => void = () => undefined;
    const result = new Promise<AttemptResult>((resolve) => (settle = resolve));
    // the attempt's one timer, on the fake clock
    let timer: unknown;
    const control: AttemptControl = {
      arm: (ms, onTimeout) => {
        time.clearTimeout(timer);
        timer = time.setTimeout(onTimeout, ms);
      },
      disarm: () => time.clearTimeout(timer),
      settle: (r) => settle(r),
    };
    const full = { requestId: 'r1', timeouts: { connectMs: 1000, firstByteMs: 1000, idleMs: 60_000, clientStallMs: 60_000 }, deadline: 120_000, ...spec } as AttemptSpec;
    const sink = relayResponse(full, engine, res, 200, control, time, heldEvents);
    const done = result.then((r) => (r.kind === 'committed' ? r.done : Promise.reject(new Error(r.kind))));
    ready({ sink, engine, done, res });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, ready: setUp };
}

const whole = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n';
const shortTimeouts = { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, clientStallMs: 60_000 };

/** A stream whose answer's last bytes wait for `hold`, its idle timeout 1 s and its deadline at 1.5 s of fake time, and a client asking for it. */
async function heldStream(
  time: FakeTime,
): Promise<{ hold: ReturnType<typeof holdingObserver>; response: ReturnType<typeof rawRequest>; sink: BodySink; engine: HandEngine; done: Promise<StreamDone> }> {
  const hold = holdingObserver();
  const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { observe: hold.observe, endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 1500 }, time);
  const response = rawRequest(`${url}/x`, { body: '{}' });
  return { hold, response, ...(await ready) };
}

describe('relayResponse: an answer held for what answered() returned', () => {
  it("the engine's end arriving while the last bytes are held waits behind them: the client gets the whole body, then the end", async () => {
    const hold = holdingObserver();
    const { url, ready } = await relayed({ 'content-type': 'application/json', 'content-length': '11' }, { observe: hold.observe });
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    sink.data(Buffer.from('{"ok":'));
    sink.data(Buffer.from('true}'));
    expect(hold.asked()).toBe(true);
    sink.end(); // an engine that delivers its end while the router holds the body paused
    expect(engine.log).toEqual(['pause']);
    hold.release();
    const answer = await response;
    expect(answer.body).toBe('{"ok":true}');
    expect((await done).end).toBe('complete');
    expect(engine.log).toEqual(['pause', 'resume']);
  });

  it('a stream whose connection breaks while its last event is held ends complete: the last event came', async () => {
    const hold = holdingObserver();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { observe: hold.observe, endOfStream: (e) => e.data === '[DONE]' });
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, done } = await ready;
    sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\n'));
    sink.data(Buffer.from('data: [DONE]\n\n'));
    sink.broken();
    hold.release();
    const answer = await response;
    expect(answer.body).toBe('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n');
    expect((await done).end).toBe('complete');
  });

  it('a hold longer than the idle timeout and the deadline cuts nothing (the answer is whole); the idle clock runs again after it', async () => {
    const time = new FakeTime();
    const { hold, response, sink, engine, done } = await heldStream(time);
    sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\n'));
    sink.data(Buffer.from('data: [DONE]\n\n'));
    expect(hold.asked()).toBe(true);
    await time.advance(2000); // past the idle timeout and the deadline, the last event still held
    expect(time.pendingTimers).toBe(0);
    hold.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(engine.log).toEqual(['pause', 'resume']);
    // the engine never ends its response after the last event: a whole idle timeout after the hold (the
    // deadline, passed while the whole answer was held, no longer counts) it is cancelled, and the
    // client's response ended as it is: nothing after the last event
    expect(time.pendingTimers).toBe(1);
    await time.advance(999);
    expect(engine.log).not.toContain('destroy');
    await time.advance(1);
    const answer = await response;
    expect(answer.body).toBe('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n');
    expect((await done).end).toBe('complete');
    expect(engine.log).toContain('destroy');
  });

  it('a hold that ends just before the deadline: the deadline does not cut the whole answer after it', async () => {
    const time = new FakeTime();
    const { hold, response, sink, done } = await heldStream(time);
    sink.data(Buffer.from(whole));
    await time.advance(1499);
    hold.release();
    await new Promise((resolve) => setImmediate(resolve));
    await time.advance(2); // past the deadline: the engine's end is still due within the idle timeout
    sink.end();
    expect((await response).body).toBe(whole);
    expect((await done).end).toBe('complete');
  });

  it('no hold, an engine that sends keep-alive comments after its last event and never ends: ended complete an idle timeout after the answer', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 60_000 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    sink.data(Buffer.from(whole));
    for (let i = 0; i < 3; i++) {
      await time.advance(300);
      sink.data(Buffer.from(': keep-alive\n\n')); // bytes after the answer do not extend the engine's time
    }
    expect(engine.log).not.toContain('destroy');
    await time.advance(100); // 1000 ms after the answer
    expect((await done).end).toBe('complete');
    expect(engine.log).toContain('destroy');
    expect((await response).body).toBe(`${whole}${': keep-alive\n\n'.repeat(3)}`);
  });

  it('a client that stops taking a whole answer is cut at the stall timeout, not at the deadline, and as stalled', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed(
      { 'content-type': 'text/event-stream' },
      { endOfStream: (e) => e.data === '[DONE]', timeouts: { ...shortTimeouts, clientStallMs: 5000 }, deadline: 1500 },
      time,
    );
    // a client that reads nothing of the answer: the kernel's buffers fill, the router's write waits
    const request = http.request(`${url}/x`, { method: 'POST', agent: false });
    request.on('response', (res) => res.pause());
    request.on('error', () => undefined);
    request.end('{}');
    const { sink, engine, done } = await ready;
    let ended: string | undefined;
    void done.then((d) => (ended = d.end));
    sink.data(Buffer.from(`data: {"x":"${'y'.repeat(16 << 20)}"}\n\ndata: [DONE]\n\n`));
    expect(engine.paused).toBe(true);
    await time.advance(1600); // past the deadline: the whole answer is not cut for it
    expect(ended).toBeUndefined();
    await time.advance(3400);
    expect(await done).toMatchObject({ end: 'client_stalled' });
    request.destroy();
  });

  it('no hold: an answer whole just before the deadline waits an idle timeout for the engine’s end, not the deadline', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 1500 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    await time.advance(1000);
    sink.data(Buffer.from(whole)); // the idle timer is set for the deadline, 500 ms on
    await time.advance(600);
    expect(engine.log).not.toContain('destroy');
    sink.end();
    expect((await done).end).toBe('complete');
    expect((await response).body).toBe(whole);
  });

  it('the engine’s time to end counts from the answer’s last bytes, also when the client took them late', async () => {
    const time = new FakeTime();
    let client: http.IncomingMessage | undefined;
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 60_000 }, time);
    const request = http.request(`${url}/x`, { method: 'POST', agent: false });
    request.on('response', (res) => {
      client = res;
      res.pause();
    });
    request.on('error', () => undefined);
    request.end('{}');
    const { sink, engine, done, res } = await ready;
    sink.data(Buffer.from(`data: {"x":"${'y'.repeat(16 << 20)}"}\n\ndata: [DONE]\n\n`));
    await time.advance(700);
    const drained = new Promise((resolve) => res.once('drain', resolve));
    await waitFor(() => client !== undefined, 'the client');
    client?.resume(); // the client reads again: the answer's last bytes go out 700 ms after it was whole
    await drained;
    await time.advance(299);
    expect(engine.log).not.toContain('destroy');
    await time.advance(1); // 1000 ms after the answer was whole: the engine did not end its response
    expect((await done).end).toBe('complete');
    expect(engine.log).toContain('destroy');
    request.destroy();
  });

  it('an engine that sends bytes before its last event past the deadline is still cut by it (the answer was not whole)', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 1500 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, done } = await ready;
    for (let i = 0; i < 4; i++) {
      sink.data(Buffer.from(': keep-alive\n\n'));
      await time.advance(400);
    }
    expect((await done).end).toBe('deadline');
    expect((await response).body).toContain('upstream_timeout');
  });

  it('a hold that ends past the deadline leaves the engine its end: the answer ends complete, nothing after its last event', async () => {
    const time = new FakeTime();
    const { hold, response, sink, done } = await heldStream(time);
    sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'));
    await time.advance(1600); // the hold outlasts the deadline
    hold.release();
    await new Promise((resolve) => setImmediate(resolve));
    await time.advance(0); // timers due now run before the engine's end comes (it did: a 0 ms idle timer cut the answer as `deadline`)
    sink.end();
    expect((await response).body).toBe('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n');
    expect((await done).end).toBe('complete');
  });

  it('what the engine sends after the held last event waits behind it, even when the client drains an earlier write meanwhile', async () => {
    const hold = holdingObserver();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { observe: hold.observe, endOfStream: (e) => e.data === '[DONE]' });
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done, res } = await ready;
    // one chunk: a first event big enough to fill the client's buffer (written at once), the last event
    // (held), and the start of an event after it
    const big = `data: {"choices":[{"delta":{"content":"${'x'.repeat(1 << 20)}"}}]}\n\n`;
    sink.data(Buffer.from(`${big}data: [DONE]\n\ndata: {"late"`));
    expect(hold.asked()).toBe(true);
    await new Promise((resolve) => res.once('drain', resolve)); // the client took the big event
    expect(engine.paused).toBe(true);
    expect(engine.log).not.toContain('resume');
    hold.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(engine.paused).toBe(false);
    sink.data(Buffer.from(':1}\n\n'));
    sink.end();
    expect((await response).body).toBe(`${big}data: [DONE]\n\ndata: {"late":1}\n\n`);
    expect((await done).end).toBe('complete');
  });

  it('an observer that returns nothing holds nothing: the body is never paused', async () => {
    const { url, ready } = await relayed(
      { 'content-type': 'application/json', 'content-length': '11' },
      { observe: { event: () => undefined, body: () => undefined, bodyEnd: () => undefined, answered: () => undefined } },
    );
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    sink.data(Buffer.from('{"ok":true}'));
    sink.end();
    expect((await response).body).toBe('{"ok":true}');
    expect((await done).end).toBe('complete');
    expect(engine.log).toEqual([]);
  });
});

// Engine hunt F7: a replica that dripped a non-streamed answer a byte every 500 ms reset the idle clock
// with each byte, so only the total timeout (30 minutes) ended it, and a deadline counts nothing on its breaker.
describe('relayResponse: the idle timeout of a body that is not a stream', () => {
  it('runs from the first byte: an answer dripped a byte at a time is cut at the idle timeout, as the engine’s failure (idle_timeout)', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed({ 'content-type': 'application/json' }, { timeouts: shortTimeouts, deadline: 600_000 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    const drip = '{"id":"x","object":"chat.completion","choices":[]}';
    let ended = false;
    void done.then(() => (ended = true));
    // a byte every 400 ms, each within the idle timeout of the one before, for 4 s (or until the relay ends)
    for (let at = 0; at < 10 && !ended; at++) {
      sink.data(Buffer.from(drip[at]!));
      await time.advance(400);
    }
    await time.advance(1000); // an idle timeout after the last byte: what a clock reset by each byte would wait
    expect((await done).end).toBe('idle_timeout');
    expect(engine.log).toContain('destroy');
    const answer = await response;
    expect(answer.error).toBeDefined(); // cut: a JSON body short of its end never looks complete
    expect(answer.body).toBe('{"i');
  });

  it('a stream’s idle clock still starts again with each chunk: events 400 ms apart outlast the 1 s idle timeout', async () => {
    const time = new FakeTime();
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', timeouts: shortTimeouts, deadline: 600_000 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, done } = await ready;
    const event = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\n';
    for (let step = 0; step < 5; step++) {
      sink.data(Buffer.from(event));
      await time.advance(400);
    }
    sink.data(Buffer.from('data: [DONE]\n\n'));
    sink.end();
    expect((await done).end).toBe('complete');
    expect((await response).body).toBe(`${event.repeat(5)}data: [DONE]\n\n`);
  });

  it('a whole body of known length in several chunks is unaffected: it ends complete', async () => {
    const time = new FakeTime();
    const body = '{"ok":true}';
    const { url, ready } = await relayed({ 'content-type': 'application/json', 'content-length': String(body.length) }, { timeouts: shortTimeouts, deadline: 600_000 }, time);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, done } = await ready;
    sink.data(Buffer.from(body.slice(0, 5)));
    await time.advance(900);
    sink.data(Buffer.from(body.slice(5)));
    sink.end();
    expect((await done).end).toBe('complete');
    expect((await response).body).toBe(body);
  });
});

describe('relayResponse: the usage chunk the router asked for, dropped from a chunk that goes as it came', () => {
  const usage = 'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n';
  const content = (text: string): string => `data: {"id":"c","choices":[{"index":0,"delta":{"content":"${text}"}}]}\n\n`;
  const finish = 'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n';
  const done = 'data: [DONE]\n\n';

  /** The client's body when the engine's stream comes in these chunks, the usage chunk stripped. */
  async function relay(chunks: Buffer[]): Promise<{ body: Buffer; end: StreamDone }> {
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { stripUsageChunk: true });
    // the body's bytes as they came (a client that decodes would read a bad byte and U+FFFD alike)
    const response = new Promise<Buffer>((resolve, reject) => {
      const request = http.request(`${url}/v1/chat/completions`, { method: 'POST', agent: false }, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (part: Buffer) => parts.push(part));
        res.on('end', () => resolve(Buffer.concat(parts)));
      });
      request.on('error', reject);
      request.end('{}');
    });
    const { sink, done: ended } = await ready;
    for (const chunk of chunks) sink.data(chunk);
    sink.end();
    return { body: await response, end: await ended };
  }

  it.each([
    ['in the middle', [content('a'), content('b'), finish, usage, done]],
    ['first', [usage, content('a'), done]],
    ['last', [content('a'), finish, usage]],
    ['alone', [usage]],
    ['twice, side by side', [content('a'), usage, usage, done]],
  ])('drops it %s, byte for byte what is kept', async (_where, events) => {
    const stream = Buffer.from(events.join(''));
    const expected = Buffer.from(events.filter((e) => e !== usage).join(''));
    const { body, end } = await relay([stream]);
    expect(body.equals(expected)).toBe(true);
    expect(end.end).toBe('complete');
  });

  it('counts bytes, not characters, before and after it (text in several scripts)', async () => {
    const events = [content('héllo'), content('日本語'), content('🙂'), usage, content('ß'), done];
    const expected = Buffer.from(events.filter((e) => e !== usage).join(''));
    const { body } = await relay([Buffer.from(events.join(''))]);
    expect(body.equals(expected)).toBe(true);
  });

  it('writes the kept events as text when the bytes are not UTF-8 (they were read as U+FFFD)', async () => {
    const bad = Buffer.concat([Buffer.from('data: {"id":"c","choices":[{"index":0,"delta":{"content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}]}\n\n')]);
    const { body } = await relay([Buffer.concat([bad, Buffer.from(usage + done)])]);
    // what the relay read, encoded again: each bad byte one U+FFFD, nothing of the usage chunk
    expect(body.equals(Buffer.from(bad.toString('utf8') + done))).toBe(true);
  });

  it('passes a first chunk with nothing to drop as it came, bytes that are not UTF-8 in a later event too (its first event went ahead)', async () => {
    const bad = Buffer.concat([Buffer.from('data: {"id":"c","choices":[{"index":0,"delta":{"content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}]}\n\n')]);
    const stream = Buffer.concat([Buffer.from(content('a')), bad, Buffer.from(done)]);
    const { body } = await relay([stream]);
    expect(body.equals(stream)).toBe(true);
    // and a first event that is not UTF-8 itself does not go ahead: the chunk goes as it came
    const first = Buffer.concat([bad, Buffer.from(content('a') + done)]);
    expect((await relay([first])).body.equals(first)).toBe(true);
  });

  it('passes bytes that are not UTF-8 through as they came when their U+FFFD takes as many (a cut four-byte character)', async () => {
    // F0 9F 99 is the start of 🙂 without its last byte: read as one U+FFFD, three bytes for three
    const cut = Buffer.concat([Buffer.from('data: {"id":"c","choices":[{"index":0,"delta":{"content":"'), Buffer.from([0xf0, 0x9f, 0x99]), Buffer.from('"}}]}\n\n')]);
    const { body } = await relay([Buffer.concat([cut, Buffer.from(usage + done)])]);
    expect(body.equals(Buffer.concat([cut, Buffer.from(done)]))).toBe(true);
  });

  it('ChunkBlocks: views of the chunk around each dropped event, undefined when bytes and text disagree; emptied for the next chunk', () => {
    const segments = [content('é'), usage, done].map((raw) => ({ raw, event: undefined }));
    const chunk = Buffer.from(segments.map((s) => s.raw).join(''));
    const blocks = new ChunkBlocks();
    segments.forEach((segment, i) => blocks.add(segment, i === 1 ? '' : segment.raw));
    const kept = blocks.keptBytes(chunk);
    expect(kept?.map((b) => b.toString())).toEqual([content('é'), done]);
    expect(kept?.every((b) => b.buffer === chunk.buffer)).toBe(true);
    expect(blocks.text()).toBe(content('é') + done);
    expect(blocks.keptBytes(chunk.subarray(1))).toBeUndefined();
    blocks.clear();
    // the slots keep nothing of the chunk: the next chunk's blocks alone
    expect(blocks.segments.every((s) => s.raw === '')).toBe(true);
    blocks.add(segments[1]!, '');
    expect(blocks.keptBytes(Buffer.from(usage))).toEqual([]);
    expect(blocks.text()).toBe('');
  });
});

describe('relayResponse: what every stream holds of unfinished events, router-wide', () => {
  /** A stream relayed with `heldEvents`: its client's request sent, its sink ready. */
  async function stream(heldEvents: HeldEvents) {
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]' }, new FakeTime(), heldEvents);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    return { response, ...(await ready) };
  }

  it('cuts a stream that holds more than its share while the router holds more than its limit; a stream of small events goes on', async () => {
    const heldEvents = new HeldEvents(3 * MIN_SHARE_CHARS);
    const big = await stream(heldEvents);
    const small = await stream(heldEvents);
    big.sink.data(Buffer.from('data: ' + 'a'.repeat(1.5 * MIN_SHARE_CHARS))); // an event without end, over its share: the router is under its limit
    small.sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"b"}}]}\n\ndata: ' + 'b'.repeat(MIN_SHARE_CHARS / 2)));
    expect(heldEvents.chars).toBe(1.5 * MIN_SHARE_CHARS + 6 + MIN_SHARE_CHARS / 2 + 6);
    big.sink.data(Buffer.from('a'.repeat(MIN_SHARE_CHARS))); // the router over its limit: the stream past its share is cut
    expect((await big.done).end).toBe('upstream_broken');
    expect(big.engine.log).toContain('destroy');
    const cut = await big.response;
    expect(cut.body).toContain('"code":"upstream_stream_broken"');
    expect(cut.body).not.toContain('aaa'); // no part of the unfinished event reached the client
    expect(heldEvents.chars).toBe(MIN_SHARE_CHARS / 2 + 6); // its share went with it
    small.sink.data(Buffer.from('b\n\ndata: [DONE]\n\n'));
    small.sink.end();
    expect((await small.done).end).toBe('complete');
    expect((await small.response).body).toMatch(/^data: \{"choices":\[\{"delta":\{"content":"b"\}\}\]\}\n\ndata: b+\n\ndata: \[DONE\]\n\n$/);
    expect(heldEvents.chars).toBe(0);
  });

  it("holds nothing of what an engine sends after its stream's final event: it is dropped unread, never cut for", async () => {
    const heldEvents = new HeldEvents(0);
    const { url, ready } = await relayed({ 'content-type': 'text/event-stream' }, { endOfStream: (e) => e.data === '[DONE]', finalEvent: (e) => e.data === '[DONE]' }, new FakeTime(), heldEvents);
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, done } = await ready;
    sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\ndata: ' + 'x'.repeat(2 * MIN_SHARE_CHARS)));
    sink.data(Buffer.from('x'.repeat(2 * MIN_SHARE_CHARS)));
    expect(heldEvents.chars).toBe(0);
    sink.end();
    expect((await done).end).toBe('complete');
    expect((await response).body).toBe('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n');
  });

  it('leaves a stream that holds less than its share, however full the router is', async () => {
    const heldEvents = new HeldEvents(0);
    const { sink, done, response } = await stream(heldEvents);
    sink.data(Buffer.from('data: ' + 'x'.repeat(MIN_SHARE_CHARS - 6)));
    sink.data(Buffer.from('\n\ndata: [DONE]\n\n'));
    sink.end();
    expect((await done).end).toBe('complete');
    expect((await response).body).toHaveLength(MIN_SHARE_CHARS + 16);
    expect(heldEvents.chars).toBe(0);
  });
});

describe('relayResponse: a stream that may be resumed (director/resume.ts)', () => {
  const chunk = (delta: object, finish: string | null = null): string =>
    `data: ${JSON.stringify({ id: 'a', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;

  /** A resumable chat stream as the exchange sets it up: each event through a splice, the stream left open when the splice says it was cut. */
  async function resumableStream(time: FakeTime): Promise<{ response: ReturnType<typeof rawRequest>; sink: BodySink; engine: HandEngine; done: Promise<StreamDone> }> {
    const splice = new StreamSplice('chat', { model: 'm', messages: [], stream: true });
    const { url, ready } = await relayed(
      { 'content-type': 'text/event-stream' },
      { rewrite: (segment) => splice.rewrite(segment), resumable: { cut: () => splice.errored }, endOfStream: streamEnd('openai'), timeouts: shortTimeouts, deadline: 60_000 },
      time,
    );
    const response = rawRequest(`${url}/x`, { body: '{}' });
    return { response, ...(await ready) };
  }

  it.each([
    ['its [DONE]', `${chunk({ content: 'a' }, 'stop')}data: [DONE]\n\n`],
    ['its finish chunk (no usage chunk, no [DONE] yet)', chunk({ content: 'a' }, 'stop')],
  ])('an engine that sends nothing after %s and never ends its response: ended complete an idle timeout later, as sent, with no error event', async (_case, sent) => {
    const time = new FakeTime();
    const { response, sink, engine, done } = await resumableStream(time);
    sink.data(Buffer.from(chunk({ role: 'assistant', content: '' }) + sent));
    await time.advance(1000);
    expect((await done).end).toBe('complete');
    expect(engine.log).toContain('destroy');
    expect((await response).body).toBe(chunk({ role: 'assistant', content: '' }) + sent);
  });

  it('an engine that sent its error event and never ends its response: left open for the caller as an idle timeout (the stream goes on elsewhere)', async () => {
    const time = new FakeTime();
    const { sink, done } = await resumableStream(time);
    sink.data(Buffer.from(`${chunk({ content: 'a' })}data: {"error":{"message":"boom","code":500}}\n\ndata: [DONE]\n\n`));
    await time.advance(1000);
    expect((await done).end).toBe('idle_timeout');
  });
});
