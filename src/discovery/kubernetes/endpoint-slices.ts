/**
 * EndpointSlices → routable endpoints of a pool. Pure.
 *
 * - All slices of the pool's Service are joined; a pod listed in two slices (as happens while the
 *   controller moves endpoints between slices, and in a dual-stack Service's IPv4 and IPv6 slices)
 *   counts once: ready if either copy is, at its IPv4 address when both copies are ready (engines
 *   often listen on 0.0.0.0 only), whatever order the slices come in.
 * - An endpoint is routable when `conditions.ready` is true and `terminating` is not. The API says a
 *   missing `ready` means ready; the EndpointSlice controller always sets it.
 * - Identity is the pod (`targetRef` namespace/name) and the port, not the IP: a pod that moves IP
 *   keeps its identity and only its address changes, and two pools on two ports of the same pods (two
 *   engine containers, two Services) are two replicas, with their own breakers, health, in-flight
 *   counts and engine metrics.
 * - The port comes from the slice: by name (`port: http`), by number (`port: 8000`, the port the
 *   replicas listen on as the slice lists it) or, when the pool names none, the slice's only port. A
 *   slice without that port contributes nothing.
 */
import { type Endpoint } from '../../core/types.js';

export interface SlicePort {
  name?: string;
  port?: number;
  protocol?: string;
}

export interface SliceEndpoint {
  addresses: string[];
  conditions?: { ready?: boolean; serving?: boolean; terminating?: boolean };
  targetRef?: { kind?: string; namespace?: string; name?: string };
}

export interface EndpointSliceLike {
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  addressType?: string;
  endpoints?: SliceEndpoint[];
  ports?: SlicePort[];
}

export interface PoolEndpoints {
  /** Routable endpoints, sorted by id. */
  ready: Endpoint[];
  /** Distinct endpoints listed, ready or not. */
  total: number;
}

function portOf(slice: EndpointSliceLike, wanted: string | number | undefined): number | undefined {
  const ports = (slice.ports ?? []).filter((p) => (p.protocol ?? 'TCP') === 'TCP' && typeof p.port === 'number');
  let match: SlicePort | undefined;
  if (wanted === undefined) match = ports.length === 1 ? ports[0] : undefined;
  else if (typeof wanted === 'number') match = ports.find((p) => p.port === wanted);
  else match = ports.find((p) => (p.name ?? '') === wanted);
  return match?.port;
}

function hostOf(address: string, addressType: string | undefined): string {
  return addressType === 'IPv6' || address.includes(':') ? `[${address}]` : address;
}

/** The endpoints of a pool whose Service port is `port`, from the slices of its Service. */
export function poolEndpoints(pool: string, port: string | number | undefined, slices: readonly EndpointSliceLike[]): PoolEndpoints {
  const byId = new Map<string, { endpoint: Endpoint; ready: boolean; ipv4: boolean }>();
  for (const slice of slices) {
    if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') continue; // FQDN slices name no pod
    const number = portOf(slice, port);
    if (number === undefined) continue;
    for (const ep of slice.endpoints ?? []) {
      // an API server validates slices; one that did not (or a proxy in between) must not take the router down
      const address = Array.isArray(ep.addresses) ? ep.addresses[0] : undefined;
      if (typeof address !== 'string' || address === '') continue;
      let url: URL;
      try {
        url = new URL(`http://${hostOf(address, slice.addressType)}:${number}`);
      } catch {
        continue; // not an address a URL can hold
      }
      const ref = ep.targetRef;
      const id = ref?.name ? `${ref.namespace ?? slice.metadata?.namespace ?? ''}/${ref.name}:${number}` : `${hostOf(address, slice.addressType)}:${number}`;
      const ready = ep.conditions?.ready !== false && ep.conditions?.terminating !== true;
      const ipv4 = slice.addressType === 'IPv4';
      const known = byId.get(id);
      // a ready copy over one that is not; then IPv4 over IPv6; else the first
      if (known && (known.ready !== ready ? known.ready : known.ipv4 || !ipv4)) continue;
      byId.set(id, { endpoint: { id, pool, url, weight: 1 }, ready, ipv4 });
    }
  }
  const ready = [...byId.values()].filter((e) => e.ready).map((e) => e.endpoint);
  ready.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return { ready, total: byId.size };
}
