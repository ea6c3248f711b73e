/**
 * A replica whose `/metrics` holds none of its engine's load series — empty, or only the engine's own
 * counters — gives no sample, for every engine kind: it is scored like a replica whose scrape failed
 * (the queue scorer's neutral mean, the router's own counts deciding), never as an idle one. TGI and TEI
 * show their queue gauges only from a replica's first request (Rust's metrics-exporter-prometheus shows a
 * gauge once it is first set), so a new replica of theirs serves such a page; so does a broken one,
 * which, read as nothing waiting and nothing running, had the queue scorer's best score and drew its
 * pool's traffic until its breaker opened. Over real sockets on 127.0.0.1 with the scraper's own fetch.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { systemScheduler } from '../../src/core/clock.js';
import { type Endpoint, type Engine, type PoolSpec } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { estimatedLoads, SCORERS } from '../../src/balancer/scorers.js';
import { EngineMetricsScraper, FAILING_AFTER, type ScrapeResult } from '../../src/engine-metrics/scraper.js';

type ScrapedEngine = Exclude<Engine, 'openai'>;

/** Per engine: a page without load series (its own counter only), and a busy one and a quieter one with them. */
const PAGES: Record<ScrapedEngine, { loadless: string; busy: string; quiet: string }> = {
  vllm: {
    loadless: '# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name="m"} 9.0\n',
    busy: 'vllm:num_requests_waiting{model_name="m"} 3.0\nvllm:num_requests_running{model_name="m"} 2.0\n',
    quiet: 'vllm:num_requests_waiting{model_name="m"} 0.0\nvllm:num_requests_running{model_name="m"} 1.0\n',
  },
  sglang: {
    loadless: '# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{model_name="m"} 9.0\n',
    busy: 'sglang:num_queue_reqs{model_name="m"} 3\nsglang:num_running_reqs{model_name="m"} 2\n',
    quiet: 'sglang:num_queue_reqs{model_name="m"} 0\nsglang:num_running_reqs{model_name="m"} 1\n',
  },
  // a TGI that has served nothing: metrics-exporter-prometheus renders no series at all
  tgi: { loadless: '', busy: 'tgi_queue_size 3\ntgi_batch_current_size 2\n', quiet: 'tgi_queue_size 0\ntgi_batch_current_size 1\n' },
  // a TEI whose only requests failed before its queue (tokenization): counters, no queue gauge yet
  tei: { loadless: '# TYPE te_request_count counter\nte_request_count{method="single"} 2\n', busy: 'te_queue_size 5\n', quiet: 'te_queue_size 1\n' },
  llamacpp: {
    loadless: '# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 9\n',
    busy: 'llamacpp:requests_deferred 3\nllamacpp:requests_processing 2\n',
    quiet: 'llamacpp:requests_deferred 0\nllamacpp:requests_processing 1\n',
  },
};
const ENGINES = Object.keys(PAGES) as ScrapedEngine[];
const KINDS = ['loadless', 'busy', 'quiet'] as const;

const NOW = 1_000;
let now = NOW;
const servers: http.Server[] = [];
const endpoints = new Map<string, Endpoint>();
const results = new Map<string, ScrapeResult[]>();
const failing: string[] = [];
let scraper: EngineMetricsScraper;

function pool(engine: ScrapedEngine): PoolSpec {
  return {
    name: engine,
    engine,
    servedModelName: `served/${engine}`,
    capabilities: engine === 'tei' ? ['embeddings'] : ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: { ...ROUTING_DEFAULTS, engineMetrics: { enabled: true, intervalMs: 1_000, timeoutMs: 5_000, staleAfterMs: 10_000 } },
  };
}

async function serve(engine: ScrapedEngine, kind: (typeof KINDS)[number]): Promise<void> {
  const server = http.createServer((req, res) => {
    res.writeHead(req.url === '/metrics' ? 200 : 404, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(req.url === '/metrics' ? PAGES[engine][kind] : '');
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const id = `${engine}/${kind}`;
  endpoints.set(id, { id, pool: engine, url: new URL(`http://127.0.0.1:${port}`), weight: 1 });
}

const endpointOf = (engine: ScrapedEngine, kind: (typeof KINDS)[number]): Endpoint => endpoints.get(`${engine}/${kind}`)!;

beforeAll(async () => {
  for (const engine of ENGINES) for (const kind of KINDS) await serve(engine, kind);
  scraper = new EngineMetricsScraper({
    endpoints: { snapshot: (poolName) => KINDS.map((kind) => endpointOf(poolName as ScrapedEngine, kind)) },
    pools: () => ENGINES.map(pool),
    scheduler: systemScheduler,
    now: () => now,
    localCount: () => 0,
    onScrape: (_pool, endpoint, result) => results.set(endpoint, [...(results.get(endpoint) ?? []), result]),
    onFailing: (_pool, endpoint) => failing.push(endpoint),
  });
  // one scrape more than it takes to be said failing, a second apart: the last one's samples are read at NOW
  for (let i = 0; i < FAILING_AFTER; i++) {
    now = NOW - (FAILING_AFTER - 1 - i) * 1_000;
    await scraper.runOnce();
  }
});

afterAll(async () => {
  scraper.stop();
  await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
});

describe.each(ENGINES)('a %s replica whose page has none of its load series', (engine) => {
  const idleLooking = engine === 'tgi' || engine === 'tei';

  it('gives no sample: no signal, as a failed scrape', () => {
    expect(scraper.load(endpointOf(engine, 'loadless').id, NOW)).toBeUndefined();
    expect(scraper.load(endpointOf(engine, 'busy').id, NOW)).toMatchObject({ waiting: engine === 'tei' ? 5 : 3 });
  });

  it(
    idleLooking
      ? 'is counted empty, and not said to be failing (a replica that has served nothing yet serves it)'
      : 'is counted unparsable, and said to be failing (this engine shows its gauges from the start)',
    () => {
      const id = endpointOf(engine, 'loadless').id;
      expect(results.get(id)).toEqual(Array.from({ length: FAILING_AFTER }, () => (idleLooking ? 'empty' : 'unparsable')));
      expect(failing.includes(id)).toBe(!idleLooking);
    },
  );

  it('draws no traffic from the queue scorer: it gets the mean of the others’ scores, below the least loaded', () => {
    const candidates = KINDS.map((kind) => endpointOf(engine, kind));
    const engineLoads = candidates.map((ep) => scraper.load(ep.id, NOW));
    const local = [0, 0, 0];
    const scores = SCORERS.queue({
      candidates,
      local,
      engine: engineLoads,
      load: estimatedLoads(candidates, local, engineLoads),
      prefixMatched: [0, 0, 0],
      prefixTotal: 0,
      sessionKey: undefined,
      settings: ROUTING_DEFAULTS,
    });
    const [loadless, busy, quiet] = [scores[0]!, scores[1]!, scores[2]!];
    expect(quiet).toBe(1);
    expect(busy).toBeLessThan(1);
    expect(loadless).toBeCloseTo((busy + quiet) / 2, 10);
  });
});
