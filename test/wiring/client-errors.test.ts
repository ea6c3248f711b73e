/**
 * The API server's answer to a request Node's parser refuses (wiring/servers.ts `answerClientError`),
 * and the one Node internal it reads: a socket's current response, `_httpMessage`.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http, { type Server, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { buildConfig } from '../../src/config/load.js';
import { createApiServer } from '../../src/wiring/servers.js';

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise((resolve) => {
          s.close(resolve);
          s.closeAllConnections(); // a connection a failed test left open must not hold the run
        }),
    ),
  );
});

async function listening(server: Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Writes `payload` on a fresh connection; resolves with everything received once the server closes it. */
function exchange(port: number, payload: string, onData?: (soFar: string, socket: net.Socket) => void): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (d: Buffer) => {
      received += d.toString('latin1');
      onData?.(received, socket);
    });
    socket.on('close', () => resolve(received));
    socket.on('error', () => undefined);
    socket.write(payload);
  });
}

describe('Node internals the client-error answer reads', () => {
  it('a socket’s `_httpMessage` is the response being written, and says whether its head went out', async () => {
    const seen: Array<[boolean, boolean]> = [];
    const port = await listening(
      http.createServer((req, res) => {
        const current = (): ServerResponse | null | undefined => (req.socket as net.Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
        seen.push([current() === res, res.headersSent]);
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('x');
        seen.push([current() === res, res.headersSent]);
        res.end();
      }),
    );
    const answer = await exchange(port, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(seen).toEqual([
      [true, false],
      [true, true],
    ]);
  });
});

describe('the API server’s answer to a request Node cannot parse', () => {
  const server = (handler: http.RequestListener): Server => createApiServer(buildConfig({ auth: { keysFile: 'unused.yaml' } }, '/').server, handler);

  it('never writes into a response already under way: a pipelined request’s parse error closes the connection', async () => {
    // the first request's answer has started (its head and a first chunk are out) when the second, garbage, arrives
    let first: ServerResponse | undefined;
    const port = await listening(
      server((_req, res) => {
        first = res;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
      }),
    );
    const received = await exchange(port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n', (soFar, socket) => {
      if (soFar.includes('data: one')) socket.write('\x00\x01 garbage\r\n\r\n');
    });
    expect(first).toBeDefined();
    expect(received).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(received).toContain('data: one\n\n');
    expect(received).not.toContain('HTTP/1.1 400');
  });

  it('lets go of the connection of a client that keeps its side open', async () => {
    // headers may take a minute here: only the answer's own close ends the connection within the test's time
    const api = createApiServer(buildConfig({ auth: { keysFile: 'unused.yaml' }, server: { headersTimeoutMs: 60_000, requestTimeoutMs: 120_000 } }, '/').server, (_req, res) => res.end('ok'));
    const closed = new Promise<void>((resolve) => api.once('connection', (socket: net.Socket) => socket.once('close', () => resolve())));
    const port = await listening(api);
    const client = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let received = '';
    client.on('data', (d: Buffer) => (received += d.toString('latin1')));
    const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
    client.write('\x00 garbage\r\n\r\n');
    await ended;
    expect(received).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    await closed; // the router's side is closed, not left half open until its headers-timeout check
    client.destroy();
  });

  it('answers a parse error on an idle connection in the envelope, with a request id, and closes it', async () => {
    const port = await listening(server((_req, res) => res.end('ok')));
    // the first answer is whole before the garbage comes: the connection is idle, kept alive
    let sent = false;
    const received = await exchange(port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n', (soFar, socket) => {
      if (!sent && soFar.endsWith('ok')) {
        sent = true;
        socket.write('not http at all\r\n\r\n');
      }
    });
    const second = received.slice(received.indexOf('HTTP/1.1', 1));
    expect(received).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(second).toMatch(
      /^HTTP\/1\.1 400 Bad Request\r\ncontent-type: application\/json\r\ncontent-length: \d+\r\nx-request-id: [0-9a-f-]{36}\r\nconnection: close\r\n\r\n\{"error":\{"message":"The request is not valid HTTP\/1\.1 \(HPE_[A-Z_]+\); the connection is closed\.","type":"invalid_request_error","param":null,"code":"invalid_request"\}\}$/,
    );
  });

  /** An API server whose handler answers `ok`, and the requests it refused before the handler (the access log's lines). */
  async function answeringOk(): Promise<{ port: number; refused: unknown[] }> {
    const refused: unknown[] = [];
    const server = createApiServer(
      buildConfig({ auth: { keysFile: 'unused.yaml' } }, '/').server,
      (_req, res) => res.end('ok'),
      (request) => refused.push(request),
    );
    return { port: await listening(server), refused };
  }

  // Node's own check answered an HTTP/1.1 request without Host 400 with an empty body, no request id, and
  // nothing logged or counted; HTTP/1.0 needs no Host.
  it('answers an HTTP/1.1 request without Host 400 in the envelope, tells the access log, and closes the connection; HTTP/1.0 needs none', async () => {
    const { port, refused } = await answeringOk();
    const received = await exchange(port, 'GET /v1/models HTTP/1.1\r\n\r\n');
    expect(received).toMatch(
      /^HTTP\/1\.1 400 Bad Request\r\n[^]*x-request-id: [0-9a-f-]{36}\r\n[^]*Connection: close\r\n\r\n\{"error":\{"message":"An HTTP\/1\.1 request needs a Host header\.","type":"invalid_request_error","param":null,"code":"invalid_request"\}\}$/,
    );
    expect(refused).toEqual([{ requestId: expect.stringMatching(/^[0-9a-f-]{36}$/), status: 400, code: 'invalid_request', client: '127.0.0.1' }]);
    expect(await exchange(port, 'GET /v1/models HTTP/1.0\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nok$/);
    expect(await exchange(port, 'GET /v1/models HTTP/1.1\r\nHost: router\r\nConnection: close\r\n\r\n')).toMatch(/\r\n\r\nok$/);
  });

  // Without a `connect` listener Node closes a CONNECT's socket unanswered, and nothing logs or counts it.
  it('answers CONNECT 405 in the envelope, tells the access log, and closes the connection', async () => {
    const { port, refused } = await answeringOk();
    const received = await exchange(port, 'CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n\r\n');
    expect(received).toMatch(
      /^HTTP\/1\.1 405 Method Not Allowed\r\n[^]*connection: close\r\n\r\n\{"error":\{"message":"CONNECT is not allowed[^"]*","type":"invalid_request_error","param":null,"code":"method_not_allowed"\}\}$/,
    );
    expect(refused).toEqual([{ requestId: expect.stringMatching(/^[0-9a-f-]{36}$/), status: 405, code: 'method_not_allowed', client: '127.0.0.1' }]);
  });
});
