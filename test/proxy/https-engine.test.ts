/**
 * Engines behind TLS, end to end: `modelgate serve --config FILE` (as users start it, so undici loads
 * as it does in production, with its HTTP/2 client's stand-in, src/proxy/engine-agent.ts) in front of
 * `https://` engines whose certificate the operator trusts through NODE_EXTRA_CA_CERTS, as they would on
 * the router's Deployment. What the client gets, and what each engine sees: the inference requests,
 * the `/metrics` scrapes and the health checks, all over TLS and HTTP/1.1. An engine whose certificate
 * nobody trusts is an engine the router cannot reach: a clear error, and the router keeps serving.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import OpenAI from 'openai';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { waitFor } from '../helpers/sim.js';

const KEY = 'sk-https-engine-0123456789';
const MODEL = 'tls-model';

interface Seen {
  method: string;
  path: string;
  encrypted: boolean;
  httpVersion: string;
  alpn: string | false | null;
}

interface TlsEngine {
  url: string;
  seen: Seen[];
  close(): Promise<void>;
}

/** A self-signed certificate for 127.0.0.1 (its own trust anchor), made with openssl. */
function certificate(dir: string, name: string): { key: string; cert: string } {
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.crt`);
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    {
      stdio: 'ignore',
    },
  );
  return { key, cert };
}

/** An OpenAI-compatible engine on https: chat (JSON or SSE), `/metrics` and `/health` (503 when `sick`). */
async function tlsEngine(files: { key: string; cert: string }, sick = false): Promise<TlsEngine> {
  const seen: Seen[] = [];
  const server = https.createServer({ key: await readFile(files.key), cert: await readFile(files.cert) }, (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket as TLSSocket;
    seen.push({ method: req.method ?? '', path: req.url ?? '', encrypted: socket.encrypted, httpVersion: req.httpVersion, alpn: socket.alpnProtocol });
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      if (req.url === '/health') return void res.writeHead(sick ? 503 : 200).end();
      if (req.url === '/metrics')
        return void res.writeHead(200, { 'content-type': 'text/plain' }).end(`vllm:num_requests_running{model_name="${MODEL}"} 0\nvllm:num_requests_waiting{model_name="${MODEL}"} 0\n`);
      const chunk = (delta: object, finish: string | null = null): string =>
        `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      if ((JSON.parse(body) as { stream?: boolean }).stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`${chunk({ role: 'assistant', content: 'over ' })}${chunk({ content: 'TLS' }, 'stop')}data: [DONE]\n\n`);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id: 'c1',
          object: 'chat.completion',
          created: 1,
          model: MODEL,
          choices: [{ index: 0, message: { role: 'assistant', content: 'over TLS' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

let dir: string;
let engine: TlsEngine;
let sick: TlsEngine;
let stranger: TlsEngine;
let router: ServedRouter;
let client: OpenAI;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-https-'));
  const trusted = certificate(dir, 'engine');
  engine = await tlsEngine(trusted);
  sick = await tlsEngine(trusted, true);
  // its own certificate, which the router was not told to trust
  stranger = await tlsEngine(certificate(dir, 'stranger'));
  await writeFile(join(dir, 'keys.yaml'), `- { name: tester, key: ${KEY} }\n`);
  const checked = { healthCheck: { enabled: true, intervalMs: 100, unhealthyThreshold: 1 } };
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    auth: { keysFile: 'keys.yaml' },
    routing: { engineMetrics: { intervalMs: 100 } },
    pools: [
      { name: 'tls', servedModelName: MODEL, endpoints: [engine.url], resilience: checked },
      { name: 'sick', servedModelName: MODEL, endpoints: [sick.url], resilience: checked },
      { name: 'stranger', servedModelName: MODEL, endpoints: [stranger.url], resilience: { retries: { maxRetries: 0 } } },
    ],
    deployments: [
      { id: MODEL, model: MODEL, targets: [{ pool: 'tls' }] },
      { id: 'sick', model: 'sick', targets: [{ pool: 'sick' }] },
      { id: 'stranger', model: 'stranger', targets: [{ pool: 'stranger' }] },
    ],
  };
  await writeFile(join(dir, 'modelgate.json'), JSON.stringify(config));
  router = await serveRouter(join(dir, 'modelgate.json'), { NODE_EXTRA_CA_CERTS: trusted.cert });
  client = new OpenAI({ apiKey: KEY, baseURL: `${router.api}/v1`, maxRetries: 0 });
}, 30_000);

afterAll(async () => {
  await router?.stop();
  for (const e of [engine, sick, stranger]) await e?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('an engine behind TLS', () => {
  it('answers a chat completion and a stream through the router, each request over TLS and HTTP/1.1', async () => {
    const answer = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    expect(answer.choices[0]?.message.content).toBe('over TLS');
    const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('over TLS');
    const chats = engine.seen.filter((s) => s.path === '/v1/chat/completions');
    expect(chats).toHaveLength(2);
    // ALPN offered HTTP/1.1 only (allowH2: false), so the engine agreed on it
    for (const s of chats) expect(s).toMatchObject({ method: 'POST', encrypted: true, httpVersion: '1.1', alpn: 'http/1.1' });
  });

  it('is scraped for its metrics and health-checked over TLS', async () => {
    await waitFor(() => engine.seen.some((s) => s.path === '/metrics') && engine.seen.some((s) => s.path === '/health'), 'a scrape and a health check reached the engine');
    for (const s of engine.seen.filter((x) => x.method === 'GET')) expect(s).toMatchObject({ encrypted: true, httpVersion: '1.1' });
  });

  it('is taken out of balancing when its health check over TLS fails', async () => {
    // the router logs the ejection once it recorded the failed check (until then the endpoint counts as healthy)
    await waitFor(() => router.logs.some((l) => l.msg === 'health check failing: endpoint ejected' && l.pool === 'sick'), 'the sick engine ejected');
    expect(sick.seen.filter((s) => s.path === '/health')[0]).toMatchObject({ method: 'GET', encrypted: true });
    const err = await client.chat.completions.create({ model: 'sick', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('no_ready_replica');
    expect(sick.seen.filter((s) => s.path === '/v1/chat/completions')).toEqual([]);
  });

  it('whose certificate the router does not trust: a 502 in the OpenAI envelope, and the router serves on', async () => {
    const err = await client.chat.completions.create({ model: 'stranger', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    const apiError = err as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.status).toBe(502);
    expect(apiError.error).toMatchObject({ type: 'server_error', code: 'upstream_connection_failed' });
    expect(apiError.message).toMatch(/could not be reached.*self-signed certificate/);
    // the TLS handshake failed, so no request reached it
    expect(stranger.seen).toEqual([]);
    const answer = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'still there?' }] });
    expect(answer.choices[0]?.message.content).toBe('over TLS');
  });
});
