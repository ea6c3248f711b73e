import { describe, expect, it } from '@jest/globals';
import { poolEndpoints, type EndpointSliceLike, type SliceEndpoint } from '../../../src/discovery/kubernetes/endpoint-slices.js';

const pod = (name: string, ip: string, conditions: SliceEndpoint['conditions'] = { ready: true, serving: true, terminating: false }): SliceEndpoint => ({
  addresses: [ip],
  conditions,
  targetRef: { kind: 'Pod', namespace: 'models', name },
});
const slice = (endpoints: SliceEndpoint[], ports: EndpointSliceLike['ports'] = [{ name: 'http', port: 8000, protocol: 'TCP' }], addressType = 'IPv4'): EndpointSliceLike => ({
  metadata: { namespace: 'models', labels: { 'kubernetes.io/service-name': 'llama' } },
  addressType,
  endpoints,
  ports,
});
const urls = (result: ReturnType<typeof poolEndpoints>): string[] => result.ready.map((e) => `${e.id}=${e.url.host}`);

describe('poolEndpoints', () => {
  it('routes to ready pods, keyed by pod, addressed by IP and the named port', () => {
    const result = poolEndpoints('models/llama', 'http', [slice([pod('b', '10.0.0.2'), pod('a', '10.0.0.1')])]);
    expect(urls(result)).toEqual(['models/a:8000=10.0.0.1:8000', 'models/b:8000=10.0.0.2:8000']);
    expect(result.total).toBe(2);
    expect(result.ready[0]?.pool).toBe('models/llama');
  });

  it.each([
    ['not ready', { ready: false, serving: false, terminating: false }, 0],
    ['terminating but still serving', { ready: false, serving: true, terminating: true }, 0],
    ['ready and terminating (publishNotReadyAddresses)', { ready: true, serving: true, terminating: true }, 0],
    ['without conditions (the API says: ready)', undefined, 1],
  ])('counts a pod that is %s as routable %i times', (_name, conditions, ready) => {
    const result = poolEndpoints('p', 'http', [slice([pod('a', '10.0.0.1', conditions)])]);
    expect(result.ready).toHaveLength(ready);
    expect(result.total).toBe(1);
  });

  it('skips an endpoint no API server would have let through (no addresses, not an address), and keeps the rest', () => {
    const malformed = [{ conditions: { ready: true } } as unknown as SliceEndpoint, { ...pod('x', 'not an address at all'), addresses: ['bad host name'] }, pod('ok', '10.0.0.9')];
    const result = poolEndpoints('p', 'http', [slice(malformed)]);
    expect(urls(result)).toEqual(['models/ok:8000=10.0.0.9:8000']);
  });

  it('resolves the port by name, by number, or the only port when none is named', () => {
    const ports = [
      { name: 'http', port: 8000 },
      { name: 'metrics', port: 9000 },
    ];
    expect(urls(poolEndpoints('p', 'metrics', [slice([pod('a', '10.0.0.1')], ports)]))).toEqual(['models/a:9000=10.0.0.1:9000']);
    expect(urls(poolEndpoints('p', 8000, [slice([pod('a', '10.0.0.1')], ports)]))).toEqual(['models/a:8000=10.0.0.1:8000']);
    expect(poolEndpoints('p', undefined, [slice([pod('a', '10.0.0.1')], ports)]).ready).toEqual([]);
    expect(urls(poolEndpoints('p', undefined, [slice([pod('a', '10.0.0.1')], [{ port: 8080 }])]))).toEqual(['models/a:8080=10.0.0.1:8080']);
    expect(poolEndpoints('p', 'grpc', [slice([pod('a', '10.0.0.1')], ports)]).ready).toEqual([]);
    expect(poolEndpoints('p', 'http', [slice([pod('a', '10.0.0.1')], [{ name: 'http', port: 8000, protocol: 'UDP' }])]).ready).toEqual([]);
  });

  it('joins the slices of one Service and counts a pod listed twice once, ready if either copy is', () => {
    const result = poolEndpoints('p', 'http', [slice([pod('a', '10.0.0.1'), pod('b', '10.0.0.2', { ready: false })]), slice([pod('b', '10.0.0.2'), pod('c', '10.0.0.3')])]);
    expect(urls(result)).toEqual(['models/a:8000=10.0.0.1:8000', 'models/b:8000=10.0.0.2:8000', 'models/c:8000=10.0.0.3:8000']);
    expect(result.total).toBe(3);
  });

  it('follows a pod that moved IP: same identity, new address', () => {
    expect(urls(poolEndpoints('p', 'http', [slice([pod('a', '10.0.0.9')])]))).toEqual(['models/a:8000=10.0.0.9:8000']);
  });

  it('brackets IPv6 addresses, skips FQDN slices and endpoints without addresses', () => {
    expect(urls(poolEndpoints('p', 'http', [slice([pod('a', 'fd00::1')], undefined, 'IPv6')]))).toEqual(['models/a:8000=[fd00::1]:8000']);
    expect(poolEndpoints('p', 'http', [slice([pod('a', 'llama.example.com')], undefined, 'FQDN')]).total).toBe(0);
    expect(poolEndpoints('p', 'http', [slice([{ addresses: [] }])]).total).toBe(0);
  });

  it('two ports of the same pods are two replicas: one pool per engine container, each with its own identity', () => {
    const ports = [
      { name: 'chat', port: 8000 },
      { name: 'embed', port: 8001 },
    ];
    const chat = poolEndpoints('models/chat', 'chat', [slice([pod('a', '10.0.0.1')], ports)]);
    const embed = poolEndpoints('models/embed', 'embed', [slice([pod('a', '10.0.0.1')], ports)]);
    expect(urls(chat)).toEqual(['models/a:8000=10.0.0.1:8000']);
    expect(urls(embed)).toEqual(['models/a:8001=10.0.0.1:8001']);
  });

  it("a dual-stack Service's pod is one replica at its IPv4 address whichever slice comes first; a ready copy wins over a family", () => {
    const v4 = slice([pod('a', '10.0.0.1')]);
    const v6 = slice([pod('a', 'fd00::1')], undefined, 'IPv6');
    expect(urls(poolEndpoints('p', 'http', [v6, v4]))).toEqual(['models/a:8000=10.0.0.1:8000']);
    expect(urls(poolEndpoints('p', 'http', [v4, v6]))).toEqual(['models/a:8000=10.0.0.1:8000']);
    expect(poolEndpoints('p', 'http', [v6, v4]).total).toBe(1);
    // the IPv4 copy not ready (yet): the ready IPv6 one serves
    const v4NotReady = slice([pod('a', '10.0.0.1', { ready: false })]);
    expect(urls(poolEndpoints('p', 'http', [v4NotReady, v6]))).toEqual(['models/a:8000=[fd00::1]:8000']);
    expect(urls(poolEndpoints('p', 'http', [v6, v4NotReady]))).toEqual(['models/a:8000=[fd00::1]:8000']);
  });

  it('keys an endpoint without a targetRef by its address', () => {
    expect(urls(poolEndpoints('p', 'http', [slice([{ addresses: ['10.0.0.7'], conditions: { ready: true } }])]))).toEqual(['10.0.0.7:8000=10.0.0.7:8000']);
  });
});
