/**
 * SGLang with `--enable-priority-scheduling` writes `sglang:num_queue_reqs` and
 * `sglang:num_running_reqs` twice: the total under `priority=""`, and again per priority
 * (`priority="0"`, `priority="1"`, …). Summing every series counted each request twice, so such a
 * replica looked twice as busy as it was. Scraped over a real socket on 127.0.0.1 with the scraper's
 * default fetch, the replica must read at its totals.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { systemScheduler } from '../../src/core/clock.js';
import { type Endpoint, type PoolSpec } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { EngineMetricsScraper, type ScrapeResult } from '../../src/engine-metrics/scraper.js';

const LABELS = 'engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"';
/** Six waiting (two at priority 0, four at priority 1) and three running (all at priority 0). */
const PAGE = [
  '# HELP sglang:num_running_reqs The number of running requests.',
  '# TYPE sglang:num_running_reqs gauge',
  `sglang:num_running_reqs{${LABELS},priority=""} 3.0`,
  `sglang:num_running_reqs{${LABELS},priority="0"} 3.0`,
  `sglang:num_running_reqs{${LABELS},priority="1"} 0.0`,
  '# HELP sglang:num_queue_reqs The number of requests in the waiting queue.',
  '# TYPE sglang:num_queue_reqs gauge',
  `sglang:num_queue_reqs{${LABELS},priority=""} 6.0`,
  `sglang:num_queue_reqs{${LABELS},priority="0"} 2.0`,
  `sglang:num_queue_reqs{${LABELS},priority="1"} 4.0`,
  '# HELP sglang:token_usage The token usage.',
  '# TYPE sglang:token_usage gauge',
  `sglang:token_usage{${LABELS},priority=""} 0.25`,
  '',
].join('\n');

const NOW = 1_000;
const POOL: PoolSpec = {
  name: 'qwen',
  engine: 'sglang',
  servedModelName: 'Qwen/Qwen3-8B',
  capabilities: ['chat'],
  resilience: RESILIENCE_DEFAULTS,
  routing: { ...ROUTING_DEFAULTS, engineMetrics: { enabled: true, intervalMs: 1_000, timeoutMs: 5_000, staleAfterMs: 10_000 } },
};

let server: http.Server;
let endpoint: Endpoint;
let scraper: EngineMetricsScraper;
const results: ScrapeResult[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    res.writeHead(req.url === '/metrics' ? 200 : 404, { 'content-type': 'text/plain; version=0.0.4' });
    res.end(req.url === '/metrics' ? PAGE : '');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = { id: 'ns/qwen-0', pool: POOL.name, url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), weight: 1 };
  scraper = new EngineMetricsScraper({
    endpoints: { snapshot: () => [endpoint] },
    pools: () => [POOL],
    scheduler: systemScheduler,
    now: () => NOW,
    localCount: () => 0,
    onScrape: (_pool, _endpoint, result) => results.push(result),
  });
  await scraper.runOnce();
});

afterAll(async () => {
  scraper.stop();
  await new Promise((resolve) => server.close(resolve));
});

describe('an SGLang replica with priority scheduling', () => {
  it('is read at its totals, each request counted once', () => {
    expect(results).toEqual(['ok']);
    expect(scraper.load(endpoint.id, NOW)).toMatchObject({ waiting: 6, running: 3, kvCacheUsage: 0.25 });
  });
});
