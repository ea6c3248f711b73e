/** The HTTP servers' lifecycle: listening (a failure is a config error naming the field) and closing. */
import http from '../core/node-http.js';
import type { RequestListener, Server } from 'node:http';
import { systemSleep } from '../core/clock.js';
import { type ServerConfig } from '../config/schema.js';
import { type AddressInfo } from 'node:net';
import { ConfigError } from '../config/load.js';

/** Why a listen failed, as a config error naming the field (`server` or `admin`). */
function listenError(err: NodeJS.ErrnoException, field: string, host: string, port: number): ConfigError {
  const where = `${host}:${port}`;
  const why =
    err.code === 'EADDRINUSE'
      ? `${where} is already in use (another process, or the other of server.port and admin.port)`
      : err.code === 'EACCES'
        ? `permission denied to listen on ${where} (ports below 1024 need privileges)`
        : err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND'
          ? `${host} is not an address of this machine`
          : `cannot listen on ${where} (${err.code ?? err.message})`;
  return new ConfigError(why, field);
}

export function listen(server: Server, port: number, host: string, field: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const failed = (err: NodeJS.ErrnoException): void => reject(listenError(err, field, host, port));
    server.once('error', failed);
    server.listen(port, host, () => {
      server.off('error', failed);
      const address = server.address() as AddressInfo;
      const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      resolve(`http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${address.port}`);
    });
  });
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

/**
 * The API server. Slowloris guards: a client gets headersTimeoutMs to send its headers and
 * requestTimeoutMs for its whole request. Node enforces both only when it checks, every
 * connectionsCheckingInterval (30 s by default), so the check runs at least as often as the headers
 * timeout.
 */
export function createApiServer(server: ServerConfig, handler: RequestListener): Server {
  return http.createServer(
    {
      noDelay: true,
      keepAlive: true,
      headersTimeout: server.headersTimeoutMs,
      requestTimeout: server.requestTimeoutMs,
      keepAliveTimeout: server.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1_000, server.headersTimeoutMs),
    },
    handler,
  );
}

/**
 * Stops taking connections (idle keep-alive ones close now), gives the requests still open up to
 * `gracePeriodMs` to finish, then cuts what is left. Resolves with how many were cut.
 */
export async function drain(server: Server, active: () => number, gracePeriodMs: number): Promise<number> {
  const closed = closeServer(server);
  const deadline = Date.now() + gracePeriodMs;
  while (active() > 0 && Date.now() < deadline) await systemSleep(20);
  const cut = active();
  server.closeAllConnections();
  await closed;
  return cut;
}
