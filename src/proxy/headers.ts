/** Which headers cross the router, in each direction. */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/** Hop-by-hop headers (RFC 9110 §7.6.1) plus ones the router must own. */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade'];

const NONE: readonly string[] = [];

/** Names listed in `Connection` are hop-by-hop too. */
function connectionTokens(headers: IncomingHttpHeaders): readonly string[] {
  const value = headers.connection;
  // the usual values name no other header: nothing to split
  if (value === undefined || value === 'keep-alive' || value === 'close') return NONE;
  return typeof value === 'string'
    ? value
        .split(',')
        .map((t) => t.trim().toLowerCase())
        .filter(Boolean)
    : [];
}

/**
 * Client request headers that reach the engine by default: content negotiation, the client's name,
 * trace context. Anything else (cookies, `x-api-key`, the client's `authorization`, `forwarded`,
 * proprietary headers) stays at the router unless the operator adds it (`server.forwardHeaders`).
 * The router adds the request's session and priority headers, `x-request-id`, `x-forwarded-*` and
 * the pool's own key itself.
 */
export const DEFAULT_FORWARDED_HEADERS: readonly string[] = ['content-type', 'accept', 'user-agent', 'traceparent', 'tracestate', 'baggage'];

/** Headers the router always sets itself, which no allow-list may pass through from the client. */
export const ROUTER_OWNED_HEADERS: readonly string[] = [
  ...HOP_BY_HOP,
  'authorization',
  // the client's key on /v1/messages, as authorization is elsewhere: it stays at the router
  'x-api-key',
  'host',
  'content-length',
  'content-encoding',
  'accept-encoding',
  'expect',
  'x-request-id',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-forwarded-port',
  'forwarded',
];

/** What the router saw of the connection, for `x-forwarded-*`. */
export interface ForwardedFor {
  /** The client's address as the router computed it (see trusted-proxies.ts). */
  for: string;
  proto: string;
  host: string;
  port: string;
}

/**
 * The headers an engine gets for one request: the allow-listed ones the client sent, then the
 * router's own — request id, `x-forwarded-*` from what it saw, and the pool's key (or none).
 */
export function upstreamHeaders(client: IncomingHttpHeaders, allowed: ReadonlySet<string>, own: { requestId: string; forwarded: ForwardedFor; backendKey: string | undefined }): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const hop = connectionTokens(client);
  for (const name of allowed) {
    const value = hop.includes(name) ? undefined : client[name];
    if (value !== undefined) out[name] = value;
  }
  out['x-request-id'] = own.requestId;
  out['x-forwarded-for'] = own.forwarded.for;
  out['x-forwarded-proto'] = own.forwarded.proto;
  if (own.forwarded.host !== '') out['x-forwarded-host'] = own.forwarded.host;
  out['x-forwarded-port'] = own.forwarded.port;
  if (own.backendKey) out.authorization = `Bearer ${own.backendKey}`;
  return out;
}

/**
 * Engine response headers a client gets: an allow-list, as for requests. `true`: passed on; `false`:
 * never; a name not listed passes when it is an extension header (`x-…`), the engines' own namespace
 * (TGI's and TEI's `x-compute-time`, `x-queue-time`, `x-total-time`, `x-accel-buffering`, …), except
 * `x-ratelimit-*` (below). Every other header an engine sends stays at the router: the client's
 * response comes from the router's origin, and a browser there obeys what it says for the whole origin
 * (`clear-site-data`, `alt-svc`, `strict-transport-security`, `nel`, `report-to`), for reading it from
 * elsewhere (`access-control-*`), or for where to go (`location`, `refresh`, `link`); caching
 * (`cache-control`, `etag`, `vary`) is the router's to say, as a shared cache holding one tenant's answer
 * would hand it to the next; `set-cookie` is for the router's connection, which every tenant shares;
 * `server`, `x-powered-by` and `date` are the engine's stack and clock; `openai-organization`,
 * `openai-project` and Anthropic's `anthropic-*` name the account behind the router's backend key.
 * A new header of that kind stays out without a release. One map: one lookup a header.
 */
const FOR_CLIENTS: ReadonlyMap<string, boolean> = new Map([
  // what the official SDKs read of an answer (content-length is dropped where it no longer describes the body: relay.ts)
  ['content-type', true],
  ['content-length', true],
  ['request-id', true],
  ['retry-after', true],
  ['retry-after-ms', true],
  // OpenAI's own, describing the answer, not the account
  ['openai-processing-ms', true],
  ['openai-version', true],
  ['x-powered-by', false],
]);

/**
 * The upstream response headers a client may see: the allow-listed and extension ones but those the
 * engine lists in `Connection`, and the request id set.
 */
export function clientResponseHeaders(upstream: IncomingHttpHeaders, requestId: string): OutgoingHttpHeaders {
  const listed = connectionTokens(upstream);
  const out: OutgoingHttpHeaders = {};
  for (const name in upstream) {
    const value = upstream[name];
    const allowed = FOR_CLIENTS.get(name);
    // An engine's own rate-limit headers describe the router's backend key, shared by every tenant: the
    // client gets the router's, for its own key (set before the response starts), never the engine's.
    if (value === undefined || allowed === false || (allowed === undefined && (!name.startsWith('x-') || name.startsWith('x-ratelimit-')))) continue;
    if (listed.length === 0 || !listed.includes(name)) out[name] = value;
  }
  out['x-request-id'] = requestId;
  return out;
}

/**
 * Retry hints worth passing on with an upstream error: the waits, and an engine's `x-should-retry:
 * false` (a hosted API or another router behind an `openai` pool that says its answer will not change:
 * dropped, the official SDKs sent the request twice more). Only `false`: an engine's `true` would have
 * the SDKs repeat answers they do not retry, a 400 three times.
 */
export function retryHeaders(upstream: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of ['retry-after', 'retry-after-ms']) {
    const value = upstream[name];
    if (typeof value === 'string') out[name] = value;
  }
  if (typeof upstream['x-should-retry'] === 'string' && upstream['x-should-retry'].trim().toLowerCase() === 'false') out['x-should-retry'] = 'false';
  return out;
}
