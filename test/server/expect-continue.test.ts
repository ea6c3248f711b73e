/**
 * `Expect: 100-continue` (curl sends it for a body over 1 MiB, so do other HTTP clients): the router
 * asks for the body only once it would read it. A request it refuses before that (no valid key, a
 * route it does not serve, the wrong content type, a declared length over the limit) is answered at
 * once, without `100 Continue`, and the client never uploads its body; a request it takes gets `100
 * Continue`, then its answer.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import net from 'node:net';
import { type RunningRouter } from '../../src/main.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  upstream = await startUpstream();
  g = await startTestRouter({ ...chatSetup([upstream.url]), server: { maxBodyBytes: 64 * 1024 } });
});
afterAll(async () => {
  await g.close();
  await upstream.close();
});

const BODY = JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }] });

/**
 * Sends the head of a request that expects `100-continue`, and its body only once `100 Continue`
 * came (as curl does). Resolves with what the router wrote and whether the body was sent.
 */
function expectingContinue(headers: Record<string, string>, body = BODY, path = '/v1/chat/completions'): Promise<{ received: string; sentBody: boolean }> {
  const { port } = new URL(g.router.apiUrl);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), '127.0.0.1');
    let received = '';
    let sentBody = false;
    const head = { host: 'x', 'content-type': 'application/json', expect: '100-continue', 'content-length': String(Buffer.byteLength(body)), connection: 'close', ...headers };
    socket.on('data', (d: Buffer) => {
      received += d.toString('latin1');
      if (!sentBody && received.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
        sentBody = true;
        socket.write(body);
      }
    });
    socket.on('close', () => resolve({ received, sentBody }));
    socket.on('error', () => undefined);
    socket.write(
      `POST ${path} HTTP/1.1\r\n${Object.entries(head)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('')}\r\n`,
    );
  });
}

describe('Expect: 100-continue', () => {
  it.each([
    ['no valid key', { authorization: 'Bearer sk-not-a-key-0000' }, '401', undefined],
    ['no key at all', {}, '401', undefined],
    ['the wrong content type', { authorization: `Bearer ${KEY}`, 'content-type': 'text/plain' }, '415', undefined],
    ['a declared length over server.maxBodyBytes', { authorization: `Bearer ${KEY}`, 'content-length': String(64 * 1024 + 1) }, '413', undefined],
    ['a route the router does not serve', { authorization: `Bearer ${KEY}` }, '404', '/v1/nothing'],
  ])('refuses a request with %s before the body: no 100 Continue, the body never sent, the connection closed', async (_what, headers, status, path) => {
    const before = upstream.requests.length;
    const { received, sentBody } = await expectingContinue(headers, BODY, path);
    expect(received).not.toContain('100 Continue');
    expect(received).toMatch(new RegExp(`^HTTP/1\\.1 ${status} `));
    expect(received.toLowerCase()).toContain('connection: close');
    expect(sentBody).toBe(false);
    expect(upstream.requests.length).toBe(before);
  });

  it('asks for the body of a request it takes, then answers it', async () => {
    const before = upstream.requests.length;
    const { received, sentBody } = await expectingContinue({ authorization: `Bearer ${KEY}` });
    expect(sentBody).toBe(true);
    expect(received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    expect(upstream.requests.length).toBe(before + 1);
  });

  it('asks for a compressed body too, once it would inflate it', async () => {
    const { gzipSync } = await import('node:zlib');
    const gz = gzipSync(BODY);
    const { port } = new URL(g.router.apiUrl);
    const received = await new Promise<string>((resolve) => {
      const socket = net.connect(Number(port), '127.0.0.1');
      let out = '';
      let sent = false;
      socket.on('data', (d: Buffer) => {
        out += d.toString('latin1');
        if (!sent && out.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
          sent = true;
          socket.write(gz);
        }
      });
      socket.on('close', () => resolve(out));
      socket.on('error', () => undefined);
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\nexpect: 100-continue\r\ncontent-length: ${gz.length}\r\nconnection: close\r\n\r\n`,
      );
    });
    expect(received).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
  });

  it('gives an HTTP/1.0 request, which has no 100 Continue, its answer without one', async () => {
    const { port } = new URL(g.router.apiUrl);
    const received = await new Promise<string>((resolve) => {
      const socket = net.connect(Number(port), '127.0.0.1');
      let out = '';
      socket.on('data', (d: Buffer) => (out += d.toString('latin1')));
      socket.on('close', () => resolve(out));
      socket.on('error', () => undefined);
      socket.write(`POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: ${BODY.length}\r\n\r\n${BODY}`);
    });
    expect(received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(received).not.toContain('100 Continue');
  });
});
