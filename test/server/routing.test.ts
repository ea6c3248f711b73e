/**
 * Smart routing over real sockets, against simulator replicas: prefix and session affinity, engine
 * metrics steering around load this router did not send, sheddable requests under saturation, and
 * fallback deployments. Which replica answered is read from the simulator's `x-sim-replica` header.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { type RunningRouter } from '../../src/main.js';
import { createRng } from '../../src/sim/prng.js';
import { type SimOptions } from '../../src/sim/options.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawRequest, type RawResponse } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter, type TestRouterOptions } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The replica name each simulator sends in `x-sim-replica`. */
const names = new WeakMap<SimServer, string>();
const nameOf = (sim: SimServer | undefined): string => names.get(sim as SimServer) ?? '';

async function sims(count: number, overrides: Partial<SimOptions> = {}, model = 'served/llm'): Promise<SimServer[]> {
  const name = (i: number): string => `${model.split('/')[1]}-${i}`;
  const started = await Promise.all(Array.from({ length: count }, (_, i) => startTestSim({ model: [model], name: name(i), ...overrides })));
  started.forEach((sim, i) => names.set(sim, name(i)));
  cleanups.push(() => Promise.all(started.map((s) => s.close())));
  return started;
}

async function gateway(endpoints: string[], routing: object = {}, extra: Partial<TestRouterOptions> = {}): Promise<TestRouter<RunningRouter>> {
  const g = await startTestRouter({
    pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints, routing }],
    deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
    random: createRng(7),
    ...extra,
  });
  cleanups.push(() => g.close());
  return g;
}

const SYSTEM_A = 'You are the billing assistant of Example Corp. Answer with care, cite the invoice line. '.repeat(12);
const SYSTEM_B = 'You are a terse code reviewer. Point at the line, say what is wrong, suggest the fix. '.repeat(12);

function chat(g: TestRouter<RunningRouter>, messages: object[], extra: RawRequest & { body?: object } = {}): Promise<RawResponse> {
  return rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
    ...extra,
    headers: { authorization: `Bearer ${KEY}`, ...extra.headers },
    body: { model: 'llm', messages, max_tokens: 4, ...extra.body },
  });
}

const replicaOf = (res: RawResponse): string => String(res.headers['x-sim-replica']);
/** A request that keeps a batch slot for a long time (the caller aborts it). */
const longStream = (url: string, signal: AbortSignal, headers: Record<string, string> = {}, model = 'served/llm'): Promise<RawResponse> =>
  rawRequest(url, { headers, signal, body: { model, messages: [{ role: 'user', content: 'a long story' }], max_tokens: 6000, ignore_eos: true, stream: true } });

describe('prefix affinity', () => {
  it('keeps requests that share a long system prompt on one replica, and its engine reuses the cached prefix', async () => {
    const replicas = await sims(3);
    const g = await gateway(replicas.map((r) => r.url));
    const seen = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const res = await chat(g, [
        { role: 'system', content: SYSTEM_A },
        { role: 'user', content: `question ${i}` },
      ]);
      expect(res.status).toBe(200);
      seen.add(replicaOf(res));
    }
    expect(seen.size).toBe(1);
    const text = await adminMetrics(g);
    expect(metricSum(text, 'modelgate_prefix_blocks_total', { result: 'hit' })).toBeGreaterThan(7 * 10);
    const holder = replicas.find((r) => r.engine.stats.prefixHits > 0);
    expect(holder?.engine.stats.prefixHits).toBeGreaterThan(0);
    expect(replicas.filter((r) => r.engine.stats.promptTokens > 0)).toHaveLength(1);
  });

  it('follows a conversation: each turn goes where the turns before it went', async () => {
    const replicas = await sims(3);
    const g = await gateway(replicas.map((r) => r.url));
    for (const system of [SYSTEM_A, SYSTEM_B]) {
      const messages: object[] = [{ role: 'system', content: system }];
      const seen = new Set<string>();
      for (let turn = 0; turn < 4; turn++) {
        messages.push({ role: 'user', content: `turn ${turn}: and what about the next line item on that invoice?` });
        const res = await chat(g, messages);
        seen.add(replicaOf(res));
        messages.push({ role: 'assistant', content: `reply ${turn}` });
      }
      expect(seen.size).toBe(1);
    }
  });

  it('spreads the same prompts when the profile leaves prefix out (control)', async () => {
    const replicas = await sims(3);
    const g = await gateway(
      replicas.map((r) => r.url),
      { scorers: [{ name: 'outstanding' }] },
    );
    const seen = new Set<string>();
    for (let i = 0; i < 12; i++)
      seen.add(
        replicaOf(
          await chat(g, [
            { role: 'system', content: SYSTEM_A },
            { role: 'user', content: `q${i}` },
          ]),
        ),
      );
    expect(seen.size).toBeGreaterThan(1);
  });

  it('spills a popular prompt to other replicas once its holder is more than maxLoadGap busier (the load guard)', async () => {
    const replicas = await sims(3, { itlMs: 20 });
    const g = await gateway(
      replicas.map((r) => r.url),
      { prefix: { maxLoadGap: 2 } },
    );
    const warm = await chat(g, [
      { role: 'system', content: SYSTEM_A },
      { role: 'user', content: 'warm up' },
    ]);
    const holder = replicaOf(warm);
    const load = new AbortController();
    const streams = Array.from({ length: 9 }, (_, i) =>
      chat(
        g,
        [
          { role: 'system', content: SYSTEM_A },
          { role: 'user', content: `stream ${i}` },
        ],
        { signal: load.signal, body: { max_tokens: 6000, ignore_eos: true, stream: true } },
      ),
    );
    await waitFor(() => replicas.reduce((n, r) => n + r.engine.numRunning, 0) === 9, 'nine streams running');
    const running = Object.fromEntries(replicas.map((r) => [nameOf(r), r.engine.numRunning]));
    load.abort();
    await Promise.all(streams);
    expect(running[holder]).toBeGreaterThanOrEqual(3);
    expect(Math.max(...Object.values(running)) - Math.min(...Object.values(running))).toBeLessThanOrEqual(3);
  });
});

describe('session affinity', () => {
  it('pins a session to one replica and spreads different sessions', async () => {
    const replicas = await sims(3);
    const g = await gateway(replicas.map((r) => r.url));
    const homes = new Set<string>();
    // Sessions map to replicas by rendezvous hashing over the replicas' addresses (random ports): 12
    // sessions missed one of 3 replicas about 2% of the time (3 × (2/3)^12). New sessions are tried
    // (at least 12, each pinned) until every replica is someone’s home, up to 48 (a miss then about 1 in 10^8).
    for (let s = 0; s < 48 && (s < 12 || homes.size < 3); s++) {
      const seen = new Set<string>();
      for (let i = 0; i < 3; i++) seen.add(replicaOf(await chat(g, [{ role: 'user', content: `s${s} m${i}` }], { headers: { 'x-session-id': `session-${s}` } })));
      expect(seen.size).toBe(1);
      homes.add([...seen][0] as string);
    }
    expect(homes.size).toBe(3);
  });

  it('reads the header the pool names', async () => {
    const replicas = await sims(3);
    const g = await gateway(
      replicas.map((r) => r.url),
      { session: { header: 'x-conversation' } },
    );
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) seen.add(replicaOf(await chat(g, [{ role: 'user', content: `m${i}` }], { headers: { 'x-conversation': 'c-42' } })));
    expect(seen.size).toBe(1);
  });
});

describe('engine metrics', () => {
  const fastScrape = { engineMetrics: { intervalMs: 100, timeoutMs: 200 } };

  it('steers away from a replica loaded by someone else (another router), which local counts cannot see', async () => {
    const [busy, quiet] = await sims(2, { itlMs: 50, maxNumSeqs: 4 });
    const g = await gateway([busy!.url, quiet!.url], fastScrape);
    const load = new AbortController();
    const direct = Array.from({ length: 6 }, () => longStream(`${busy!.url}/v1/chat/completions`, load.signal));
    await waitFor(() => busy!.engine.numRunning === 4 && busy!.engine.numWaiting === 2, 'the busy replica to run 4 and queue 2');
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_engine_requests', { endpoint: busy!.url, state: 'waiting' }) === 2, 'the router to scrape the load', 10_000);
    const picks = [];
    for (let i = 0; i < 6; i++) picks.push(replicaOf(await chat(g, [{ role: 'user', content: `q${i}` }])));
    load.abort();
    await Promise.all(direct);
    expect(picks).toEqual(Array(6).fill(nameOf(quiet)));
    const text = await adminMetrics(g);
    expect(metricSum(text, 'modelgate_engine_scrapes_total', { result: 'ok' })).toBeGreaterThan(2);
    expect(metricSum(text, 'modelgate_engine_kv_cache_usage_ratio', { endpoint: busy!.url })).toBeGreaterThan(0);
  });
});

describe('engine metrics: what the operator is told', () => {
  it("logs once when a replica's scrapes start failing, with why, and once when they work again", async () => {
    // an engine whose /metrics answers 503 until the test lets it answer its page
    let up = false;
    const engine = http.createServer((req, res) => {
      req.resume();
      if (req.url !== '/metrics') return void res.writeHead(404).end();
      if (!up) return void res.writeHead(503).end('warming up');
      res.writeHead(200, { 'content-type': 'text/plain' }).end('vllm:num_requests_waiting{model_name="m"} 0\nvllm:num_requests_running{model_name="m"} 1\n');
    });
    await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => engine.close(() => resolve())));
    const url = `http://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    const g = await gateway([url], { engineMetrics: { intervalMs: 100, timeoutMs: 200 } });
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_engine_scrapes_total', { result: 'error' }) >= 3, 'three failed scrapes', 10_000);
    up = true;
    await waitFor(() => g.logs.some((l) => l.includes('engine metrics scrape works again')), 'the recovery to be logged', 10_000);
    const failed = g.logs.filter((l) => l.includes('engine metrics scrape failed')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ level: 40, component: 'engine-metrics', pool: 'llm', endpoint: url, result: 'error', error: '/metrics answered HTTP 503' });
    const recovered = JSON.parse(g.logs.find((l) => l.includes('engine metrics scrape works again')) ?? '{}') as { failed?: number };
    expect(recovered.failed).toBeGreaterThanOrEqual(3);
  });
});

describe('priorities', () => {
  const keysYaml = `- name: tester\n  key: ${KEY}\n- name: batch\n  key: sk-batch-0123456789\n  priority: sheddable\n- name: ops\n  key: sk-ops-0123456789\n  priority: critical\n`;
  const auth = (key: string): Record<string, string> => ({ authorization: `Bearer ${key}` });

  it('turns sheddable requests away with 429 request_shed when the engines report every replica saturated', async () => {
    const [sim] = await sims(1, { itlMs: 50, maxNumSeqs: 1 });
    const g = await gateway([sim!.url], { engineMetrics: { intervalMs: 100, timeoutMs: 200 }, saturation: { queueDepth: 3 } }, { keysYaml });
    const load = new AbortController();
    const direct = Array.from({ length: 4 }, () => longStream(`${sim!.url}/v1/chat/completions`, load.signal));
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_engine_requests', { state: 'waiting' }) === 3, 'the router to see 3 waiting', 10_000);
    const shed = await chat(g, [{ role: 'user', content: 'x' }], { headers: auth('sk-batch-0123456789') });
    const lowered = await chat(g, [{ role: 'user', content: 'x' }], { headers: { 'x-modelgate-priority': 'sheddable' } });
    const notRaised = await chat(g, [{ role: 'user', content: 'x' }], { headers: { ...auth('sk-batch-0123456789'), 'x-modelgate-priority': 'critical' } });
    const bad = await chat(g, [{ role: 'user', content: 'x' }], { headers: { 'x-modelgate-priority': 'urgent' } });
    // the three turned away are demand the pool could not take: 3 a minute, before any request held a replica (1 s each)
    expect(metricSum(await adminMetrics(g), 'modelgate_pool_turned_away_requests', { pool: 'llm' })).toBe(0.05);
    // a standard request is not shed: it reaches the engine (and waits there; cut it short)
    const standard = await chat(g, [{ role: 'user', content: 'x' }], { abortAfterMs: 300 });
    load.abort();
    await Promise.all(direct);
    for (const res of [shed, lowered, notRaised]) {
      expect(res.status).toBe(429);
      expect(res.headers['retry-after']).toBe('1');
      expect(JSON.parse(res.body)).toEqual({ error: { message: expect.stringContaining('sheddable') as unknown, type: 'rate_limit_error', param: null, code: 'request_shed' } });
    }
    expect(bad.status).toBe(400);
    expect((JSON.parse(bad.body) as { error: object }).error).toMatchObject({ code: 'invalid_request', param: 'x-modelgate-priority' });
    expect(standard.error?.code).toBe('CLIENT_ABORT');
    const metrics = await adminMetrics(g);
    expect(metricSum(metrics, 'modelgate_rejected_requests_total', { reason: 'shed' })).toBe(3);
    expect(g.logs.some((l) => l.includes('"priority":"sheddable"'))).toBe(true);
  });

  /** A router whose pool has one replica of one slot, taken by a long stream until `hold` is aborted. */
  async function oneSlotTaken(resilience: object): Promise<{ g: TestRouter<RunningRouter>; hold: AbortController; holder: Promise<unknown> }> {
    const [sim] = await sims(1, { itlMs: 5 });
    const g = await startTestRouter({
      pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints: [sim!.url], resilience: { maxConcurrencyPerReplica: 1, ...resilience } }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
      keysYaml,
    });
    cleanups.push(() => g.close());
    const hold = new AbortController();
    const holder = longStream(`${g.router.apiUrl}/v1/chat/completions`, hold.signal, auth(KEY), 'llm');
    await waitFor(() => sim!.engine.numRunning === 1, 'the slot to be taken');
    return { g, hold, holder };
  }

  it('with a concurrency limit: sheddable gets 429 at once, critical is served before the standard requests queued ahead of it', async () => {
    const { g, hold, holder } = await oneSlotTaken({ queue: { maxSize: 10, timeoutMs: 10_000 } });
    const order: string[] = [];
    const queued = [chat(g, [{ role: 'user', content: 's1' }]).then((r) => order.push(`s1:${r.status}`)), chat(g, [{ role: 'user', content: 's2' }]).then((r) => order.push(`s2:${r.status}`))];
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_queue_depth') === 2, 'two standard requests queued');
    const critical = chat(g, [{ role: 'user', content: 'c' }], { headers: auth('sk-ops-0123456789') }).then((r) => order.push(`c:${r.status}`));
    await waitFor(async () => metricSum(await adminMetrics(g), 'modelgate_queue_depth') === 3, 'the critical request queued');
    const shed = await chat(g, [{ role: 'user', content: 'b' }], { headers: auth('sk-batch-0123456789') });
    expect(shed.status).toBe(429);
    expect((JSON.parse(shed.body) as { error: { code: string } }).error.code).toBe('request_shed');
    hold.abort();
    await holder;
    await Promise.all([...queued, critical]);
    expect(order).toEqual(['c:200', 's1:200', 's2:200']);
  });

  it('counts the sheddable requests it turned away in the pool’s demand (the autoscaling signal), not only what it runs', async () => {
    const { g, hold, holder } = await oneSlotTaken({});
    for (let i = 0; i < 3; i++) expect((await chat(g, [{ role: 'user', content: `b${i}` }], { headers: auth('sk-batch-0123456789') })).status).toBe(429);
    const metrics = await adminMetrics(g);
    const labels = { pool: 'llm' };
    // three turned away within the minute, before any request gave back a replica's slot (1 s each): 3/60 × 1
    expect(metricSum(metrics, 'modelgate_pool_turned_away_requests', labels)).toBe(0.05);
    expect(metricSum(metrics, 'modelgate_pool_requests_in_flight', labels)).toBe(1);
    expect(metricSum(metrics, 'modelgate_pool_demand_requests', labels)).toBe(1.05);
    hold.abort();
    await holder;
  });
});

describe('fallbacks', () => {
  async function withFallback(primaryEndpoints: string[], resilience: object = {}): Promise<{ g: TestRouter<RunningRouter>; backup: SimServer }> {
    const [backup] = await sims(1, {}, 'served/backup');
    const g = await startTestRouter({
      pools: [
        { name: 'main', servedModelName: 'served/llm', endpoints: primaryEndpoints, resilience },
        { name: 'spare', servedModelName: 'served/backup', endpoints: [backup!.url] },
      ],
      deployments: [
        { id: 'llm', model: 'llm', targets: [{ pool: 'main' }], fallbacks: ['backup'] },
        { id: 'backup', model: 'backup-model', targets: [{ pool: 'spare' }] },
      ],
    });
    cleanups.push(() => g.close());
    return { g, backup: backup! };
  }

  it('sends a request to the fallback deployment when its own pool has no ready replica, with the fallback’s model name', async () => {
    const { g, backup } = await withFallback([]);
    const res = await chat(g, [{ role: 'user', content: 'hi' }]);
    expect(res.status).toBe(200);
    expect(replicaOf(res)).toBe(nameOf(backup));
    const text = await adminMetrics(g);
    // counted with an empty from_pool: no pool of the deployment had a ready replica at all
    expect(metricSum(text, 'modelgate_fallbacks_total', { from_deployment: 'llm', from_pool: '', to_deployment: 'backup', to_pool: 'spare' })).toBe(1);
    expect(g.logs.some((l) => l.includes('"fallback":"backup"') && l.includes('"pool":"spare"'))).toBe(true);
  });

  it('moves on when every breaker of its pool is open, including when a failed attempt opened the last one', async () => {
    const [dead] = await sims(1, { fault: 'status=502' });
    const { g, backup } = await withFallback([dead!.url], { breaker: { failureThreshold: 1, cooldownMs: 60_000 }, retries: { maxRetries: 2, initialBackoffMs: 1, maxBackoffMs: 2 } });
    const first = await chat(g, [{ role: 'user', content: 'hi' }]);
    expect(first.status).toBe(200);
    expect(replicaOf(first)).toBe(nameOf(backup));
    const second = await chat(g, [{ role: 'user', content: 'again' }]);
    expect(replicaOf(second)).toBe(nameOf(backup));
    const text = await adminMetrics(g);
    expect(metricSum(text, 'modelgate_fallbacks_total', { from_deployment: 'llm', from_pool: 'main', to_deployment: 'backup', to_pool: 'spare' })).toBe(2);
    expect(metricSum(text, 'modelgate_requests_total', { pool: 'spare', code: '200' })).toBe(2);
  });

  it('never falls back once the first byte reached the client: a stream that breaks ends with the SSE error event', async () => {
    const [dying] = await sims(1, { fault: 'die-after=3' });
    const { g, backup } = await withFallback([dying!.url]);
    const res = await chat(g, [{ role: 'user', content: 'hi' }], { body: { stream: true, max_tokens: 50, ignore_eos: true } });
    expect(res.status).toBe(200);
    expect(res.body).toContain('"error"');
    expect(backup.engine.stats.promptTokens).toBe(0);
  });
});
