/** Which headers cross the router, in each direction. */
import { type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';

/** Hop-by-hop headers (RFC 9110 §7.6.1) plus ones the router must own. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade'];

/** Names listed in `Connection` are hop-by-hop too. */
function connectionTokens(headers: IncomingHttpHeaders): string[] {
  const value = headers.connection;
  return typeof value === 'string' ? value.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean) : [];
}

/**
 * Prepares the client's request headers for the upstream, in place: drops hop-by-hop headers, the
 * client's key, its framing (the body is re-sent with a new length) and compression preferences (the
 * router reads the stream), then sets the request id and the pool's own key if it has one.
 */
export function prepareUpstreamHeaders(headers: IncomingHttpHeaders, requestId: string, backendKey: string | undefined): void {
  for (const name of [...connectionTokens(headers), ...HOP_BY_HOP, 'authorization', 'content-length', 'content-encoding', 'accept-encoding', 'expect', 'host']) {
    delete headers[name];
  }
  headers['x-request-id'] = requestId;
  setBackendKey(headers, backendKey);
}

/** The pool's own key as the upstream's `Authorization`, or none (a fallback pool may have another). */
export function setBackendKey(headers: IncomingHttpHeaders, backendKey: string | undefined): void {
  if (backendKey) headers.authorization = `Bearer ${backendKey}`;
  else delete headers.authorization;
}

/** The upstream response headers a client may see: hop-by-hop ones removed, the request id set. */
export function clientResponseHeaders(upstream: IncomingHttpHeaders, requestId: string): OutgoingHttpHeaders {
  const drop = new Set([...connectionTokens(upstream), ...HOP_BY_HOP]);
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(upstream)) if (value !== undefined && !drop.has(name)) out[name] = value;
  out['x-request-id'] = requestId;
  return out;
}

/** Retry hints worth passing on with an upstream error. */
export function retryHeaders(upstream: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['retry-after', 'retry-after-ms']) {
    const value = upstream[name];
    if (typeof value === 'string') out[name] = value;
  }
  return out;
}
