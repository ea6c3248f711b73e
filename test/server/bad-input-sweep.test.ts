/**
 * Hostile and broken input against a listening router: each gets its 4xx (or the connection is
 * closed by the HTTP layer), nothing reaches the engine, the process keeps serving, and repeating the
 * sweep does not grow the heap.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest } from '../helpers/http.js';
import { waitFor } from '../helpers/sim.js';
import { adminMetrics, chatSetup, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  upstream = await startUpstream();
  g = await startTestRouter({ ...chatSetup([upstream.url]), server: { maxBodyBytes: 64 * 1024, headersTimeoutMs: 300, requestTimeoutMs: 600, maxJsonDepth: 32 } });
});
afterAll(async () => {
  await g.close();
  await upstream.close();
});

const auth = { authorization: `Bearer ${KEY}` };
/** modelgate_requests_total of route `other` with that status code. */
const metricSumOf = async (code: string): Promise<number> => metricSum(await adminMetrics(g), 'modelgate_requests_total', { route: 'other', code });
const post = (body: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }): Promise<{ status: number; code?: string }> =>
  rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { method: 'POST', headers: { ...auth, ...headers }, body: body as string }).then((r) => ({
    status: r.status,
    code: r.body.startsWith('{') ? (JSON.parse(r.body) as { error?: { code?: string } }).error?.code : undefined,
  }));

/** Raw bytes on a fresh connection; resolves with what came back before the server closed it. */
function rawSocket(payload: string | Buffer, { holdMs = 0 } = {}): Promise<string> {
  const { port } = new URL(g.router.apiUrl);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1');
    let received = '';
    socket.on('data', (d) => (received += d.toString('latin1')));
    socket.on('close', () => resolve(received));
    socket.on('error', () => undefined);
    socket.write(payload);
    if (holdMs === 0) socket.end();
  });
}

const cases: Array<[string, () => Promise<{ status: number; code?: string }>, number, string | undefined]> = [
  ['truncated JSON', () => post('{"model":"llm","messages":[{"role":'), 400, 'invalid_json'],
  ['trailing garbage', () => post('{"model":"llm","messages":[]} xx'), 400, 'invalid_json'],
  ['NaN and single quotes', () => post("{'model': NaN}"), 400, 'invalid_json'],
  ['an empty body', () => post(''), 400, 'invalid_json'],
  ['binary garbage declared as JSON', () => post(randomBytes(2048)), 400, undefined], // invalid_json, or too deep if its bytes hold many '['
  ['a number body', () => post('42'), 400, 'invalid_request'],
  ['wrong types everywhere', () => post(JSON.stringify({ model: 7, messages: 'x', stream: 'yes', n: 'two', stop: { a: 1 } })), 400, 'invalid_request'],
  ['30 000 nested arrays', () => post(`{"model":"llm","messages":${'['.repeat(30_000)}}`), 400, 'invalid_request'],
  ['deep objects in a known field', () => post(`{"model":"llm","messages":[{"role":"user","content":"x"}],"metadata":${'{"a":'.repeat(40)}1${'}'.repeat(40)}}`), 400, 'invalid_request'],
  ['a body over the limit', () => post(JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] })), 413, 'request_too_large'],
  ['text/plain', () => post('{}', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type'],
  ['multipart', () => post('--b\r\n\r\n--b--', { 'content-type': 'multipart/form-data; boundary=b' }), 415, 'unsupported_media_type'],
  [
    'no content type',
    () =>
      rawSocket(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`).then((r) => ({
        status: Number(r.slice(9, 12)),
        code: /"code":"(\w+)"/.exec(r)?.[1],
      })),
    415,
    'unsupported_media_type',
  ],
  ['a gzip body that is not gzip', () => post('not gzip', { 'content-type': 'application/json', 'content-encoding': 'gzip' }), 400, 'invalid_request'],
  ['an unsupported content encoding', () => post('{}', { 'content-type': 'application/json', 'content-encoding': 'br2' }), 415, 'unsupported_media_type'],
];

describe('bad input sweep', () => {
  it.each(cases)('answers %s with its 4xx and sends nothing upstream', async (_name, send, status, code) => {
    const before = upstream.requests.length;
    const res = await send();
    expect(res.status).toBe(status);
    if (code) expect(res.code).toBe(code);
    expect(upstream.requests.length).toBe(before);
  });

  /** A raw answer's status line and its JSON body's error code (Node's own answers had an empty body). */
  const answered = (raw: string): { status: string; code: unknown; closed: boolean } => {
    const [head = '', body = ''] = raw.split('\r\n\r\n');
    const parsed = JSON.parse(body) as { error: { code: unknown; type: unknown; message: unknown } };
    expect(parsed.error).toEqual({ message: expect.any(String), type: 'invalid_request_error', param: null, code: parsed.error.code });
    return { status: head.split('\r\n')[0] ?? '', code: parsed.error.code, closed: /\r\nconnection: close/i.test(head) };
  };

  it('answers oversized headers with 431 and garbage request lines with 400, in the envelope, and keeps serving', async () => {
    expect(answered(await rawSocket(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`))).toEqual({
      status: 'HTTP/1.1 431 Request Header Fields Too Large',
      code: 'request_header_too_large',
      closed: true,
    });
    expect(answered(await rawSocket('\x00\x01\x02 garbage \r\n\r\n'))).toEqual({ status: 'HTTP/1.1 400 Bad Request', code: 'invalid_request', closed: true });
    // framing a proxy in front could read otherwise (request smuggling): refused, the connection closed
    const smuggle = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`;
    expect(answered(await rawSocket(smuggle))).toEqual({ status: 'HTTP/1.1 400 Bad Request', code: 'invalid_request', closed: true });
    // an expectation the router does not meet
    const expect417 = await rawSocket(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nExpect: 200-ok\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    expect(answered(expect417)).toMatchObject({ status: 'HTTP/1.1 417 Expectation Failed', code: 'expectation_failed' });
    expect(await rawSocket(`GET /v1/models HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 3000 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n\r\n`)).toMatch(/^HTTP\/1\.1 (200|401|431)/);
    expect((await rawRequest(`${g.router.apiUrl}/v1/models`, { headers: auth })).status).toBe(200);
  });

  it('gives each answer of the HTTP layer (400, 431, 417) an x-request-id, an access-log line and a count, as any request has', async () => {
    const before = (code: string): Promise<number> => metricSumOf(code);
    const [c431, c400, c417] = [await before('431'), await before('400'), await before('417')];
    const big = await rawSocket(`GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: mine\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    const garbage = await rawSocket('\x00\x01\x02 garbage \r\n\r\n');
    const expect417 = await rawSocket(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nExpect: 200-ok\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
    const ids = [big, garbage, expect417].map((raw) => /\r\nx-request-id: ([0-9a-f-]{36})\r\n/.exec(raw.split('\r\n\r\n')[0] ?? '')?.[1]);
    expect(ids).toEqual([expect.any(String), expect.any(String), expect.any(String)]);
    // the operator: a line per answer under its id, with the client's address, the status and the error code
    await waitFor(() => ids.every((id) => g.logs.some((l) => l.includes(`"requestId":"${id}"`))), 'the access-log lines');
    const lines = ids.map((id) => JSON.parse(g.logs.find((l) => l.includes(`"requestId":"${id}"`))!) as Record<string, unknown>);
    expect(lines).toEqual([
      expect.objectContaining({ msg: 'request', client: '127.0.0.1', status: 431, failure: 'request_header_too_large' }),
      expect.objectContaining({ msg: 'request', client: '127.0.0.1', status: 400, failure: 'invalid_request' }),
      expect.objectContaining({ msg: 'request', client: '127.0.0.1', status: 417, failure: 'expectation_failed' }),
    ]);
    expect([await before('431'), await before('400'), await before('417')]).toEqual([c431 + 1, c400 + 1, c417 + 1]);
  });

  it('closes a connection that sends its headers too slowly (slowloris)', async () => {
    // The client never finishes its headers and never closes: the answer arrives only if the router cuts it.
    const answer = await rawSocket('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ', { holdMs: 5000 });
    expect(answered(answer)).toEqual({ status: 'HTTP/1.1 408 Request Timeout', code: 'request_timeout', closed: true });
  });

  it('answers a path it cannot decode, and an overlong unknown one, with a short message', async () => {
    const bad = await rawRequest(`${g.router.apiUrl}/v1/models/%zz`, { headers: auth });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body)).toEqual({ error: { message: 'The request path has a malformed percent-encoding.', type: 'invalid_request_error', param: null, code: 'invalid_request' } });
    const long = await rawRequest(`${g.router.apiUrl}/v1/${'a'.repeat(8000)}`, { headers: auth });
    expect(long.status).toBe(404);
    const { message } = (JSON.parse(long.body) as { error: { message: string } }).error;
    expect(message).toMatch(/^Unknown route GET \/v1\/a{196}…\. modelgate serves /);
    expect(message.length).toBeLessThan(1000);
    let line: string | undefined;
    await waitFor(() => (line = g.logs.find((l) => l.includes(long.headers['x-request-id'] as string))) !== undefined, 'the access-log line');
    expect((JSON.parse(line!) as { path: string }).path).toBe(`/v1/${'a'.repeat(196)}`);
  });

  it('keeps its heap flat over repeated sweeps, and still serves', async () => {
    const sweep = async (): Promise<void> => {
      for (const [, send] of cases) await send();
    };
    // Measure what stays reachable, not garbage waiting for the collector.
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const retained = (): number => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    for (let i = 0; i < 5; i++) await sweep(); // warm-up: JIT, caches, pools
    const before = retained();
    for (let i = 0; i < 30; i++) await sweep();
    const grownMb = (retained() - before) / 1024 / 1024;
    expect(grownMb).toBeLessThan(10);
    const ok = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: auth, body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }] } });
    expect(ok.status).toBe(200);
  });
});
