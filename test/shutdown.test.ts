/**
 * SIGTERM to a real `modelgate serve` process (the built dist/, which `npm test` builds first) during
 * 50 open streams: readiness fails first, every stream finishes, new connections are refused after
 * the shutdown delay, and the process exits 0. Requests still queued for a replica when the grace
 * period ends are answered 503, not cut.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { type SimServer } from '../src/sim/server.js';
import { rawRequest, sseData, type RawResponse } from './helpers/http.js';
import { startTestSim, waitFor } from './helpers/sim.js';

const cli = new URL('../dist/cli.js', import.meta.url).pathname;
let sims: SimServer[];
let dir: string;

beforeAll(async () => {
  if (!existsSync(cli)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it first)');
  sims = await Promise.all([0, 1].map((i) => startTestSim({ model: ['served/llm'], name: `r${i}`, itlMs: 25, maxNumSeqs: 64 })));
  dir = await mkdtemp(join(tmpdir(), 'modelgate-shutdown-'));
  await writeFile(join(dir, 'keys.yaml'), '- name: t\n  key: sk-shutdown-test\n');
  // drain timings: the 50 streams finish in the grace period; the short one's stream outlasts it
  const configWith = (drain: { shutdownDelayMs: number; gracePeriodMs: number }, resilience: object = {}): string =>
    JSON.stringify({
      server: { host: '127.0.0.1', port: 0, ...drain },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      resilience,
      pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints: sims.map((s) => s.url) }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
    });
  await writeFile(join(dir, 'modelgate.yaml'), configWith({ shutdownDelayMs: 400, gracePeriodMs: 20000 }));
  await writeFile(join(dir, 'modelgate-short-grace.yaml'), configWith({ shutdownDelayMs: 0, gracePeriodMs: 300 }));
  // a drain only a second signal ends within the test's time
  await writeFile(join(dir, 'modelgate-long-grace.yaml'), configWith({ shutdownDelayMs: 60000, gracePeriodMs: 600000 }));
  // one request at a time per replica: a third waits in the pool's admission queue
  await writeFile(join(dir, 'modelgate-queue.yaml'), configWith({ shutdownDelayMs: 0, gracePeriodMs: 300 }, { maxConcurrencyPerReplica: 1, queue: { maxSize: 10, timeoutMs: 60000 } }));
});
afterAll(async () => {
  await Promise.all(sims.map((s) => s.close()));
  await rm(dir, { recursive: true, force: true });
});

interface Logged {
  status?: number;
  requestId?: string;
  incomplete?: boolean;
  failure?: string;
  endpoint?: string;
  model?: string;
}

function start(
  config = 'modelgate.yaml',
): Promise<{ child: ChildProcess; api: string; admin: string; exit: Promise<number | null>; logged: Logged[]; messages: string[]; outputEnded: Promise<void> }> {
  const child = spawn(process.execPath, [cli, 'serve', '--config', join(dir, config)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const lines = createInterface(child.stdout);
    const logged: Logged[] = []; // the access log's lines
    const messages: string[] = []; // every line's msg
    const outputEnded = new Promise<void>((done) => lines.once('close', done));
    lines.on('line', (line) => {
      const entry = JSON.parse(line) as Logged & { msg?: string; api?: string; admin?: string };
      if (entry.msg) messages.push(entry.msg);
      if (entry.msg === 'request') logged.push(entry);
      if (entry.msg === 'modelgate listening') resolve({ child, api: entry.api!, admin: entry.admin!, exit, logged, messages, outputEnded });
    });
    void exit.then((code) => reject(new Error(`modelgate exited early with ${code}`)));
  });
}

describe('SIGTERM', () => {
  it('drains 50 open streams: readiness fails first, all streams finish, then the process exits 0', async () => {
    const { child, api, admin, exit, logged, outputEnded } = await start();
    expect((await rawRequest(`${admin}/readyz`)).status).toBe(200);
    const firstTokens = new Set<number>();
    const streams: Array<Promise<RawResponse & { finishedAt: number }>> = [];
    for (let i = 0; i < 50; i++) {
      streams.push(
        rawRequest(`${api}/v1/chat/completions`, {
          headers: { authorization: 'Bearer sk-shutdown-test' },
          body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 120, ignore_eos: true },
          onChunk: (_d, all) => void (all.includes('"content":" ') && firstTokens.add(i)),
        }).then((res) => ({ ...res, finishedAt: Date.now() })),
      );
    }
    await waitFor(() => firstTokens.size === 50, 'all 50 streams to be under way');
    child.kill('SIGTERM');
    await waitFor(async () => (await rawRequest(`${admin}/readyz`).catch(() => ({ status: 0 }))).status === 503, 'readiness to fail');
    const notReadyAt = Date.now();

    const results = await Promise.all(streams);
    for (const res of results) {
      expect(res.status).toBe(200);
      expect(sseData(res.body).at(-1)).toBe('[DONE]');
      expect(res.body).not.toContain('"error"');
    }
    expect(notReadyAt).toBeLessThan(Math.min(...results.map((r) => r.finishedAt)));
    await expect(rawRequest(`${api}/v1/models`)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    expect(await exit).toBe(0);
    // every stream's access-log line was written before the process ended
    await outputEnded;
    expect(logged.filter((entry) => entry.status === 200)).toHaveLength(50);
  });

  it('ends a stream still open when the grace period is over with its error event and [DONE], and logs it: the client, the SDK and the operator see why', async () => {
    const { child, api, exit, logged, outputEnded } = await start('modelgate-short-grace.yaml');
    let started = false;
    const stream = rawRequest(`${api}/v1/chat/completions`, {
      headers: { authorization: 'Bearer sk-shutdown-test', 'x-request-id': 'cut-me-1' },
      body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 2000, ignore_eos: true },
      onChunk: (_d, all) => void (all.includes('"content":" ') && (started = true)),
    });
    await waitFor(() => started, 'the stream to be under way');
    child.kill('SIGTERM');
    const res = await stream; // ended by the router once the grace period is over
    // the connection was not cut: the stream ended on an event boundary, with the router's error event and [DONE]
    expect(res.error).toBeUndefined();
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(events.at(-2)!)).toEqual({ error: { message: expect.stringContaining('shutting down'), type: 'server_error', param: null, code: 'router_shutting_down' } });
    expect(events.length).toBeGreaterThan(3); // the tokens before it came as they were
    expect(await exit).toBe(0);
    await outputEnded;
    const line = logged.find((entry) => entry.requestId === 'cut-me-1');
    // the router ended it, not the client: not `client_gone`
    expect(line).toMatchObject({ status: 200, incomplete: true, model: 'llm', failure: 'router_shutting_down' });
    expect(line?.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('answers a request still queued for a replica when the grace period ends with a 503 it can retry, not a cut connection', async () => {
    const { child, api, admin, exit, logged, outputEnded } = await start('modelgate-queue.yaml');
    const long = (id: string): Promise<unknown> =>
      rawRequest(`${api}/v1/chat/completions`, {
        headers: { authorization: 'Bearer sk-shutdown-test', 'x-request-id': id },
        body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 4000, ignore_eos: true },
      }).catch((err: unknown) => err);
    const streams = [long('busy-1'), long('busy-2')]; // one on each replica, for far longer than the grace period
    const queued = rawRequest(`${api}/v1/chat/completions`, {
      headers: { authorization: 'Bearer sk-shutdown-test', 'x-request-id': 'queued-1' },
      body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
    });
    await waitFor(async () => /modelgate_queue_depth\{pool="llm"\} 1\b/.test((await rawRequest(`${admin}/metrics`)).body), 'a request to wait in the queue');
    child.kill('SIGTERM');
    const res = await queued;
    expect(res.error).toBeUndefined();
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('1');
    expect(res.headers.connection).toBe('close');
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'router_shutting_down', type: 'server_error' } });
    await Promise.all(streams); // the streams themselves end with their error event
    expect(await exit).toBe(0);
    await outputEnded;
    expect(logged.find((entry) => entry.requestId === 'queued-1')).toMatchObject({ status: 503 });
    for (const id of ['busy-1', 'busy-2']) expect(logged.find((entry) => entry.requestId === id)).toMatchObject({ incomplete: true, failure: 'router_shutting_down' });
  });

  it('answers a request still waiting for its engine’s first byte 503 router_shutting_down, and cuts a non-streamed body under way', async () => {
    // an engine that answers neither request in time: one never (its prefill, say), one half (a body it stopped writing)
    const pending: http.ServerResponse[] = [];
    const engine = http.createServer((req, res) => {
      if (req.method === 'GET') return void res.end(req.url === '/metrics' ? '' : 'ok');
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        pending.push(res);
        if (!body.includes('half')) return; // the first byte never comes
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"id":"chatcmpl-1","object":"chat.completion",');
      });
    });
    await new Promise<void>((listening) => engine.listen(0, '127.0.0.1', listening));
    const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    const config = JSON.stringify({
      server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0, gracePeriodMs: 300 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'slow', servedModelName: 'served/llm', endpoints: [url] }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'slow' }] }],
    });
    await writeFile(join(dir, 'modelgate-slow-engine.yaml'), config);
    try {
      const { child, api, exit, logged, outputEnded } = await start('modelgate-slow-engine.yaml');
      const ask = (id: string, content: string): Promise<RawResponse> =>
        rawRequest(`${api}/v1/chat/completions`, { headers: { authorization: 'Bearer sk-shutdown-test', 'x-request-id': id }, body: { model: 'llm', messages: [{ role: 'user', content }] } });
      const waiting = ask('no-first-byte', 'hi');
      const half = ask('half-body', 'half');
      await waitFor(() => pending.length === 2, 'both requests to reach the engine');
      child.kill('SIGTERM');
      const answered = await waiting;
      expect(answered.error).toBeUndefined();
      expect(answered.status).toBe(503);
      expect(answered.headers['retry-after']).toBe('1');
      expect(JSON.parse(answered.body)).toMatchObject({ error: { code: 'router_shutting_down', type: 'server_error', message: expect.stringContaining('had not answered yet') } });
      const cut = await half;
      expect(cut.status).toBe(200);
      expect(cut.error).toBeDefined(); // a JSON body cut short closes the connection: it never looks complete
      expect(await exit).toBe(0);
      await outputEnded;
      expect(logged.find((entry) => entry.requestId === 'no-first-byte')).toMatchObject({ status: 503, failure: 'router_shutting_down' });
      // the router ended it (no engine's fault, no breaker moved), cutting the connection: a JSON body short of its end never looks complete
      expect(logged.find((entry) => entry.requestId === 'half-body')).toMatchObject({ status: 200, incomplete: true, failure: 'router_shutting_down' });
    } finally {
      for (const res of pending) res.destroy();
      engine.closeAllConnections();
      await new Promise((closed) => engine.close(closed));
    }
  });

  it('ends the drain at a second signal (Ctrl+C twice): the stream still open ends with its error event, the process exits 0', async () => {
    // a minute's delay and ten minutes' grace, a stream far longer than the test
    const { child, api, exit, logged, messages, outputEnded } = await start('modelgate-long-grace.yaml');
    let started = false;
    const stream = rawRequest(`${api}/v1/chat/completions`, {
      headers: { authorization: 'Bearer sk-shutdown-test', 'x-request-id': 'twice-1' },
      body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 4000, ignore_eos: true },
      onChunk: (_d, all) => void (all.includes('"content":" ') && (started = true)),
    });
    await waitFor(() => started, 'the stream to be under way');
    child.kill('SIGINT');
    await waitFor(() => messages.includes('shutting down: readiness failed, draining'), 'the shutdown to begin');
    child.kill('SIGINT');
    const res = await stream;
    expect(res.error).toBeUndefined();
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(events.at(-2)!)).toMatchObject({ error: { code: 'router_shutting_down' } });
    expect(await exit).toBe(0);
    await outputEnded;
    expect(messages).toContain('second signal: the shutdown ends its wait now');
    expect(logged.find((entry) => entry.requestId === 'twice-1')).toMatchObject({ incomplete: true, failure: 'router_shutting_down' });
  });
});
