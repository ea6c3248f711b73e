/**
 * Forwarder.attempt on its own: a real client socket and a scripted upstream on 127.0.0.1, the
 * timeouts on FakeTime (nothing waits real time but undici's own connect timeout, 200 ms, in the one
 * test of it). What the attempt returns, what the client gets and what the engine sees, for each way
 * an attempt can end.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { type Endpoint } from '../../src/core/types.js';
import { createEngineAgent, type EngineAgent } from '../../src/proxy/engine-agent.js';
import { failureOf, Forwarder, SHUTTING_DOWN, type AttemptResult, type AttemptSpec } from '../../src/proxy/forwarder.js';
import { type SseSegment } from '../../src/proxy/sse-tap.js';
import type { Dispatcher } from 'undici';
import { FakeTime } from '../helpers/fake-time.js';
import { holdingObserver } from '../helpers/holding-observer.js';
import { rawRequest, sseData, type RawResponse } from '../helpers/http.js';
import { waitFor } from '../helpers/sim.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function listen(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/**
 * A listener that never accepts: a worker thread listens with a backlog of 1 (Node takes 0 for its
 * default, 511), posts its port and blocks until released, so its event loop cannot accept. Two
 * connections fill the accept queue; the kernel drops the SYN of every connection after them, which
 * so never completes.
 */
async function fullAcceptQueue(): Promise<number> {
  const release = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(
    `const net = require('node:net');
     const { parentPort, workerData } = require('node:worker_threads');
     const server = net.createServer();
     server.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
       parentPort.postMessage(server.address().port);
       Atomics.wait(workerData, 0, 0);
       server.close();
     });`,
    { eval: true, workerData: release },
  );
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const fillers = [connect(port, '127.0.0.1'), connect(port, '127.0.0.1')];
  for (const filler of fillers) {
    await new Promise<void>((resolve, reject) => {
      filler.once('connect', resolve);
      filler.once('error', reject);
    });
  }
  closers.push(async () => {
    for (const filler of fillers) filler.destroy();
    Atomics.store(release, 0, 1);
    Atomics.notify(release, 0);
    await worker.terminate();
  });
  return port;
}

const TIMEOUTS = { connectMs: 1_000, firstByteMs: 5_000, idleMs: 2_000, clientStallMs: 10_000 };

/** A router of one attempt: every request to it is forwarded to `upstream` with `spec`. */
async function oneAttempt(
  upstream: string,
  time: FakeTime,
  spec: Partial<AttemptSpec> = {},
  /** Sees the client's response before the attempt starts. */
  onResponse?: (res: ServerResponse) => void,
): Promise<{ url: string; results: AttemptResult[]; agent: EngineAgent; specs: Array<WeakRef<AttemptSpec>> }> {
  const agent = createEngineAgent();
  closers.push(() => agent.destroy());
  const forwarder = new Forwarder(agent, time, time);
  const results: AttemptResult[] = [];
  const specs: Array<WeakRef<AttemptSpec>> = [];
  const endpoint: Endpoint = { id: 'e1', pool: 'p', url: new URL(upstream), weight: 1 };
  const url = await listen((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    onResponse?.(res);
    req.once('end', () => {
      const full: AttemptSpec = {
        endpoint,
        body: Buffer.from('{"model":"m"}'),
        path: '/v1/chat/completions',
        headers: { 'content-type': 'application/json', 'x-request-id': 'r1' },
        requestId: 'r1',
        timeouts: TIMEOUTS,
        deadline: time.now() + 60_000,
        ...spec,
      };
      specs.push(new WeakRef(full));
      void forwarder.attempt(req, res, full).then(async (result) => {
        results.push(result);
        if (result.kind === 'committed') await result.done;
        else if (!res.headersSent) res.writeHead(599).end(result.kind); // the test router's own answer
      });
    });
  });
  return { url, results, agent, specs };
}

/**
 * Sends a request and waits for the client's answer. Once `waitingOn()` says the exchange is in the
 * state the test means to time out (never, by default), it lets the timers run on fake time: advancing
 * before that, on a slow machine, would fire a timer the real sockets had not yet made moot (a
 * connect timeout while the connection is still being made).
 */
async function send(url: string, time: FakeTime, waitingOn: () => boolean = () => false): Promise<RawResponse> {
  const response = rawRequest(`${url}/anything`, { body: '{}' });
  for (;;) {
    const settled = await Promise.race([response.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 5))]);
    if (settled) return response;
    const next = time.nextDueIn;
    if (next !== undefined && waitingOn()) await time.advance(next);
  }
}

describe('Forwarder.attempt', () => {
  it('sends exactly the spec’s path, headers and body, and relays a 2xx answer byte for byte', async () => {
    let seen: { url?: string; headers?: http.IncomingHttpHeaders; body?: string } = {};
    const upstream = await listen((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        seen = { url: req.url, headers: req.headers, body };
        res.writeHead(200, { 'content-type': 'application/json', 'x-engine': 'yes' }).end('{"ok":true}');
      });
    });
    const time = new FakeTime();
    const { url, results } = await oneAttempt(upstream, time);
    const res = await send(url, time);
    expect(res.status).toBe(200);
    expect(res.body).toBe('{"ok":true}');
    expect(res.headers['x-engine']).toBe('yes');
    expect(res.headers['x-request-id']).toBe('r1');
    expect(seen.url).toBe('/v1/chat/completions');
    expect(seen.body).toBe('{"model":"m"}');
    expect(
      Object.keys(seen.headers ?? {})
        .filter((h) => h !== 'connection')
        .sort(),
    ).toEqual(['content-length', 'content-type', 'host', 'x-request-id']);
    expect(results.map((r) => r.kind)).toEqual(['committed']);
  });

  it.each([
    ['with a trailing slash', '/replica-1/'],
    ['without one', '/replica-1'],
  ])('puts the request under the path of an endpoint URL that has one (%s)', async (_name, base) => {
    const paths: string[] = [];
    const upstream = await listen((req, res) => {
      paths.push(req.url ?? '');
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
    });
    const time = new FakeTime();
    const { url } = await oneAttempt(`${upstream}${base}`, time);
    expect((await send(url, time)).status).toBe(200);
    expect(paths).toEqual(['/replica-1/v1/chat/completions']);
  });

  it('lets go of the attempt once it ended, while its kept-alive connection to the engine lives on', async () => {
    const engineSockets = new Set<Socket>();
    const upstream = await listen((req, res) => {
      engineSockets.add(req.socket);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
    });
    const time = new FakeTime();
    const { url, specs } = await oneAttempt(upstream, time);
    for (let i = 0; i < 3; i++) expect((await send(url, time)).status).toBe(200);
    // one connection, kept alive and open
    expect([...engineSockets].map((s) => s.destroyed)).toEqual([false]);
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // the attempt holds its spec (and the spec its body) for as long as anything holds the attempt
    await waitFor(() => {
      gc();
      return specs.every((ref) => ref.deref() === undefined);
    }, 'every ended attempt collected');
    expect([...engineSockets].map((s) => s.destroyed)).toEqual([false]);
  });

  // The connect and first-byte timeouts share one timer: an engine client that never hands the request
  // a connection, and one that does at once but never answers (a fake client: no real connection is slow on loopback).
  it.each([
    ['no connection comes', false, 'connect_timeout', TIMEOUTS.connectMs],
    ['the request went out on a connection, and no answer comes', true, 'first_byte_timeout', TIMEOUTS.firstByteMs],
  ] as const)('times an attempt out when %s, and cancels its request (once it starts, if it has not)', async (_name, startsAtOnce, reason, at) => {
    const aborted: Error[] = [];
    let handler: Dispatcher.DispatchHandler | undefined;
    const controller = { aborted: false, paused: false, reason: null, abort: (err: Error) => void aborted.push(err), pause: () => undefined, resume: () => undefined };
    const fake: EngineAgent = {
      dispatch: (_opts, h) => {
        handler = h;
        if (startsAtOnce) h.onRequestStart?.(controller, {});
        return true;
      },
      destroy: () => Promise.resolve(),
      endAll: () => undefined,
    };
    const time = new FakeTime();
    const forwarder = new Forwarder(fake, time, time);
    const url = await listen((req, res) => {
      req.resume();
      req.once('end', () => {
        void forwarder
          .attempt(req, res, {
            endpoint: { id: 'e1', pool: 'p', url: new URL('http://127.0.0.1:9/'), weight: 1 },
            body: Buffer.from('{}'),
            path: '/v1/x',
            headers: {},
            requestId: 'r1',
            timeouts: TIMEOUTS,
            deadline: 60_000,
          })
          .then((result) => res.writeHead(599).end(JSON.stringify(result)));
      });
    });
    const res = await send(url, time, () => handler !== undefined);
    expect(JSON.parse(res.body)).toMatchObject({ kind: 'failed', reason });
    expect(time.now()).toBe(at);
    if (!startsAtOnce) {
      expect(aborted).toEqual([]); // nothing to cancel yet
      handler?.onRequestStart?.(controller, {}); // the connection comes after all
    }
    expect(aborted).toHaveLength(1);
  });

  it('reads an answer that repeats a header as Node does: the first content type, other names joined', async () => {
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        res.setHeader('content-type', ['text/event-stream', 'text/plain']);
        res.setHeader('x-engine', ['a', 'b']);
        res.writeHead(200).end('data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n');
      });
    });
    const time = new FakeTime();
    const { url } = await oneAttempt(upstream, time, { stripUsageChunk: true });
    const res = await send(url, time);
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream');
    expect(res.headers['x-engine']).toBe('a, b');
    expect(sseData(res.body)).toEqual(['{"choices":[{"delta":{"content":"hi"}}]}', '[DONE]']);
  });

  it('fails with first_byte_timeout when the engine says nothing, and cancels the engine’s request', async () => {
    let engineSawClose = false;
    let engineHasRequest = false;
    const upstream = await listen((req) => {
      engineHasRequest = true;
      req.resume();
      req.socket.once('close', () => (engineSawClose = true));
    });
    const time = new FakeTime();
    const { url, results } = await oneAttempt(upstream, time);
    const res = await send(url, time, () => engineHasRequest);
    expect(res.status).toBe(599);
    expect(results[0]).toMatchObject({ kind: 'failed', reason: 'first_byte_timeout' });
    expect(time.now()).toBe(TIMEOUTS.firstByteMs);
    await waitFor(() => engineSawClose, 'the engine to see its request cancelled');
  });

  it('reads an engine error without committing, normalised, with its retry hint', async () => {
    const upstream = await listen((_req, res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '2' }).end('{"error":{"message":"busy","type":"ServiceUnavailableError","param":null,"code":503}}');
    });
    const time = new FakeTime();
    const { url, results } = await oneAttempt(upstream, time);
    expect((await send(url, time)).status).toBe(599);
    expect(results[0]).toMatchObject({ kind: 'upstream_error', status: 503, retryAfterMs: 2000, headers: { 'retry-after': '2' } });
    expect(results[0]?.kind === 'upstream_error' && results[0].error.envelope.error).toEqual({ message: 'busy', type: 'server_error', param: null, code: null });
  });

  it('fails with connect when nothing listens', async () => {
    const gone = await listen(() => undefined);
    await closers.pop()?.();
    const time = new FakeTime();
    const { url, results } = await oneAttempt(gone, time);
    expect((await send(url, time)).status).toBe(599);
    expect(results[0]).toMatchObject({ kind: 'failed', reason: 'connect' });
  });

  // The detail goes into the client's error message (director/retry-policy.ts failureError): an engine's
  // address, which a system error's message and undici's connect timeout name, must not.
  it.each([
    [
      'a network without a route',
      Object.assign(new Error('connect ENETUNREACH 10.1.2.3:8000 - Local (0.0.0.0:0)'), { code: 'ENETUNREACH', syscall: 'connect', address: '10.1.2.3', port: 8000 }),
      'reset',
      'ENETUNREACH',
    ],
    ['no local port left', Object.assign(new Error('connect EADDRNOTAVAIL 10.1.2.3:8000 - Local (0.0.0.0:0)'), { code: 'EADDRNOTAVAIL', syscall: 'connect' }), 'reset', 'EADDRNOTAVAIL'],
    [
      'a name the resolver could not look up',
      Object.assign(new Error('getaddrinfo EAI_AGAIN vllm-0.engines.internal'), { code: 'EAI_AGAIN', syscall: 'getaddrinfo', hostname: 'vllm-0.engines.internal' }),
      'reset',
      'EAI_AGAIN',
    ],
    [
      'a TLS name mismatch',
      Object.assign(new Error("Hostname/IP does not match certificate's altnames: Host: 10.1.2.3. is not in the cert's altnames: DNS:vllm.internal"), {
        code: 'ERR_TLS_CERT_ALTNAME_INVALID',
        reason: "Host: 10.1.2.3. is not in the cert's altnames: DNS:vllm.internal",
        host: '10.1.2.3',
        cert: {},
      }),
      'reset',
      'ERR_TLS_CERT_ALTNAME_INVALID',
    ],
    [
      "undici's connect timeout",
      Object.assign(new Error('Connect Timeout Error (attempted address: 10.1.2.3:8000, timeout: 200ms)'), { code: 'UND_ERR_CONNECT_TIMEOUT' }),
      'connect_timeout',
      'no connection in time',
    ],
    ['an untrusted certificate', Object.assign(new Error('self-signed certificate'), { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }), 'reset', 'DEPTH_ZERO_SELF_SIGNED_CERT: self-signed certificate'],
    ["undici's closed socket", Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }), 'reset', 'UND_ERR_SOCKET: other side closed'],
  ])('names %s by its code, never the engine’s address', (_what, err, reason, detail) => {
    expect(failureOf(err)).toEqual({ reason, detail });
  });

  // undici's side of the connect timeout: a connection that never completes (an engine whose accept queue
  // is full drops the SYN) is given up by undici at the pool's connectMs, and the attempt fails
  // connect_timeout. Fake time never moves here, so the forwarder's own timer cannot be the one that fires.
  it('fails with connect_timeout when undici gives up a connection the engine never completes', async () => {
    const port = await fullAcceptQueue();
    const time = new FakeTime();
    const { url, results } = await oneAttempt(`http://127.0.0.1:${port}`, time, { timeouts: { ...TIMEOUTS, connectMs: 200 } });
    const sent = performance.now();
    expect((await send(url, time)).status).toBe(599);
    expect(results[0]).toMatchObject({ kind: 'failed', reason: 'connect_timeout' });
    // the client's error message says why, not where: undici's own message names the engine's address
    expect(results[0]?.kind === 'failed' && results[0].detail).not.toContain(String(port));
    expect(time.now()).toBe(0);
    // at the pool's 200 ms, not undici's own default of 10 s (a bound far above 200 ms, for a slow machine)
    expect(performance.now() - sent).toBeLessThan(5_000);
  });

  // In each, the first event goes at once, as soon as it is read; the rest of its chunk (as it came, less
  // the usage chunk's bytes, or read event by event) and the burst after it go together at the end of the tick.
  it.each([
    ['as it came', {}],
    ['the usage chunk stripped', { stripUsageChunk: true }],
    ['whole events, rewritten', { rewrite: (segment: SseSegment) => segment.raw }],
  ])('sends the first event of a stream (%s) at once, and lets what came with it go together', async (_name, extra) => {
    const stream = [
      '{"choices":[{"delta":{"role":"assistant"}}]}',
      '{"choices":[{"delta":{"content":"a"}}]}',
      '{"choices":[{"delta":{"content":"b"}}]}',
      '{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}',
    ];
    const sse = (events: string[]): string => events.map((data) => `data: ${data}\n\n`).join('');
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url?.endsWith('json')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
        // two chunks in one tick, so in one packet, as a zero-latency engine sends a stream
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(sse(stream.slice(0, 2)));
        res.end(`${sse(stream.slice(2))}data: [DONE]\n\n`);
      });
    });
    const time = new FakeTime();
    // the client's socket each time the observer hears of the answer: corked (Node holding the
    // response's writes until the end of the tick) or not, and whether bytes wait to be sent
    let client: Socket | undefined;
    const seen: string[] = [];
    const held = (): string => `corked ${client?.writableCorked}${client?.writableLength ? ', bytes waiting' : ''}${client?.bytesWritten ? ', some sent' : ''}`;
    const observe = {
      event: (event: { data: string }) => seen.push(`${event.data.slice(0, 24)}: ${held()}`),
      body: () => seen.push(`body: ${held()}`),
      bodyEnd: () => undefined,
    };
    for (const path of ['/v1/chat/completions', '/v1/json']) {
      // what the relay hands the client's response, write by write
      const writes: string[] = [];
      const { url } = await oneAttempt(upstream, time, { ...extra, path, observe }, (res) => {
        client = res.socket ?? undefined;
        const write = res.write.bind(res) as (chunk: unknown) => boolean;
        res.write = ((chunk: unknown) => (writes.push(String(chunk)), write(chunk))) as typeof res.write;
      });
      const res = await send(url, time);
      expect(res.status).toBe(200);
      if (path.endsWith('completions')) {
        expect(res.body).toBe('stripUsageChunk' in extra ? `${sse(stream.slice(0, 3))}data: [DONE]\n\n` : `${sse(stream)}data: [DONE]\n\n`);
        // the first event by itself, ahead of the rest of its chunk
        expect(writes[0]).toBe(sse(stream.slice(0, 1)));
        expect(writes.join('')).toBe(res.body);
      }
    }
    expect(seen).toEqual([
      // each event is observed once its chunk is written: the first event has gone ("some sent"), what
      // came with it waits for the end of the tick, with whatever else the tick writes
      ...stream.map((data) => `${data.slice(0, 24)}: corked 1, bytes waiting, some sent`),
      '[DONE]: corked 1, bytes waiting, some sent',
      'body: corked 0, some sent',
    ]);
  });

  it('tells the observer an answer is whole at its last byte or last event, before it goes to the client; never for one cut short', async () => {
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url?.endsWith('json')) {
          // a body of known length, in two writes a moment apart: whole with its last byte
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
          res.write('{"ok":');
          return void setTimeout(() => res.end('true}'), 30);
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
        if (req.url?.endsWith('broken')) return void res.destroy(); // a broken stream just stops
        // the last event a moment later, then the end of the response later still
        setTimeout(() => res.write('data: [DONE]\n\n'), 30);
        setTimeout(() => res.end(), 60);
      });
    });
    const time = new FakeTime();
    for (const [path, endOfStream, answered] of [
      ['/v1/json', true, ['answered after 11 bytes from the engine, the client response still open']],
      ['/v1/chat/completions', true, ['answered after 2 events, the client response still open']],
      // an API that names no last event: whole only when the engine's response ends
      ['/v1/audio/transcriptions', false, ['answered after 2 events, the client response still open']],
      ['/v1/broken', true, []],
    ] as const) {
      let client: ServerResponse | undefined;
      const seen: string[] = [];
      let events = 0;
      let bytes = 0;
      const observe = {
        event: () => void (events += 1),
        body: (chunk: Buffer) => void (bytes += chunk.length),
        bodyEnd: () => undefined,
        // the chunk that makes a body whole is read (counted) first, then announced, then written
        answered: () => {
          seen.push(`answered after ${path.endsWith('json') ? `${bytes} bytes from the engine` : `${events} events`}, the client response ${client?.writableEnded ? 'already ended' : 'still open'}`);
          return undefined;
        },
      };
      const { url, results } = await oneAttempt(upstream, time, { path, observe, ...(endOfStream ? { endOfStream: (e: { data: string }) => e.data === '[DONE]' } : {}) }, (res) => (client = res));
      await send(url, time);
      if (results[0]?.kind === 'committed') await results[0].done;
      expect({ path, seen }).toEqual({ path, seen: answered });
    }
  });

  it("holds an answer's last bytes (and the end of the engine's body) until what the observer's answered() returned settles", async () => {
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url?.endsWith('sized')) {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
          res.write('{"ok":');
          return void setTimeout(() => res.end('true}'), 30);
        }
        if (req.url?.endsWith('chunked')) {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write('{"ok":');
          return void setTimeout(() => res.end('true}'), 30);
        }
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
        setTimeout(() => res.end('data: [DONE]\n\n'), 30);
      });
    });
    const time = new FakeTime();
    for (const [path, before, whole] of [
      ['/v1/sized', ['write {"ok":'], '{"ok":true}'],
      // a body of unknown length is whole at its end: all of it is written, and the end is held
      ['/v1/chunked', ['write {"ok":', 'write true}'], '{"ok":true}'],
      ['/v1/stream', ['write data: {"choices":[{"delta":{"content":"a"}}]}\n\n'], 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'],
    ] as const) {
      // what the router writes to the client, in order
      const writes: string[] = [];
      const { observe, release, asked } = holdingObserver();
      const watch = (res: ServerResponse): void => {
        const write = res.write.bind(res) as (...args: unknown[]) => boolean;
        const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
        res.write = ((...args: unknown[]) => (writes.push(`write ${String(args[0])}`), write(...args))) as typeof res.write;
        res.end = ((...args: unknown[]) => (writes.push(args.length > 0 && typeof args[0] !== 'function' ? `end ${String(args[0])}` : 'end'), end(...args))) as typeof res.end;
      };
      const { url, results } = await oneAttempt(upstream, time, { path, observe, endOfStream: (e: { data: string }) => e.data === '[DONE]' }, watch);
      const response = send(url, time);
      await waitFor(asked, 'the answer whole');
      // the engine has sent all it has; the router holds its last bytes (a moment to show they stay held)
      await new Promise((resolve) => setTimeout(resolve, 30));
      expect({ path, writes }).toEqual({ path, writes: before });
      release();
      const answer = await response;
      expect({ path, body: answer.body }).toEqual({ path, body: whole });
      expect({ path, last: writes.at(-1) }).toEqual({ path, last: 'end' });
      const result = results[0];
      expect(result?.kind).toBe('committed');
      if (result?.kind === 'committed') expect((await result.done).end).toBe('complete');
    }
  });

  it('a client gone while its last bytes are held ends the attempt client_gone, nothing written after', async () => {
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '11' });
        res.write('{"ok":');
        setTimeout(() => res.end('true}'), 30);
      });
    });
    const time = new FakeTime();
    let client: ServerResponse | undefined;
    const { observe, release, asked } = holdingObserver();
    const { url, results } = await oneAttempt(upstream, time, { path: '/v1/sized', observe }, (res) => (client = res));
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    const received: Buffer[] = [];
    socket.on('data', (d: Buffer) => received.push(d));
    socket.write('POST /anything HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}');
    await waitFor(asked, 'the answer whole');
    socket.destroy();
    await waitFor(() => client?.destroyed === true, 'the client gone');
    await waitFor(() => results.length > 0, 'the attempt');
    const result = results[0];
    release();
    expect(result?.kind).toBe('committed');
    if (result?.kind === 'committed') expect((await result.done).end).toBe('client_gone');
    expect(Buffer.concat(received).toString()).not.toContain('true}');
  });

  // Whole events (the usage chunk stripped, events rewritten): the client gets the kept events exactly,
  // in order, however the engine's bytes were cut (inside an event, inside the dropped chunk, inside a
  // two- or three-byte character).
  it.each([
    ['in one write', [], false],
    ['cut inside events, inside the usage chunk and inside a two- and a three-byte character', [9, 40, 52, 61, 95, 139, 150, 200, 259, 275, 320], false],
    ['cut at every block', 'blocks', false],
    ['with events rewritten between kept ones', [], true],
    ['cut inside events, with events rewritten', [9, 40, 52, 61, 139, 259], true],
  ] as const)('relays whole events %s: the kept events exactly, in order', async (_name, cuts, rewriting) => {
    const blocks = [
      'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
      'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
      'data: {"choices":[{"delta":{"content":"é"}}]}\n\n',
      'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":4}}\n\n',
      'data: {"choices":[{"delta":{"content":"日本"}}]}\n\n',
      'data: {"choices":[{"delta":{"content":"b"}}]}\n\n',
      'data: [DONE]\n\n',
    ];
    const bytes = Buffer.from(blocks.join(''));
    const points = cuts === 'blocks' ? blocks.map((_, i) => Buffer.byteLength(blocks.slice(0, i + 1).join(''))) : [...cuts];
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        void (async () => {
          let last = 0;
          for (const p of [...points, bytes.length]) {
            if (p > last) res.write(bytes.subarray(last, p));
            last = p;
            await new Promise((resolve) => setImmediate(resolve));
          }
          res.end();
        })();
      });
    });
    const rewrite = rewriting ? (seg: SseSegment): string => seg.raw.replace('"b"', '"B"').replace('"a"', '"A"') : undefined;
    const time = new FakeTime();
    const { url } = await oneAttempt(upstream, time, { stripUsageChunk: true, ...(rewrite ? { rewrite } : {}) });
    const res = await send(url, time);
    expect(res.status).toBe(200);
    const kept = blocks.filter((b) => !b.includes('"usage"'));
    expect(res.body).toBe(rewriting ? kept.map((b) => b.replace('"b"', '"B"').replace('"a"', '"A"')).join('') : kept.join(''));
  });

  it('counts the idle timeout from the stream’s last chunk, however many came before it', async () => {
    let engine: ServerResponse | undefined;
    const upstream = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        engine = res;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"delta":{"content":"a"}}]}\n\n');
      });
    });
    const time = new FakeTime();
    let events = 0;
    const observe = { event: () => void (events += 1), body: () => undefined, bodyEnd: () => undefined };
    const { url, results } = await oneAttempt(upstream, time, { observe });
    const response = rawRequest(`${url}/anything`, { body: '{}' });
    await waitFor(() => events === 1, 'the first chunk');
    // chunks at 1.5 s and 3 s of fake time: each inside the idle timeout (2 s) of the one before
    for (const at of [1_500, 3_000]) {
      await time.advance(at - time.now());
      engine?.write('data: {"choices":[{"delta":{"content":"b"}}]}\n\n');
      await waitFor(() => events === at / 1_500 + 1, 'the next chunk');
    }
    await time.advance(TIMEOUTS.idleMs - 1);
    expect(results[0]?.kind === 'committed' && (await Promise.race([results[0].done, Promise.resolve(undefined)]))).toBeUndefined();
    await time.advance(1);
    const done = results[0]?.kind === 'committed' ? await results[0].done : undefined;
    expect(done?.end).toBe('idle_timeout');
    expect(time.now()).toBe(3_000 + TIMEOUTS.idleMs);
    const res = await response;
    expect(sseData(res.body).slice(0, 3)).toEqual(['{"choices":[{"delta":{"content":"a"}}]}', '{"choices":[{"delta":{"content":"b"}}]}', '{"choices":[{"delta":{"content":"b"}}]}']);
    expect(sseData(res.body).at(-1)).toBe('[DONE]');
  });

  it('ends a stream the engine then stops feeding with a final SSE error event after idleMs of fake time', async () => {
    const upstream = await listen((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'); // then nothing
    });
    const time = new FakeTime();
    const { url, results } = await oneAttempt(upstream, time);
    const res = await send(url, time, () => results[0]?.kind === 'committed');
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(events.at(-2) ?? '{}')).toEqual({ error: { message: expect.any(String), type: 'server_error', param: null, code: 'upstream_timeout' } });
    expect(results[0]?.kind).toBe('committed');
    const done = results[0]?.kind === 'committed' ? await results[0].done : undefined;
    expect(done?.end).toBe('idle_timeout');
    expect(time.now()).toBe(TIMEOUTS.idleMs);
  });
});

// The shutdown's grace period ended with attempts waiting for their engine and streams under way: their
// connections were cut with nothing said (an SDK saw a network error, or a stream that merely stopped).
// The shutdown ends every engine request in flight with SHUTTING_DOWN (EngineAgent.endAll).
describe('Forwarder.attempt: the engine requests the shutdown ends (SHUTTING_DOWN)', () => {
  it('an attempt still waiting for its engine fails as `shutdown` (the request is answered, not retried) and its engine request is dropped', async () => {
    const time = new FakeTime();
    let engineClosed = false;
    let reached = false;
    const upstream = await listen((req) => {
      reached = true;
      req.resume();
      req.socket.once('close', () => (engineClosed = true)); // never answered
    });
    const { url, results, agent } = await oneAttempt(upstream, time);
    const response = rawRequest(`${url}/anything`, { body: '{}' });
    await waitFor(() => reached, 'the request to reach the engine');
    agent.endAll(SHUTTING_DOWN);
    expect((await response).body).toBe('failed'); // the test router's own answer for a failed attempt
    expect(results[0]).toMatchObject({ kind: 'failed', reason: 'shutdown' });
    await waitFor(() => engineClosed, 'the engine connection to be dropped');
  });

  it('a stream under way ends with the router’s error event and [DONE], on an event boundary, as `shutdown`', async () => {
    const time = new FakeTime();
    let engineClosed = false;
    const upstream = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"index":0,"delta":{"cont'); // an event and half of the next
      res.once('close', () => (engineClosed = true));
    });
    const { url, results, agent } = await oneAttempt(upstream, time, { endOfStream: (e) => e.data === '[DONE]' });
    let firstEvent = false;
    const response = rawRequest(`${url}/anything`, { body: '{}', onChunk: () => void (firstEvent = true) });
    await waitFor(() => firstEvent, 'the first event to reach the client');
    agent.endAll(SHUTTING_DOWN);
    const answer = await response;
    expect(answer.error).toBeUndefined();
    expect(sseData(answer.body)).toEqual([
      '{"choices":[{"index":0,"delta":{"content":"a"}}]}',
      JSON.stringify({
        error: {
          message: 'This router is shutting down and ended the stream before it finished; retry the request (another router will take it).',
          type: 'server_error',
          param: null,
          code: 'router_shutting_down',
        },
      }),
      '[DONE]',
    ]);
    const done = results[0]?.kind === 'committed' ? await results[0].done : undefined;
    expect(done?.end).toBe('shutdown');
    await waitFor(() => engineClosed, 'the engine connection to be dropped');
  });

  it('a non-streamed body under way is cut (it must not look complete) as `shutdown`, not as the engine breaking it', async () => {
    const time = new FakeTime();
    const upstream = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id":'); // and no more
    });
    const { url, results, agent } = await oneAttempt(upstream, time);
    let begun = false;
    const response = rawRequest(`${url}/anything`, { body: '{}', onChunk: () => void (begun = true) });
    await waitFor(() => begun, 'the answer to begin');
    agent.endAll(SHUTTING_DOWN);
    const answer = await response;
    expect(answer.error).toBeDefined();
    expect(answer.body).toBe('{"id":');
    const done = results[0]?.kind === 'committed' ? await results[0].done : undefined;
    expect(done?.end).toBe('shutdown');
  });

  it('any other error ending an engine request is what it was: a stream the engine broke is upstream_broken', async () => {
    const time = new FakeTime();
    const upstream = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[]}\n\n');
    });
    const { url, results, agent } = await oneAttempt(upstream, time, { endOfStream: (e) => e.data === '[DONE]' });
    let begun = false;
    const response = rawRequest(`${url}/anything`, { body: '{}', onChunk: () => void (begun = true) });
    await waitFor(() => begun, 'the stream to begin');
    agent.endAll(new Error('some other end'));
    expect(sseData((await response).body).at(-2)).toContain('upstream_stream_broken');
    const done = results[0]?.kind === 'committed' ? await results[0].done : undefined;
    expect(done?.end).toBe('upstream_broken');
  });
});
