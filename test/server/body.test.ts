/**
 * The request-body reader over a real socket: the identity fast path (declared length, chunked,
 * explicit `identity`), its limits, a client that goes away mid-body, and the gzip path it hands
 * to body-parser.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import net from 'node:net';
import { gzipSync } from 'node:zlib';
import { type RunningRouter } from '../../src/main.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let gateway: TestRouter<RunningRouter>;
const LIMIT = 4096;
const body = JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }] });

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await startTestRouter(chatSetup([upstream.url], { server: { maxBodyBytes: LIMIT } }));
});
afterAll(async () => {
  await gateway.close();
  await upstream.close();
});

function post(payload: Buffer | string[], headers: Record<string, string> = {}): Promise<{ status: number; json: { error?: { code: string } } }> {
  const url = new URL(gateway.router.apiUrl);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: '/v1/chat/completions', method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as { error?: { code: string } } }));
      },
    );
    req.on('error', reject);
    if (Buffer.isBuffer(payload)) req.end(payload);
    else {
      // several writes without a content-length: chunked transfer encoding
      for (const part of payload) req.write(part);
      req.end();
    }
  });
}

describe('request body reader', () => {
  it('reads a body with a declared length, a chunked body and an explicit identity encoding', async () => {
    const before = upstream.requests.length;
    expect((await post(Buffer.from(body))).status).toBe(200);
    expect((await post([body.slice(0, 10), body.slice(10)])).status).toBe(200);
    expect((await post(Buffer.from(body), { 'content-encoding': 'identity' })).status).toBe(200);
    expect(upstream.requests.length).toBe(before + 3);
    expect(JSON.parse(upstream.requests.at(-2)!.body) as { model: string }).toMatchObject({ model: 'served/llm' });
  });

  it('answers 413 to a chunked body that grows past the limit, and stays up', async () => {
    const big = JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'x'.repeat(LIMIT) }] });
    const res = await post([big.slice(0, 2000), big.slice(2000)]);
    expect(res.status).toBe(413);
    expect(res.json.error?.code).toBe('request_too_large');
    expect((await post(Buffer.from(body))).status).toBe(200);
  });

  it('forwards nothing when the client goes away mid-body', async () => {
    const before = upstream.requests.length;
    const url = new URL(gateway.router.apiUrl);
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise((r) => socket.once('connect', r));
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n${body}`);
    // gone with 500 bytes declared and fewer sent
    await new Promise((r) => setImmediate(r));
    socket.destroy();
    expect((await post(Buffer.from(body))).status).toBe(200);
    await waitFor(() => upstream.requests.length === before + 1, 'the follow-up request upstream');
    expect(upstream.requests.length).toBe(before + 1);
  });

  it('inflates a gzip body through body-parser', async () => {
    const res = await post(gzipSync(body), { 'content-encoding': 'gzip' });
    expect(res.status).toBe(200);
  });
});
