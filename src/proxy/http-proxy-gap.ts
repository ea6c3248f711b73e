/**
 * The one place modelgate leans on http-proxy-middleware beyond its documented API.
 *
 * With `selfHandleResponse`, the library's engine (httpxy) still adds listeners to the engine's
 * response just after it emits 'proxyRes': on a 'close' before the response completed, and on
 * 'error', it destroys the client's response. That would forbid both a retry before the first byte
 * (the client's response must stay open) and the final SSE error event after it. The attempt owns
 * the engine's response, so `ownResponse` takes every 'close' and 'error' listener it did not add
 * back off — a microtask after 'proxyRes', when httpxy has added its own and before any I/O event
 * can fire. test/proxy/http-proxy-gap.test.ts pins the library behaviour this relies on: an upgrade
 * that changes it fails there, not in production.
 */
import { type IncomingMessage } from 'node:http';

type Listener = (...args: never[]) => void;

/** Adds a listener to the engine's response that survives `ownResponse`'s clean-up. */
export type OwnListener = (event: 'data' | 'end' | 'close' | 'error', listener: Listener) => void;

/** Call from the 'proxyRes' handler: returns the way to listen on `proxyRes` from now on. */
export function ownResponse(proxyRes: IncomingMessage): OwnListener {
  const ours = new Set<Listener>();
  queueMicrotask(() => {
    for (const event of ['close', 'error'] as const) {
      for (const listener of proxyRes.listeners(event)) if (!ours.has(listener as Listener)) proxyRes.off(event, listener as (...args: unknown[]) => void);
    }
  });
  return (event, listener) => {
    ours.add(listener);
    proxyRes.on(event, listener as (...args: unknown[]) => void);
  };
}
