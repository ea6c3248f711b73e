/**
 * Pins the http-proxy-middleware behaviour src/proxy/http-proxy-gap.ts relies on. If an upgrade
 * changes it, these fail: the first when the library stops destroying the client's response on an
 * early upstream close (ownResponse may then be unnecessary), the second when ownResponse no longer
 * keeps the client's response usable (retries and final SSE error events would break).
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { createProxyMiddleware } from 'http-proxy-middleware';
import { ownResponse } from '../../src/proxy/http-proxy-gap.js';
import { rawRequest } from '../helpers/http.js';

const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function listen(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** An engine that sends its status and headers, then drops the connection before any body. */
function droppingUpstream(): Promise<string> {
  return listen((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    setImmediate(() => res.socket?.destroy());
  });
}

/** A proxy whose 'proxyRes' handler is `onProxyRes`; reports whether the client response was destroyed. */
async function proxy(target: string, onProxyRes: (proxyRes: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; destroyed: Promise<boolean> }> {
  let report: (destroyed: boolean) => void = () => undefined;
  const destroyed = new Promise<boolean>((resolve) => (report = resolve));
  const middleware = createProxyMiddleware({
    target,
    selfHandleResponse: true,
    ejectPlugins: true,
    plugins: [(server) => server.on('proxyRes', (proxyRes, _req, res) => onProxyRes(proxyRes, res))],
  });
  const url = await listen((req, res) => {
    res.once('close', () => report(!res.writableFinished));
    void middleware(req, res, () => undefined);
  });
  return { url, destroyed };
}

describe('http-proxy-middleware with selfHandleResponse', () => {
  it('destroys the client response when the engine closes early (the behaviour ownResponse undoes)', async () => {
    const { url, destroyed } = await proxy(await droppingUpstream(), () => undefined);
    const res = await rawRequest(`${url}/v1/chat/completions`);
    expect(await destroyed).toBe(true);
    expect(res.error).toBeDefined(); // the client saw its connection cut
  });

  it('leaves the client response to the attempt once ownResponse took the engine’s response over', async () => {
    const { url, destroyed } = await proxy(await droppingUpstream(), (proxyRes, res) => {
      const on = ownResponse(proxyRes);
      on('error', () => undefined);
      on('close', () => {
        // the attempt decides: here, a clean answer of its own after the engine went away
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end('{"recovered":true}');
      });
    });
    const res = await rawRequest(`${url}/v1/chat/completions`);
    expect(await destroyed).toBe(false);
    expect(res.status).toBe(502);
    expect(res.body).toBe('{"recovered":true}');
  });
});
