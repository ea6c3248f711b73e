/**
 * relayResponse driven by hand: the engine's body handed to the sink in the order a test chooses, so
 * that what arrives while an answer's last bytes are held (the engine's end, its connection breaking)
 * can be put exactly there. The client is a real HTTP client of a real server.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http, { type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type AttemptResult, type AttemptSpec, type StreamDone } from '../../src/proxy/forwarder.js';
import { relayResponse, type AttemptControl, type BodySink, type EngineResponse } from '../../src/proxy/relay.js';
import { FakeTime } from '../helpers/fake-time.js';
import { holdingObserver } from '../helpers/holding-observer.js';
import { rawRequest } from '../helpers/http.js';

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
    const sink = relayResponse(full, engine, res, 200, control, time);
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
    const hold = holdingObserver();
    const { url, ready } = await relayed(
      { 'content-type': 'text/event-stream' },
      { observe: hold.observe, endOfStream: (e) => e.data === '[DONE]', timeouts: { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, clientStallMs: 60_000 }, deadline: 1500 },
      time,
    );
    const response = rawRequest(`${url}/x`, { body: '{}' });
    const { sink, engine, done } = await ready;
    sink.data(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\n'));
    sink.data(Buffer.from('data: [DONE]\n\n'));
    expect(hold.asked()).toBe(true);
    await time.advance(2000); // past the idle timeout and the deadline, the last event still held
    expect(time.pendingTimers).toBe(0);
    hold.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(engine.log).toEqual(['pause', 'resume']);
    // the engine never ends its response after the last event: the idle clock (now past the deadline) ends it
    expect(time.pendingTimers).toBe(1);
    await time.advance(1000);
    const answer = await response;
    expect(answer.body.startsWith('data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n')).toBe(true);
    expect((await done).end).toBe('deadline');
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
