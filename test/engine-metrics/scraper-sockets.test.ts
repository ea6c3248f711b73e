/**
 * The scraper over real sockets on 127.0.0.1, with its default fetch: two simulators (vLLM `/metrics`)
 * and one server that accepts the scrape and never answers. Bounds are generous for a busy machine.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { systemClock, systemScheduler } from '../../src/core/clock.js';
import { type Endpoint, type EngineLoad, type PoolSpec } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { EngineMetricsScraper, type ScrapeResult } from '../../src/engine-metrics/scraper.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const TIMEOUT_MS = 1500;
const POOL: PoolSpec = {
  name: 'llm',
  engine: 'vllm',
  servedModelName: 'sim-model',
  capabilities: ['chat'],
  resilience: RESILIENCE_DEFAULTS,
  routing: { ...ROUTING_DEFAULTS, engineMetrics: { enabled: true, intervalMs: 100, timeoutMs: TIMEOUT_MS, staleAfterMs: 10_000 } },
};

let busySim: SimServer;
let idleSim: SimServer;
let hung: http.Server;
let hungRequests = 0;
let endpoints: { busy: Endpoint; idle: Endpoint; hung: Endpoint };
let scraper: EngineMetricsScraper;
/** Every finished scrape, with the requests the hung server had received by then. */
const events: Array<{ endpoint: string; result: ScrapeResult; hungRequests: number }> = [];
const load = new AbortController();
const streams: Array<Promise<RawResponse>> = [];

const endpoint = (id: string, url: string): Endpoint => ({ id, pool: 'llm', url: new URL(url), weight: 1 });

beforeAll(async () => {
  // Two batch slots: three long streams make 2 running and 1 waiting.
  [busySim, idleSim] = await Promise.all([startTestSim({ itlMs: 20, maxNumSeqs: 2 }), startTestSim()]);
  hung = http.createServer(() => {
    hungRequests++;
  });
  await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve));
  endpoints = {
    busy: endpoint('ns/busy', busySim.url),
    idle: endpoint('ns/idle', idleSim.url),
    hung: endpoint('ns/hung', `http://127.0.0.1:${(hung.address() as AddressInfo).port}`),
  };
  scraper = new EngineMetricsScraper({
    endpoints: { snapshot: () => [endpoints.busy, endpoints.idle, endpoints.hung] },
    pools: () => [POOL],
    scheduler: systemScheduler,
    now: () => systemClock.now(),
    localCount: () => 0,
    onScrape: (_pool, endpoint, result) => events.push({ endpoint, result, hungRequests }),
  });
  scraper.start();
});

afterAll(async () => {
  scraper.stop();
  load.abort();
  await Promise.all(streams);
  hung.closeAllConnections();
  await Promise.all([busySim.close(), idleSim.close(), new Promise((resolve) => hung.close(resolve))]);
});

const results = (id: string): ScrapeResult[] => events.filter((e) => e.endpoint === id).map((e) => e.result);

describe('EngineMetricsScraper over real sockets', () => {
  it('reads the simulators while the hung replica times out, one scrape of it at a time', async () => {
    await waitFor(() => results(endpoints.hung.id).includes('timeout'), 'the hung replica to time out', TIMEOUT_MS + 10_000);
    const first = events.findIndex((e) => e.endpoint === endpoints.hung.id);
    const before = events.slice(0, first);
    // While the hung scrape waited out its timeout, the others went on every ~100 ms.
    expect(before.filter((e) => e.endpoint === endpoints.busy.id && e.result === 'ok').length).toBeGreaterThanOrEqual(3);
    expect(before.filter((e) => e.endpoint === endpoints.idle.id && e.result === 'ok').length).toBeGreaterThanOrEqual(3);
    expect(events[first]?.hungRequests).toBe(1);
    expect(scraper.load(endpoints.hung.id)).toBeUndefined();
    expect(scraper.load(endpoints.idle.id)).toMatchObject({ waiting: 0, running: 0, kvCacheUsage: 0, localAtSample: 0 });
  });

  it('sees the load of slow streams on the busy simulator and none on the other', async () => {
    for (let i = 0; i < 3; i++) {
      streams.push(
        rawRequest(`${busySim.url}/v1/chat/completions`, {
          body: { messages: [{ role: 'user', content: `long story ${i}` }], stream: true, max_tokens: 5000, ignore_eos: true },
          signal: load.signal,
        }),
      );
    }
    await waitFor(() => busySim.engine.numRunning === 2 && busySim.engine.numWaiting === 1, 'the simulator to run 2 and queue 1');
    // KV blocks are held once a sequence's prefill is done, so a scrape during the prefill still reads 0.
    const busy = (): EngineLoad | undefined => scraper.load(endpoints.busy.id);
    await waitFor(() => busy()?.running === 2 && busy()?.waiting === 1 && (busy()?.kvCacheUsage ?? 0) > 0, 'the scraper to see 2 running, 1 waiting and KV cache in use', 10_000);
    expect(busy()).toMatchObject({ running: 2, waiting: 1 });
    expect(scraper.load(endpoints.idle.id)).toMatchObject({ waiting: 0, running: 0 });
    expect([...scraper.samples()].map((s) => s.endpoint).sort()).toEqual([endpoints.busy.id, endpoints.idle.id]);
  });
});
