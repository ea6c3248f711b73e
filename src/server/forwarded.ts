/**
 * `x-forwarded-*` as the router saw the request. Values a client sent are believed only when the
 * connection comes from a configured proxy (`server.trustedProxies`, CIDRs): the usual reverse-proxy
 * rule. From anyone else they are replaced, so a client cannot make an engine (or its logs) believe
 * it came from elsewhere.
 */
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { type AddressRanges } from '../core/address-ranges.js';
import { type ForwardedFor } from '../proxy/headers.js';

/** An IPv4 address written as IPv6 (`::ffff:10.0.0.1`, a dual-stack socket) in its plain form. */
export function plainAddress(address: string | undefined): string {
  if (address === undefined) return '';
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

function single(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value.join(', ') : value;
  return text === undefined || text.trim() === '' ? undefined : text.trim();
}

/** Where the request came from and how it was addressed, as the engine should be told. */
export function forwardedFor(req: IncomingMessage, trusted: AddressRanges): ForwardedFor & { client: string } {
  const peer = plainAddress(req.socket.remoteAddress);
  const own = {
    for: peer,
    proto: (req.socket as Partial<TLSSocket>).encrypted === true ? 'https' : 'http',
    host: single(req.headers.host) ?? '',
    port: String(req.socket.localPort ?? ''),
    client: peer,
  };
  if (!trusted.has(peer)) return own;
  const chain = single(req.headers['x-forwarded-for']);
  return {
    for: chain === undefined ? peer : `${chain}, ${peer}`,
    proto: single(req.headers['x-forwarded-proto']) ?? own.proto,
    host: single(req.headers['x-forwarded-host']) ?? own.host,
    port: single(req.headers['x-forwarded-port']) ?? own.port,
    client: clientOf(chain, peer, trusted),
  };
}

/** The client: the right-most address of the chain that is not a trusted proxy (the left ones are the client's word). */
function clientOf(chain: string | undefined, peer: string, trusted: AddressRanges): string {
  const hops = (chain ?? '').split(',').map((hop) => plainAddress(hop.trim()));
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i] ?? '';
    if (isIP(hop) === 0) return peer; // a garbled chain says nothing reliable beyond the proxy
    if (!trusted.has(hop)) return hop;
  }
  return hops[0] ?? peer;
}
