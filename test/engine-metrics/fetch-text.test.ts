/** The default fetch over real sockets on 127.0.0.1: keep-alive, deadline, body cap, abort, close. */
import { afterEach, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo, type Socket } from 'node:net';
import { createMetricsFetcher, ScrapeError, type MetricsFetcher } from '../../src/engine-metrics/fetch-text.js';

interface TestServer {
  url: URL;
  /** Sockets the server accepted, in order. */
  sockets: Socket[];
  /** Resolves when the server receives its next request. */
  nextRequest: () => Promise<void>;
  close: () => Promise<void>;
}

async function serve(handler: http.RequestListener): Promise<TestServer> {
  const server = http.createServer(handler);
  const sockets: TestServer['sockets'] = [];
  server.on('connection', (socket) => sockets.push(socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: new URL(`http://127.0.0.1:${port}/metrics`),
    sockets,
    nextRequest: () => new Promise((resolve) => server.once('request', () => resolve())),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(handler: http.RequestListener, maxBytes?: number): Promise<{ server: TestServer; fetcher: MetricsFetcher }> {
  const server = await serve(handler);
  const fetcher = createMetricsFetcher(maxBytes);
  cleanups.push(
    () => server.close(),
    () => fetcher.close(),
  );
  return { server, fetcher };
}

describe('createMetricsFetcher', () => {
  it('returns status and text, reusing one keep-alive connection', async () => {
    const { server, fetcher } = await setup((_req, res) => res.end('vllm:num_requests_waiting 1.0\n'));
    for (let i = 0; i < 3; i++) await expect(fetcher.fetchText(server.url, 5000)).resolves.toEqual({ status: 200, text: 'vllm:num_requests_waiting 1.0\n' });
    expect(server.sockets).toHaveLength(1);
  });

  it('passes a non-2xx status through for the caller to judge', async () => {
    const { server, fetcher } = await setup((_req, res) => {
      res.statusCode = 501;
      res.end('metrics not enabled, restart with --metrics');
    });
    await expect(fetcher.fetchText(server.url, 5000)).resolves.toMatchObject({ status: 501 });
  });

  it('rejects with SCRAPE_TIMEOUT and destroys the request when no answer comes in time', async () => {
    const { server, fetcher } = await setup(() => undefined);
    const arrived = server.nextRequest();
    const result = fetcher.fetchText(server.url, 150).catch((err: unknown) => err);
    await arrived;
    const socket = server.sockets[0];
    const closed = new Promise((resolve) => socket?.once('close', resolve));
    const err = await result;
    expect(err).toBeInstanceOf(ScrapeError);
    expect((err as ScrapeError).code).toBe('SCRAPE_TIMEOUT');
    await closed;
  });

  it('refuses a body over the cap, announced or streamed', async () => {
    const big = 'x'.repeat(2048);
    const { server, fetcher } = await setup((req, res) => {
      if (req.url === '/announced') res.end(big);
      else {
        res.write(big.slice(0, 1024));
        res.end(big.slice(1024));
      }
    }, 1500);
    for (const path of ['/announced', '/streamed']) {
      const err = await fetcher.fetchText(new URL(path, server.url), 5000).catch((e: unknown) => e);
      expect((err as ScrapeError).code).toBe('SCRAPE_BODY_TOO_LARGE');
    }
  });

  it('rejects at once when the signal aborts', async () => {
    const { server, fetcher } = await setup(() => undefined);
    const controller = new AbortController();
    const arrived = server.nextRequest();
    const result = fetcher.fetchText(server.url, 60_000, controller.signal).catch((err: unknown) => err);
    await arrived;
    controller.abort();
    expect(await result).toMatchObject({ name: 'AbortError' });
  });

  it('close() destroys its idle keep-alive connections', async () => {
    const { server, fetcher } = await setup((_req, res) => res.end('ok'));
    await fetcher.fetchText(server.url, 5000);
    const socket = server.sockets[0];
    const closed = new Promise((resolve) => socket?.once('close', resolve));
    fetcher.close();
    await closed;
    expect(socket?.destroyed).toBe(true);
  });
});
