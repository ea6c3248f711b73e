/**
 * The default way to GET a replica's `/metrics`: `node:http`/`node:https` over keep-alive agents
 * owned by the caller (one connection per replica is reused every scrape, not re-opened), with a
 * deadline that destroys the request and a cap on the body so a broken replica cannot exhaust memory.
 */
import http from '../core/node-http.js';
import type { Agent } from 'node:http';
import type https from 'node:https';
import { nodeHttps } from '../core/node-https.js';

/** GETs `url`; rejects on a connection error, after `timeoutMs`, or when `signal` aborts. */
export type FetchText = (url: URL, timeoutMs: number, signal?: AbortSignal) => Promise<{ status: number; text: string }>;

/** A `/metrics` page larger than this is refused: real engines stay well under 1 MiB. */
export const MAX_METRICS_BYTES = 4 * 1024 * 1024;

export type ScrapeErrorCode = 'SCRAPE_TIMEOUT' | 'SCRAPE_BODY_TOO_LARGE';

export class ScrapeError extends Error {
  constructor(
    readonly code: ScrapeErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ScrapeError';
  }
}

/** A {@link FetchText} with its own keep-alive agents; `close()` destroys them and their sockets. */
export interface MetricsFetcher {
  readonly fetchText: FetchText;
  close(): void;
}

export function createMetricsFetcher(maxBytes = MAX_METRICS_BYTES): MetricsFetcher {
  // Few sockets per replica: scrapes of one replica never overlap, the second is for a racing close.
  const options = { keepAlive: true, maxSockets: 2, maxFreeSockets: 1 };
  const plain = new http.Agent(options);
  let tls: Agent | undefined; // node:https loads with the first https replica (src/core/node-https.ts)
  return {
    fetchText: (url, timeoutMs, signal) => {
      if (url.protocol !== 'https:') return get(http, plain, url, timeoutMs, maxBytes, signal);
      const client = nodeHttps();
      tls ??= new client.Agent(options);
      return get(client, tls, url, timeoutMs, maxBytes, signal);
    },
    close: () => {
      plain.destroy();
      tls?.destroy();
    },
  };
}

function get(client: typeof http | typeof https, agent: Agent, url: URL, timeoutMs: number, maxBytes: number, signal?: AbortSignal): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const req = client.get(url, { agent, headers: { accept: 'text/plain' } });
    const fail = (err: Error): void => {
      cleanup();
      req.destroy();
      reject(err);
    };
    const deadline = setTimeout(() => fail(new ScrapeError('SCRAPE_TIMEOUT', `no complete answer from ${url.href} within ${timeoutMs} ms`)), timeoutMs);
    const onAbort = (): void => fail(signal?.reason as Error);
    const cleanup = (): void => {
      clearTimeout(deadline);
      signal?.removeEventListener('abort', onAbort);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    req.on('error', fail);
    req.on('response', (res) => {
      const status = res.statusCode ?? 0;
      if (Number(res.headers['content-length'] ?? 0) > maxBytes) return fail(tooLarge(url, maxBytes));
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (bytes > maxBytes) fail(tooLarge(url, maxBytes));
        else chunks.push(chunk);
      });
      res.on('error', fail);
      res.on('close', () => {
        if (!res.complete) fail(new Error(`${url.href} closed the connection before the metrics ended`));
      });
      res.on('end', () => {
        cleanup();
        resolve({ status, text: Buffer.concat(chunks, bytes).toString('utf8') });
      });
    });
  });
}

function tooLarge(url: URL, maxBytes: number): ScrapeError {
  return new ScrapeError('SCRAPE_BODY_TOO_LARGE', `${url.href} sent more than ${maxBytes} bytes of metrics; check the engine's metrics path`);
}
