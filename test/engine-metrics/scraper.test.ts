import { afterEach, describe, expect, it } from '@jest/globals';
import { type Endpoint, type Engine, type PoolSpec, type RoutingSettings } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { EngineMetricsScraper, errorText, type ScrapeResult } from '../../src/engine-metrics/scraper.js';
import { ScrapeError } from '../../src/engine-metrics/fetch-text.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

interface Call {
  url: string;
  timeoutMs: number;
  signal: AbortSignal;
  at: number;
  answer: (text: string, status?: number) => Promise<void>;
  fail: (err: Error) => Promise<void>;
}

/** A fetchText whose answers the test gives, counting the fetches in flight at once. */
class FakeFetch {
  readonly calls: Call[] = [];
  inFlight = 0;
  maxInFlight = 0;

  constructor(private readonly time: FakeTime) {}

  readonly fetchText = (url: URL, timeoutMs: number, signal?: AbortSignal): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      let settled = false;
      const settle = (): boolean => {
        if (settled) return false;
        settled = true;
        this.inFlight--;
        return true;
      };
      signal?.addEventListener('abort', () => settle() && reject(new Error('aborted')), { once: true });
      this.calls.push({
        url: url.href,
        timeoutMs,
        signal: signal as AbortSignal,
        at: this.time.now(),
        answer: async (text, status = 200) => {
          if (settle()) resolve({ status, text });
          await flush();
        },
        fail: async (err) => {
          if (settle()) reject(err);
          await flush();
        },
      });
    });

  callsTo(endpoint: Endpoint): Call[] {
    return this.calls.filter((c) => c.url.startsWith(endpoint.url.href));
  }

  last(endpoint: Endpoint): Call {
    const call = this.callsTo(endpoint).at(-1);
    if (!call) throw new Error(`${endpoint.id} was never scraped`);
    return call;
  }
}

function pool(name: string, engine: Engine = 'vllm', metrics: Partial<RoutingSettings['engineMetrics']> = {}): PoolSpec {
  return {
    name,
    engine,
    servedModelName: `served/${name}`,
    capabilities: ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: { ...ROUTING_DEFAULTS, engineMetrics: { ...ROUTING_DEFAULTS.engineMetrics, ...metrics } },
  };
}

let nextPort = 9000;
function endpoint(poolName: string): Endpoint {
  const port = nextPort++;
  return { id: `ns/${poolName}-${port}`, pool: poolName, url: new URL(`http://10.0.0.1:${port}`), weight: 1 };
}

const vllmPage = (waiting: number, running: number, kv = 0.5): string =>
  `# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} ${waiting}.0\nvllm:num_requests_running{engine="0",model_name="m"} ${running}.0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} ${kv}\n`;

const scrapers: EngineMetricsScraper[] = [];
afterEach(() => {
  for (const s of scrapers.splice(0)) s.stop();
});

function setup(pools: PoolSpec[], endpoints: Record<string, Endpoint[]>, maxConcurrent?: number) {
  const time = new FakeTime();
  const fetch = new FakeFetch(time);
  const results: Array<{ pool: string; endpoint: string; result: ScrapeResult; at: number }> = [];
  const local = new Map<string, number>();
  /** What the scraper said of replicas failing and recovering (the router logs it). */
  const said: string[] = [];
  const scraper = new EngineMetricsScraper({
    endpoints: { snapshot: (name) => endpoints[name] ?? [] },
    pools: () => pools,
    scheduler: time,
    now: () => time.now(),
    localCount: (id) => local.get(id) ?? 0,
    fetchText: fetch.fetchText,
    onScrape: (p, e, result) => results.push({ pool: p, endpoint: e, result, at: time.now() }),
    onFailing: (p, e, result, why) => said.push(`failing ${p} ${e} ${result}: ${why}`),
    onRecovered: (p, e, failed) => said.push(`recovered ${p} ${e} after ${failed}`),
    ...(maxConcurrent === undefined ? {} : { maxConcurrent }),
  });
  scrapers.push(scraper);
  return { time, fetch, results, local, scraper, said };
}

describe('EngineMetricsScraper: samples', () => {
  it('stores the load with the clock time and the local count read when the response arrived', async () => {
    const ep = endpoint('llm');
    const { time, fetch, scraper, local, results } = setup([pool('llm')], { llm: [ep] });
    local.set(ep.id, 1);
    const round = scraper.runOnce();
    const call = fetch.last(ep);
    expect(call.url).toBe(`${ep.url.origin}/metrics`);
    expect(call.timeoutMs).toBe(ROUTING_DEFAULTS.engineMetrics.timeoutMs);
    await time.advance(40);
    local.set(ep.id, 3);
    await call.answer(vllmPage(2, 5, 0.25));
    await round;
    expect(scraper.load(ep.id)).toEqual({ waiting: 2, running: 5, kvCacheUsage: 0.25, at: 40, localAtSample: 3 });
    expect([...scraper.samples()]).toEqual([{ pool: 'llm', endpoint: ep.id, load: scraper.load(ep.id) }]);
    expect(results).toEqual([{ pool: 'llm', endpoint: ep.id, result: 'ok', at: 40 }]);
  });

  it('serves a sample up to exactly staleAfterMs old, never after', async () => {
    const ep = endpoint('llm');
    const { time, fetch, scraper } = setup([pool('llm', 'vllm', { staleAfterMs: 3000 })], { llm: [ep] });
    const round = scraper.runOnce();
    await fetch.last(ep).answer(vllmPage(1, 1));
    await round;
    await time.advance(3000);
    expect(scraper.load(ep.id)?.waiting).toBe(1);
    expect([...scraper.samples()]).toHaveLength(1);
    await time.advance(1);
    expect(scraper.load(ep.id)).toBeUndefined();
    expect([...scraper.samples()]).toEqual([]);
  });

  it('uses the pool path, resolved against the endpoint URL', async () => {
    const ep = { ...endpoint('llm'), url: new URL('http://10.0.0.2:8080/base/') };
    const { fetch, scraper } = setup([pool('llm', 'sglang', { path: '/stats/prom' })], { llm: [ep] });
    void scraper.runOnce();
    await flush();
    expect(fetch.calls.map((c) => c.url)).toEqual(['http://10.0.0.2:8080/stats/prom']);
  });
});

describe('EngineMetricsScraper: a failed scrape drops the sample at once', () => {
  const failures: Array<{ name: string; result: ScrapeResult; why: string; fail: (call: Call, time: FakeTime) => Promise<void> }> = [
    { name: 'connection error', result: 'error', why: 'ECONNREFUSED', fail: (call) => call.fail(new Error('ECONNREFUSED')) },
    { name: 'non-2xx status', result: 'error', why: '/metrics answered HTTP 404', fail: (call) => call.answer('not found', 404) },
    { name: 'a page of another engine', result: 'unparsable', why: '/metrics has none of the vllm series the router reads', fail: (call) => call.answer('tgi_queue_size 3\n') },
    { name: 'no answer within timeoutMs', result: 'timeout', why: 'no whole answer within 500 ms', fail: (_call, time) => time.advance(500) },
    { name: 'the fetch gave up at its own deadline', result: 'timeout', why: 'no whole answer within 500 ms', fail: (call) => call.fail(new ScrapeError('SCRAPE_TIMEOUT', 'late')) },
    { name: 'a body over the cap', result: 'error', why: 'big', fail: (call) => call.fail(new ScrapeError('SCRAPE_BODY_TOO_LARGE', 'big')) },
  ];

  it.each(failures)('$name → $result; three in a row said once with why, and the recovery', async ({ result, why, fail }) => {
    const ep = endpoint('llm');
    const { time, fetch, scraper, results, said } = setup([pool('llm', 'vllm', { intervalMs: 1000, timeoutMs: 500, staleAfterMs: 3000 })], { llm: [ep] });
    const first = scraper.runOnce();
    await fetch.last(ep).answer(vllmPage(1, 1));
    await first;
    await time.advance(1000);
    const second = scraper.runOnce();
    const call = fetch.last(ep);
    expect(scraper.load(ep.id)).toBeDefined();
    await fail(call, time);
    await second;
    expect(scraper.load(ep.id)).toBeUndefined();
    expect([...scraper.samples()]).toEqual([]);
    expect(results.map((r) => r.result)).toEqual(['ok', result]);
    const scrape = async (answer: (call: Call) => Promise<void>): Promise<void> => {
      await time.advance(1000);
      const round = scraper.runOnce();
      await answer(fetch.last(ep));
      await round;
    };
    await scrape((c) => fail(c, time));
    expect(said).toEqual([]); // two in a row: not yet
    await scrape((c) => fail(c, time));
    expect(said).toEqual([`failing llm ${ep.id} ${result}: ${why}`]);
    await scrape((c) => fail(c, time)); // failing on is not said again
    await scrape((c) => c.answer(vllmPage(1, 1)));
    expect(said).toEqual([`failing llm ${ep.id} ${result}: ${why}`, `recovered llm ${ep.id} after 4`]);
  });

  it('a replica that fails now and then (every other scrape) is never said to be failing', async () => {
    const ep = endpoint('llm');
    const { time, fetch, scraper, said, results } = setup([pool('llm', 'vllm', { intervalMs: 100, timeoutMs: 1000 })], { llm: [ep] });
    for (let i = 0; i < 20; i++) {
      const round = scraper.runOnce();
      await (i % 2 ? fetch.last(ep).answer(vllmPage(0, 0)) : fetch.last(ep).answer('busy', 503));
      await round;
      await time.advance(100);
    }
    expect(results.filter((r) => r.result === 'error')).toHaveLength(10);
    expect(said).toEqual([]);
  });

  it('says why a connection refused at every address of a host name failed (an AggregateError, whose own message is empty)', () => {
    const refused = Object.assign(new AggregateError([new Error('connect ECONNREFUSED ::1:8000'), new Error('connect ECONNREFUSED 127.0.0.1:8000')]), { code: 'ECONNREFUSED' });
    expect(refused.message).toBe('');
    expect(errorText(refused)).toBe('connect ECONNREFUSED ::1:8000; connect ECONNREFUSED 127.0.0.1:8000');
    expect(errorText(Object.assign(new Error(''), { code: 'ECONNRESET' }))).toBe('ECONNRESET');
    expect(errorText('odd')).toBe('odd');
  });

  it('aborts the fetch of a timed-out scrape', async () => {
    const ep = endpoint('llm');
    const { time, fetch, scraper, results } = setup([pool('llm', 'vllm', { timeoutMs: 200 })], { llm: [ep] });
    const round = scraper.runOnce();
    const call = fetch.last(ep);
    await time.advance(199);
    expect(call.signal.aborted).toBe(false);
    await time.advance(1);
    await round;
    expect(call.signal.aborted).toBe(true);
    expect(results).toEqual([{ pool: 'llm', endpoint: ep.id, result: 'timeout', at: 200 }]);
    expect(fetch.inFlight).toBe(0);
  });

  it('times out even when an injected fetch ignores the abort signal', async () => {
    const ep = endpoint('llm');
    const time = new FakeTime();
    const results: ScrapeResult[] = [];
    const scraper = new EngineMetricsScraper({
      endpoints: { snapshot: () => [ep] },
      pools: () => [pool('llm', 'vllm', { timeoutMs: 300 })],
      scheduler: time,
      now: () => time.now(),
      localCount: () => 0,
      fetchText: () => new Promise(() => undefined),
      onScrape: (_p, _e, result) => results.push(result),
    });
    scrapers.push(scraper);
    const round = scraper.runOnce();
    await time.advance(300);
    await round;
    expect(results).toEqual(['timeout']);
  });
});

describe('EngineMetricsScraper: scheduling', () => {
  it('never scrapes a replica twice at once: a slow one is skipped while the others go on', async () => {
    const slow = endpoint('llm');
    const fast = endpoint('llm');
    const { time, fetch, scraper, results } = setup([pool('llm', 'vllm', { intervalMs: 100, timeoutMs: 1000 })], { llm: [slow, fast] });
    scraper.start();
    for (let t = 0; t < 5; t++) {
      await time.advance(100);
      await fetch.last(fast).answer(vllmPage(0, 1));
    }
    expect(fetch.callsTo(slow)).toHaveLength(1);
    expect(fetch.callsTo(fast).length).toBeGreaterThanOrEqual(5);
    expect(results.filter((r) => r.endpoint === fast.id).every((r) => r.result === 'ok')).toBe(true);
    await fetch.last(slow).answer(vllmPage(4, 1));
    expect(scraper.load(slow.id)?.waiting).toBe(4);
    await time.advance(100);
    expect(fetch.callsTo(slow)).toHaveLength(2);
  });

  it('keeps at most maxConcurrent scrapes in flight and scrapes the rest in order', async () => {
    const eps = Array.from({ length: 23 }, () => endpoint('llm'));
    const { fetch, scraper, results } = setup([pool('llm')], { llm: eps }, 5);
    const round = scraper.runOnce();
    await flush();
    expect(fetch.inFlight).toBe(5);
    for (let answered = 0; answered < eps.length; answered++) {
      expect(fetch.inFlight).toBe(Math.min(5, eps.length - answered));
      const call = fetch.calls[answered];
      if (!call) throw new Error(`scrape ${answered} never started`);
      await call.answer(vllmPage(0, 0));
    }
    await round;
    expect(fetch.calls.map((c) => c.url)).toEqual(eps.map((e) => `${e.url.origin}/metrics`));
    expect(fetch.maxInFlight).toBe(5);
    expect(results).toHaveLength(23);
  });

  it('scrapes each pool at its own interval (to the nearest tick), ticking at the smallest', async () => {
    const a = endpoint('a');
    const b = endpoint('b');
    const { time, fetch, scraper } = setup([pool('a', 'vllm', { intervalMs: 1000 }), pool('b', 'tgi', { intervalMs: 300 })], { a: [a], b: [b] });
    scraper.start();
    for (let t = 0; t <= 3000; t += 100) {
      for (const call of fetch.calls) await call.answer(call.url.startsWith(a.url.href) ? vllmPage(0, 0) : 'tgi_queue_size 0\n');
      await time.advance(100);
    }
    expect(fetch.callsTo(a).map((c) => c.at)).toEqual([0, 900, 1800, 2700]); // ticks every 300: 900 is nearer 1000 than 1200
    expect(fetch.callsTo(b).map((c) => c.at)).toEqual([0, 300, 600, 900, 1200, 1500, 1800, 2100, 2400, 2700, 3000]);
  });

  it('never scrapes a disabled pool or an openai pool', async () => {
    const on = endpoint('on');
    const off = endpoint('off');
    const api = endpoint('api');
    const { time, fetch, scraper } = setup([pool('on'), pool('off', 'vllm', { enabled: false }), pool('api', 'openai')], { on: [on], off: [off], api: [api] });
    scraper.start();
    for (let t = 0; t < 5; t++) {
      for (const call of fetch.calls) await call.answer(vllmPage(0, 0));
      await time.advance(1000);
    }
    expect(fetch.callsTo(on).length).toBeGreaterThanOrEqual(5);
    expect(fetch.callsTo(off)).toEqual([]);
    expect(fetch.callsTo(api)).toEqual([]);
  });

  it('forgets an endpoint that left every snapshot, cutting its scrape short', async () => {
    const stays = endpoint('llm');
    const leaves = endpoint('llm');
    const endpoints = { llm: [stays, leaves] };
    const { time, fetch, scraper, results } = setup([pool('llm', 'vllm', { intervalMs: 100, timeoutMs: 1000 })], endpoints);
    const first = scraper.runOnce();
    await fetch.last(stays).answer(vllmPage(0, 0));
    await fetch.last(leaves).answer(vllmPage(0, 0));
    await first;
    await time.advance(100);
    void scraper.runOnce();
    const pending = fetch.last(leaves);
    endpoints.llm = [stays];
    await time.advance(100);
    await scraper.runOnce();
    await flush();
    expect(pending.signal.aborted).toBe(true);
    expect(scraper.load(leaves.id)).toBeUndefined();
    expect([...scraper.samples()].map((s) => s.endpoint)).toEqual([stays.id]);
    expect(results.filter((r) => r.endpoint === leaves.id).map((r) => r.result)).toEqual(['ok']);
  });

  it('forgets how often a replica that left had failed: back, it starts counting again', async () => {
    const ep = endpoint('llm');
    const endpoints = { llm: [ep] };
    const { time, fetch, scraper, results, said } = setup([pool('llm', 'vllm', { intervalMs: 100, timeoutMs: 1000 })], endpoints);
    const failOnce = async (): Promise<void> => {
      const round = scraper.runOnce();
      await fetch.last(ep).answer('gone', 503);
      await round;
      await time.advance(100);
    };
    await failOnce();
    await failOnce();
    endpoints.llm = [];
    await scraper.runOnce();
    await time.advance(100);
    endpoints.llm = [ep];
    await failOnce();
    await failOnce();
    expect(results.filter((r) => r.result === 'error')).toHaveLength(4);
    expect(said).toEqual([]); // never three in a row since it came back
    await failOnce();
    expect(said).toEqual([`failing llm ${ep.id} error: /metrics answered HTTP 503`]);
  });

  it('drops the samples of a pool that gets disabled', async () => {
    const ep = endpoint('llm');
    const pools = [pool('llm')];
    const { time, fetch, scraper } = setup(pools, { llm: [ep] });
    const round = scraper.runOnce();
    await fetch.last(ep).answer(vllmPage(1, 1));
    await round;
    pools[0] = pool('llm', 'vllm', { enabled: false });
    await time.advance(1000);
    await scraper.runOnce();
    expect(scraper.load(ep.id)).toBeUndefined();
  });
});

describe('EngineMetricsScraper: stop', () => {
  it('clears its timer, aborts scrapes in flight, drops queued ones and starts no more', async () => {
    const eps = Array.from({ length: 3 }, () => endpoint('llm'));
    const { time, fetch, scraper, results } = setup([pool('llm')], { llm: eps }, 2);
    scraper.start();
    await time.advance(0);
    expect(fetch.calls).toHaveLength(2);
    scraper.stop();
    expect(time.pendingTimers).toBe(0);
    expect(fetch.calls.every((c) => c.signal.aborted)).toBe(true);
    await time.advance(10_000);
    await scraper.runOnce();
    expect(fetch.calls).toHaveLength(2);
    expect(fetch.inFlight).toBe(0);
    expect(results).toEqual([]);
  });

  it('resumes on start after stop', async () => {
    const ep = endpoint('llm');
    const { time, fetch, scraper } = setup([pool('llm')], { llm: [ep] });
    scraper.start();
    await time.advance(0);
    scraper.stop();
    scraper.start();
    await time.advance(0);
    expect(fetch.callsTo(ep)).toHaveLength(2);
  });
});
