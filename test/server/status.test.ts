/**
 * The status page's data: the recent-traffic ring (buckets, percentiles, error window, expiry) and the
 * snapshot built from injected sources (readiness, health, breaker, engine sample age, queue, held);
 * and /status.json and /status on a router's admin app after real traffic.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import request from 'supertest';
import { buildConfig } from '../../src/config/load.js';
import { poolResolver } from '../../src/config/pool-settings.js';
import { type EngineLoad, type PoolSpec } from '../../src/core/types.js';
import { type Router } from '../../src/main.js';
import { buildStatusSnapshot, type BreakerState, RECENT_TRAFFIC_DEFAULTS, RecentTraffic, type StatusSnapshot, type StatusSources } from '../../src/server/status.js';
import { staticDiscovery } from '../../src/wiring/static-discovery.js';
import { buildTestRouter, chatSetup, KEY, type TestRouter } from '../helpers/router.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

describe('RecentTraffic', () => {
  it('counts requests and 5xx per pool over the last minute, and ignores requests without a pool', () => {
    let now = 0;
    const recent = new RecentTraffic(() => now);
    recent.recordRequest('chat', 'd', 'a', 200, 0.05);
    recent.recordRequest('chat', 'd', 'a', 503, 0.01);
    recent.recordRequest('chat', 'd', 'a', 429, 0.01);
    recent.recordRequest('models', '', '', 401, 0.001);
    now = 30_000;
    recent.recordRequest('chat', 'd', 'a', 500, 0.2);
    expect(recent.summary('a').recent).toEqual({ windowSeconds: 60, requests: 4, errors: 2, errorRate: 0.5 });
    expect(recent.summary('').recent.requests).toBe(0);
    // the first three fall out of the error window after a minute, but stay in the latency buckets
    now = 65_000;
    expect(recent.summary('a').recent).toEqual({ windowSeconds: 60, requests: 1, errors: 1, errorRate: 1 });
    expect(recent.summary('a').latency.reduce((n, b) => n + b.requests, 0)).toBe(4);
  });

  it('keeps one bucket per 10 s for five minutes, oldest first, the current one last; older buckets expire', () => {
    let now = 0;
    const recent = new RecentTraffic(() => now);
    for (let i = 0; i < 10; i++) recent.recordRequest('chat', 'd', 'p', 200, 0.1);
    now = 20_000;
    recent.recordRequest('chat', 'd', 'p', 200, 2);
    const { latency } = recent.summary('p');
    expect(latency).toHaveLength(RECENT_TRAFFIC_DEFAULTS.buckets);
    expect(latency.at(-1)!.requests).toBe(1);
    expect(latency.at(-3)!.requests).toBe(10);
    expect(latency.at(-2)).toEqual({ requests: 0, p50Ms: null, p95Ms: null });
    // percentiles are a bin's upper bound: within 25 % above the true value
    expect(latency.at(-3)!.p50Ms).toBeGreaterThanOrEqual(100);
    expect(latency.at(-3)!.p50Ms).toBeLessThanOrEqual(125);
    expect(latency.at(-1)!.p95Ms).toBeGreaterThanOrEqual(2000);
    expect(latency.at(-1)!.p95Ms).toBeLessThanOrEqual(2500);
    // five minutes on, the ring slot of the first bucket is reused: its ten are gone, the one at 20 s is still there
    now = 300_000;
    recent.recordRequest('chat', 'd', 'p', 200, 0.1);
    expect(
      recent
        .summary('p')
        .latency.map((b) => b.requests)
        .filter((n) => n > 0),
    ).toEqual([1, 1]);
    now = 700_000;
    expect(recent.summary('p').latency.every((b) => b.requests === 0)).toBe(true);
  });

  it('tells p50 from p95 within one bucket', () => {
    const recent = new RecentTraffic(() => 5);
    for (let i = 0; i < 90; i++) recent.recordRequest('chat', 'd', 'p', 200, 0.01);
    for (let i = 0; i < 10; i++) recent.recordRequest('chat', 'd', 'p', 200, 1);
    const last = recent.summary('p').latency.at(-1)!;
    expect(last.p50Ms).toBeLessThanOrEqual(12.5);
    expect(last.p95Ms).toBeGreaterThanOrEqual(1000);
  });

  it('forgets pools no longer listed', () => {
    const recent = new RecentTraffic(() => 0);
    recent.recordRequest('chat', 'd', 'gone', 200, 0.1);
    recent.retain(new Set(['other']));
    expect(recent.summary('gone').recent.requests).toBe(0);
  });
});

/** Two pools as the router resolves them: `a` scales from zero with health checks and limits concurrency; `b` has health checks off. */
function specs(): PoolSpec[] {
  const config = buildConfig(
    {
      auth: { keysFile: 'keys.yaml' },
      pools: [
        {
          name: 'a',
          servedModelName: 'm',
          endpoints: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000'],
          resilience: { maxConcurrencyPerReplica: 4, queue: { maxSize: 50 }, scaleFromZero: { enabled: true }, healthCheck: { enabled: true } },
        },
        { name: 'b', servedModelName: 'm', endpoints: ['http://10.0.1.1:8000'], resilience: { healthCheck: { enabled: false } } },
      ],
      deployments: [{ id: 'dep', model: 'chat', targets: [{ pool: 'a', weight: 3 }, { pool: 'b' }] }],
    },
    '/tmp',
  );
  const [a, b] = staticDiscovery(config, 0, poolResolver({ resilience: config.resilience, routing: config.routing })).pools();
  // the key sent upstream (read from `backendKeyFile` at load) must never show
  return [{ ...a!, backendKey: 'sk-backend-secret' }, b!];
}

function sources(overrides: Partial<StatusSources> = {}): StatusSources {
  const pools = specs();
  // 10.0.0.1 passes its checks, 10.0.0.2 fails them, 10.0.0.3 has not been probed
  const probed = new Map([
    ['http://10.0.0.1:8000', true],
    ['http://10.0.0.2:8000', false],
  ]);
  const breakers: Array<{ endpoint: string; state: BreakerState }> = [
    { endpoint: 'http://10.0.0.1:8000', state: 'half-open' },
    { endpoint: 'http://10.0.1.1:8000', state: 'open' },
  ];
  const load: EngineLoad = { waiting: 3, running: 7, kvCacheUsage: 0.42, at: 9_250, localAtSample: 1 };
  return {
    now: () => 10_000,
    wallNow: () => Date.UTC(2030, 0, 2, 3, 4, 5),
    catalog: () => ({
      deployments: () => [
        {
          id: 'dep',
          model: 'chat',
          aliases: [],
          targets: [
            { pool: 'a', weight: 3 },
            { pool: 'b', weight: 1 },
          ],
          fallbacks: ['other'],
          created: 0,
        },
        { id: 'dep', namespace: 'team-b', model: 'chat', aliases: [], targets: [{ pool: 'team-b/c', weight: 1 }], fallbacks: [], created: 0 },
      ],
    }),
    pools: () => pools,
    endpoints: {
      snapshot: (pool) => (pool === 'a' ? ['1', '2', '3'] : ['1']).map((n) => ({ id: pool === 'a' ? `http://10.0.0.${n}:8000` : 'http://10.0.1.1:8000', pool, url: new URL('http://x'), weight: 1 })),
    },
    health: { isHealthy: (id, unknown = true) => probed.get(id) ?? unknown },
    breakers: { states: () => breakers },
    inFlight: { count: (id) => (id === 'http://10.0.0.1:8000' ? 2 : 0), poolCount: (pool) => (pool === 'a' ? 2 : 0) },
    engine: { samples: () => [{ endpoint: 'http://10.0.0.1:8000', load }] },
    admission: { depth: (pool) => (pool === 'a' ? 5 : 0) },
    held: (pool) => (pool === 'a' ? 1 : 0),
    prefixIndexBlocks: () => 1234,
    notReady: () => [],
    recent: new RecentTraffic(() => 10_000),
    servedModel: { of: () => undefined },
    ...overrides,
  };
}

describe('buildStatusSnapshot', () => {
  it('shows each replica with its readiness, health, breaker, in-flight count and engine sample with its age', () => {
    const snapshot = buildStatusSnapshot(sources());
    const [a, b] = snapshot.pools;
    expect(a!.replicas).toEqual([
      { id: 'http://10.0.0.1:8000', ready: true, health: 'passing', breaker: 'half-open', inFlight: 2, engine: { waiting: 3, running: 7, kvCacheUsage: 0.42, ageMs: 750 } },
      { id: 'http://10.0.0.2:8000', ready: false, health: 'failing', breaker: 'closed', inFlight: 0, engine: null },
      // a pool scaling from zero with health checks counts an unprobed replica as not ready, as the picker does
      { id: 'http://10.0.0.3:8000', ready: false, health: 'unprobed', breaker: 'closed', inFlight: 0, engine: null },
    ]);
    expect(b!.replicas).toEqual([{ id: 'http://10.0.1.1:8000', ready: true, health: 'off', breaker: 'open', inFlight: 0, engine: null }]);
  });

  it('sums each pool: ready replicas, in flight, queue with its limit, held requests; and lists deployments', () => {
    const snapshot = buildStatusSnapshot(sources());
    const [a, b] = snapshot.pools;
    expect({ ...a!, replicas: undefined, latency: undefined }).toEqual({
      name: 'a',
      engine: 'vllm',
      readyReplicas: 1,
      inFlight: 2,
      queue: { depth: 5, limit: 50 },
      held: 1,
      recent: { windowSeconds: 60, requests: 0, errors: 0, errorRate: null },
      latency: undefined,
      servedModelMismatch: null,
      replicas: undefined,
    });
    expect(b!.queue).toEqual({ depth: 0, limit: null });
    expect(snapshot).toMatchObject({
      version: 1,
      generatedAt: '2030-01-02T03:04:05.000Z',
      notReady: [],
      prefixIndexBlocks: 1234,
      bucketSeconds: 10,
      deployments: [
        {
          name: 'dep',
          model: 'chat',
          targets: [
            { pool: 'a', weight: 3 },
            { pool: 'b', weight: 1 },
          ],
          fallbacks: ['other'],
        },
        // Kubernetes mode: a deployment of the same name in another namespace, told apart by it
        { name: 'dep', namespace: 'team-b', model: 'chat', targets: [{ pool: 'team-b/c', weight: 1 }], fallbacks: [] },
      ],
    });
    expect(snapshot.deployments[0]).not.toHaveProperty('namespace'); // static mode: none
  });

  it('shows a pool whose replicas said they do not serve its servedModelName: when the latest did, which, and every one', () => {
    const at = Date.UTC(2030, 0, 2, 3, 4, 1);
    const snapshot = buildStatusSnapshot(
      sources({ servedModel: { of: (pool) => (pool.name === 'a' ? { at, replica: 'http://10.0.0.2:8000', replicas: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000'] } : undefined) } }),
    );
    expect(snapshot.pools[0]!.servedModelMismatch).toEqual({ seenAt: '2030-01-02T03:04:01.000Z', replica: 'http://10.0.0.2:8000', replicas: ['http://10.0.0.1:8000', 'http://10.0.0.2:8000'] });
    expect(snapshot.pools[1]!.servedModelMismatch).toBeNull();
  });

  it('carries the recent traffic of each pool and nothing secret', () => {
    const recent = new RecentTraffic(() => 10_000);
    recent.recordRequest('chat', 'dep', 'a', 502, 0.3);
    recent.recordRequest('chat', 'dep', 'a', 200, 0.3);
    const snapshot = buildStatusSnapshot(sources({ recent, notReady: () => ['shutting down'] }));
    expect(snapshot.pools[0]!.recent).toEqual({ windowSeconds: 60, requests: 2, errors: 1, errorRate: 0.5 });
    expect(snapshot.pools[0]!.latency.at(-1)!.requests).toBe(2);
    expect(snapshot.notReady).toEqual(['shutting down']);
    expect(JSON.stringify(snapshot)).not.toContain('sk-backend-secret');
  });
});

describe('the admin app serves /status.json and /status', () => {
  let upstream: RecordingUpstream;
  let gateway: TestRouter<Router>;
  beforeAll(async () => {
    upstream = await startUpstream();
    gateway = await buildTestRouter(chatSetup([upstream.url]));
  });
  afterAll(async () => {
    await gateway.close();
    await upstream.close();
  });

  it('answers /status.json with the snapshot, counting the requests answered so far', async () => {
    for (let i = 0; i < 3; i++) {
      await request(gateway.router.api)
        .post('/v1/chat/completions')
        .set({ Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' })
        .send('{"model":"llm","messages":[{"role":"user","content":"secret prompt"}]}')
        .expect(200);
    }
    const res = await request(gateway.router.admin).get('/status.json').expect(200);
    expect(res.headers['cache-control']).toBe('no-store');
    const body = res.body as StatusSnapshot;
    expect(body.deployments).toEqual([{ name: 'llm-prod', model: 'llm', targets: [{ pool: 'llm', weight: 100 }], fallbacks: [] }]);
    expect(body.pools).toHaveLength(1);
    expect(body.pools[0]).toMatchObject({ name: 'llm', readyReplicas: 1, held: 0, queue: { depth: 0 }, recent: { requests: 3, errors: 0, errorRate: 0 } });
    expect(body.pools[0]!.replicas).toEqual([{ id: upstream.url, ready: true, health: 'off', breaker: 'closed', inFlight: 0, engine: null }]);
    expect(res.text).not.toContain('secret prompt');
    expect(res.text).not.toContain(KEY);
  });

  it('answers /status with the HTML page under a CSP that allows no external asset', async () => {
    const res = await request(gateway.router.admin).get('/status').expect(200);
    expect(res.headers['content-type']).toMatch(/^text\/html/);
    expect(res.headers['content-security-policy']).toMatch(/^default-src 'none'; style-src 'sha256-[^']+'; script-src 'sha256-[^']+'; connect-src 'self'/);
    expect(res.text).toContain(`data-replica="${upstream.url}"`);
    expect(res.text).not.toMatch(/(src|href)="(https?:)?\/\//);
  });
});
