/**
 * A recording proxy in front of a real engine (a simulator): it keeps each request exactly as it
 * arrived — method, path, headers and the body's bytes — and relays the engine's answer unchanged.
 * A request is recorded before it is relayed, so once a client has its answer the request is here.
 */
import http, { type IncomingHttpHeaders } from 'node:http';
import { type AddressInfo } from 'node:net';
import { pipeline } from 'node:stream';

export interface Tapped {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface Tap {
  url: string;
  /** Every request, including the router's health checks and metric scrapes. */
  requests: Tapped[];
  /** The POSTs only (what clients sent through the router). */
  posts(): Tapped[];
  close(): Promise<void>;
}

export async function startTap(target: string): Promise<Tap> {
  const requests: Tapped[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const upstream = http.request(`${target}${req.url ?? '/'}`, { method: req.method, headers: { ...req.headers, host: new URL(target).host }, agent: false }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        // an engine that cuts its answer short has the router's connection cut too, as it would be without the tap
        pipeline(answer, res, (err) => err && res.destroy());
      });
      upstream.on('error', () => res.destroy());
      res.on('close', () => upstream.destroy());
      upstream.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    posts: () => requests.filter((r) => r.method === 'POST'),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
