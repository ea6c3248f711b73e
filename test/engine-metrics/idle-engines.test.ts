/**
 * TGI and TEI export their gauges through Rust's metrics-exporter-prometheus, which shows a gauge only
 * once it is first set: their queue (and TGI's batch) gauge appears at the replica's first request. A
 * freshly started replica's `/metrics` is empty, or holds only counters. The scraper, over real
 * sockets on 127.0.0.1 with its default fetch, must read such a page as an idle replica (a sample of
 * 0 and 0, which the queue scorer prefers) — not as a failed scrape that leaves the replica on the
 * others' mean score, which is what kept a new replica from being preferred when it was needed most.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { systemScheduler } from '../../src/core/clock.js';
import { type Endpoint, type Engine, type EngineLoad, type PoolSpec } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { estimatedLoads, SCORERS } from '../../src/balancer/scorers.js';
import { EngineMetricsScraper, type ScrapeResult } from '../../src/engine-metrics/scraper.js';

/** What each replica's `/metrics` answers. */
const PAGES = {
  // A TGI that has served nothing: metrics-exporter-prometheus renders no series at all.
  tgiIdle: '',
  tgiBusy: '# TYPE tgi_request_count counter\ntgi_request_count 9\n# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 2\n',
  // A pool that says tgi in front of a vLLM: another engine's page, not an idle TGI.
  vllmInTgiPool: '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 1.0\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 0.0\n',
  // A TEI whose only requests failed before its queue (tokenization): counters, no queue gauge yet.
  teiIdle: '# TYPE te_request_count counter\nte_request_count{method="single"} 2\n# TYPE te_request_failure counter\nte_request_failure{err="tokenization"} 2\n',
};
type Replica = keyof typeof PAGES;

const NOW = 1_000;
const servers: http.Server[] = [];
const endpoints = new Map<Replica, Endpoint>();
const results = new Map<string, ScrapeResult>();
let scraper: EngineMetricsScraper;

function pool(name: string, engine: Engine): PoolSpec {
  return {
    name,
    engine,
    servedModelName: `served/${name}`,
    capabilities: engine === 'tei' ? ['embeddings'] : ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: { ...ROUTING_DEFAULTS, engineMetrics: { enabled: true, intervalMs: 1_000, timeoutMs: 5_000, staleAfterMs: 10_000 } },
  };
}
const POOLS = [pool('tgi', 'tgi'), pool('tei', 'tei')];
const MEMBERS: Record<string, Replica[]> = { tgi: ['tgiIdle', 'tgiBusy', 'vllmInTgiPool'], tei: ['teiIdle'] };

async function serve(replica: Replica, poolName: string): Promise<void> {
  const server = http.createServer((req, res) => {
    res.writeHead(req.url === '/metrics' ? 200 : 404, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(req.url === '/metrics' ? PAGES[replica] : '');
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  endpoints.set(replica, { id: `ns/${replica}`, pool: poolName, url: new URL(`http://127.0.0.1:${port}`), weight: 1 });
}

function endpointOf(replica: Replica): Endpoint {
  const endpoint = endpoints.get(replica);
  if (!endpoint) throw new Error(`${replica} is not served`);
  return endpoint;
}

beforeAll(async () => {
  for (const [poolName, replicas] of Object.entries(MEMBERS)) for (const replica of replicas) await serve(replica, poolName);
  scraper = new EngineMetricsScraper({
    endpoints: { snapshot: (poolName) => (MEMBERS[poolName] ?? []).map(endpointOf) },
    pools: () => POOLS,
    scheduler: systemScheduler,
    now: () => NOW,
    localCount: () => 0,
    onScrape: (_pool, endpoint, result) => results.set(endpoint, result),
  });
  await scraper.runOnce();
});

afterAll(async () => {
  scraper.stop();
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
});

const loadOf = (replica: Replica): EngineLoad | undefined => scraper.load(endpointOf(replica).id, NOW);

describe('an idle TGI or TEI replica, before its first request, reads as idle', () => {
  it('a TGI whose /metrics is empty: a good scrape, nothing waiting, nothing running', () => {
    expect(results.get('ns/tgiIdle')).toBe('ok');
    expect(loadOf('tgiIdle')).toMatchObject({ waiting: 0, running: 0 });
  });

  it('a TEI with counters but no queue gauge yet: a good scrape, nothing waiting', () => {
    expect(results.get('ns/teiIdle')).toBe('ok');
    expect(loadOf('teiIdle')).toMatchObject({ waiting: 0, running: 0 });
  });

  it('a busy TGI still reads its gauges', () => {
    expect(results.get('ns/tgiBusy')).toBe('ok');
    expect(loadOf('tgiBusy')).toMatchObject({ waiting: 3, running: 2 });
  });

  it('another engine behind a tgi pool is still unparsable, never an idle TGI', () => {
    expect(results.get('ns/vllmInTgiPool')).toBe('unparsable');
    expect(loadOf('vllmInTgiPool')).toBeUndefined();
  });

  it('the queue scorer prefers the idle TGI over the busy one', () => {
    const candidates = [endpointOf('tgiIdle'), endpointOf('tgiBusy')];
    const engine = candidates.map((ep) => scraper.load(ep.id, NOW));
    const local = [0, 0];
    const scores = SCORERS.queue({
      candidates,
      local,
      engine,
      load: estimatedLoads(candidates, local, engine),
      prefixMatched: [0, 0],
      prefixTotal: 0,
      sessionKey: undefined,
      settings: ROUTING_DEFAULTS,
    });
    expect(scores[0]).toBe(1);
    expect(scores[1]).toBeLessThan(0.5); // (0 + 1) / (5 + 1)
  });
});
