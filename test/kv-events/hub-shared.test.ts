/**
 * Replicas whose `kvEvents.endpoint` names one publisher (engines on one host share `{host}`): none of
 * them is subscribed, as no one of them can be told its own events, and it is said once; `{port}` gives
 * each engine on a host its own publisher. The transport is a stand-in that records the addresses.
 */
import { describe, expect, it } from '@jest/globals';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type Endpoint, type PoolSpec } from '../../src/core/types.js';
import { ReplicaFeed, type ReplicaFeedOptions } from '../../src/kv-events/feed.js';
import { feedAddress, KvEventsHub, type FeedTransport } from '../../src/kv-events/hub.js';
import { type FeedTarget } from '../../src/kv-events/zmq-transport.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

const pool = (endpoint: string): PoolSpec => ({
  name: 'p',
  engine: 'vllm',
  servedModelName: 'm',
  capabilities: ['chat'],
  resilience: RESILIENCE_DEFAULTS,
  routing: { ...ROUTING_DEFAULTS, kvEvents: { ...ROUTING_DEFAULTS.kvEvents, enabled: true, tokenizer: 'simulator', endpoint } },
});
const ep = (id: string, url: string): Endpoint => ({ id, url: new URL(url), weight: 1 }) as Endpoint;

function hubOf(spec: { current: PoolSpec }, endpoints: { current: Endpoint[] }): { hub: KvEventsHub; subscribed: string[]; closed: string[]; shared: Array<[string, string[]]> } {
  const time = new FakeTime();
  const subscribed: string[] = [];
  const closed: string[] = [];
  const shared: Array<[string, string[]]> = [];
  const transport: FeedTransport = {
    ZmqFeed: class {
      readonly feed: ReplicaFeed;
      private readonly address: string;
      constructor(target: FeedTarget, options: Omit<ReplicaFeedOptions, 'replay'>) {
        this.address = target.endpoint;
        subscribed.push(target.endpoint);
        this.feed = new ReplicaFeed(options);
      }
      close(): void {
        closed.push(this.address);
      }
    },
  };
  const hub = new KvEventsHub({
    endpoints: { snapshot: () => endpoints.current },
    pools: () => [spec.current],
    scheduler: time,
    now: () => time.now(),
    transport: () => Promise.resolve(transport),
    events: { onSharedFeed: (_pool, address, ids) => shared.push([address, [...ids]]) },
  });
  return { hub, subscribed, closed, shared };
}

describe('KvEventsHub: one publisher address per replica', () => {
  it('subscribes none of the replicas that share one, says so once, and subscribes each once {port} tells them apart', async () => {
    const spec = { current: pool('tcp://{host}:5557') };
    const endpoints = { current: [ep('a', 'http://10.0.0.1:8000'), ep('b', 'http://10.0.0.1:8001'), ep('c', 'http://10.0.0.2:8000')] };
    const { hub, subscribed, closed, shared } = hubOf(spec, endpoints);
    hub.sync();
    await flush();
    expect(subscribed).toEqual(['tcp://10.0.0.2:5557']);
    expect(shared).toEqual([['tcp://10.0.0.1:5557', ['a', 'b']]]);
    hub.sync();
    expect(shared).toHaveLength(1); // said once while it lasts
    expect(hub.state('p', 'a')).toBe(0); // the estimate routes them
    // a third on the shared host: still none of them
    endpoints.current = [...endpoints.current, ep('d', 'http://10.0.0.1:8002')];
    hub.sync();
    expect(subscribed).toEqual(['tcp://10.0.0.2:5557']);
    // the operator gives each engine its own publisher
    spec.current = pool('tcp://{host}:1{port}');
    hub.sync();
    expect(subscribed.slice(1).sort()).toEqual(['tcp://10.0.0.1:18000', 'tcp://10.0.0.1:18001', 'tcp://10.0.0.1:18002', 'tcp://10.0.0.2:18000']);
    expect(closed).toEqual(['tcp://10.0.0.2:5557']);
    hub.stop();
  });

  it('fills {port} with the scheme’s port when the URL names none', () => {
    expect(feedAddress('tcp://{host}:1{port}', new URL('http://engine.local'))).toBe('tcp://engine.local:180');
    expect(feedAddress('tcp://{host}:{port}', new URL('https://10.0.0.1'))).toBe('tcp://10.0.0.1:443');
    expect(feedAddress('tcp://{host}:5557', new URL('http://[::1]:8000'))).toBe('tcp://[::1]:5557');
  });
});
