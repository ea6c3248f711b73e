/**
 * Scale from zero in Kubernetes mode, against the fake API server: a pool whose Service has no ready
 * endpoint holds its requests (counted, shown in the ModelPool status, dropped when their clients
 * leave) and sends every one of them to the first pod that turns ready — none before.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { FakeKubeApi } from '../../helpers/fake-kube-api.js';
import { rawRequest } from '../../helpers/http.js';
import { endpointSlice, eventually, modelDeployment, modelPool, startKubeRouter, startPods } from '../../helpers/kube-env.js';
import { KEY, scrapedMetric } from '../../helpers/router.js';

const BOUND_MS = 5000;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const POOL = { pool: 'models/llama', pool_namespace: 'models', pool_name: 'llama' };
const held = (adminUrl: string): Promise<number> => scrapedMetric(adminUrl, 'modelgate_pool_requests_held', POOL);
const heldEvents = (adminUrl: string, event: string): Promise<number> => scrapedMetric(adminUrl, 'modelgate_pool_held_requests_total', { ...POOL, event });

function chat(apiUrl: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${apiUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    ...(signal ? { signal } : {}),
  });
}

/** A ModelPool `llama` that scales from zero (holding requests up to `maxWaitMs`), and its deployment `llama-prod` (alias `default`). */
function applyColdPool(fake: FakeKubeApi, maxWaitMs: number): void {
  const pool = modelPool('llama', 'llama');
  fake.apply('modelpools', { ...pool, spec: { ...(pool.spec as object), resilience: { scaleFromZero: { enabled: true, maxWaitMs } } } });
  fake.apply('modeldeployments', modelDeployment('llama-prod', 'llama-3', ['default'], [{ pool: 'llama' }]));
}

/** Resolves once the router answers /readyz with 200. */
function untilReady(adminUrl: string): Promise<number> {
  return eventually(
    () => rawRequest(`${adminUrl}/readyz`).then((r) => r.status),
    (s) => s === 200,
    'the router to become ready',
    BOUND_MS,
  );
}

describe('Kubernetes mode: two status writers', () => {
  it('two routers under different Leases (two installs) do not trade status writes as fast as the API server answers: each backs off, and says why', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    applyColdPool(fake, 3_000);
    const first = await startKubeRouter(fake, { identity: 'router-a', token: 'router-a' });
    cleanups.push(() => first.close());
    const second = await startKubeRouter(fake, { identity: 'router-b', token: 'router-b', leaseName: 'another-install' });
    cleanups.push(() => second.close());
    await Promise.all([untilReady(first.router.adminUrl), untilReady(second.router.adminUrl)]);
    await eventually(
      () => fake.statusWrites.filter((w) => w.resource === 'modelpools').length,
      (n) => n > 0,
      'the pool status written',
      BOUND_MS,
    );
    // one request held in the first router (3 s, then 503): its status says 1 waits, the second's 0
    const pools = (): number => fake.statusWrites.filter((w) => w.resource === 'modelpools').length;
    const before = pools();
    const answer = await chat(first.router.apiUrl);
    expect(answer.status).toBe(503);
    // both wrote (the status did change), and neither as fast as the other's write came back: without
    // pacing, over a thousand PATCHes in those 3 s
    const during = pools() - before;
    expect(new Set(fake.statusWrites.slice(-during).map((w) => w.token))).toEqual(new Set(['router-a', 'router-b']));
    expect(during).toBeLessThanOrEqual(12);
    const warned = [...first.logs, ...second.logs].filter((l) => l.includes('another writer keeps replacing this status'));
    expect(warned.length).toBeGreaterThan(0);
  }, 20_000);
});

describe('Kubernetes mode: scale from zero', () => {
  it('holds requests while the pool has no ready pod, drops the clients that leave, and sends the rest to the first ready pod', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    const [pod] = await startPods(['pod-a']);
    cleanups.push(() => pod!.sim.close());
    applyColdPool(fake, 60_000);
    // The pod runs (its model loading) but is not ready: listed, not routable.
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pod!, ready: false }]));
    const gateway = await startKubeRouter(fake);
    cleanups.push(() => gateway.close());
    const { apiUrl, adminUrl } = gateway.router;
    await untilReady(adminUrl);

    // At zero the model is still listed.
    const models = await rawRequest(`${apiUrl}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect((JSON.parse(models.body) as { data: Array<{ id: string }> }).data.map((m) => m.id)).toContain('default');

    const answers = Array.from({ length: 20 }, () => chat(apiUrl));
    const leaving = Array.from({ length: 3 }, () => new AbortController());
    const gaveUp = leaving.map((c) => chat(apiUrl, c.signal).catch((err: unknown) => err));
    await eventually(
      () => held(adminUrl),
      (n) => n === 23,
      '23 requests to be held',
      BOUND_MS,
    );
    expect(await scrapedMetric(adminUrl, 'modelgate_pool_demand_requests', POOL)).toBe(23);
    // The status writer shows them, with the condition.
    const status = await eventually(
      () => fake.get('modelpools', 'models', 'llama')?.status as { requestsHeld?: number; requestsWaiting?: number; conditions?: Array<{ type: string; status: string; reason: string }> } | undefined,
      (s) => s?.requestsHeld === 23,
      'the ModelPool status to count the held requests',
      BOUND_MS,
    );
    expect(status?.requestsWaiting).toBe(23);
    expect(status?.conditions?.find((c) => c.type === 'RequestsHeld')).toMatchObject({ status: 'True', reason: 'WaitingForReplica' });
    expect(gateway.logs.some((l) => l.includes('pool has no ready replica: holding its requests'))).toBe(true);

    // Clients that give up leave the queue at once, and are counted.
    for (const c of leaving) c.abort();
    expect((await Promise.all(gaveUp)).map((e) => (e as { name?: string }).name)).toEqual(['AbortError', 'AbortError', 'AbortError']);
    await eventually(
      () => held(adminUrl),
      (n) => n === 20,
      'the 3 abandoned requests to leave the queue',
      BOUND_MS,
    );
    expect(await heldEvents(adminUrl, 'abandoned')).toBe(3);
    expect(pod!.sim.engine.stats.promptTokens).toBe(0); // nothing was sent to the pod while it was not ready

    // The pod turns ready: all 20 are served, by it.
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pod! }]));
    const responses = await Promise.all(answers);
    expect(responses.map((r) => r.status)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(new Set(responses.map((r) => r.headers.get('x-sim-replica')))).toEqual(new Set(['pod-a']));
    for (const r of responses) expect(((await r.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    expect(await heldEvents(adminUrl, 'served')).toBe(20);
    expect(await heldEvents(adminUrl, 'held')).toBe(23);
    expect(await held(adminUrl)).toBe(0);
    await eventually(
      () => fake.get('modelpools', 'models', 'llama')?.status as { requestsHeld?: number; conditions?: Array<{ type: string; status: string }> } | undefined,
      (s) => s?.requestsHeld === 0 && s.conditions?.find((c) => c.type === 'RequestsHeld')?.status === 'False',
      'the ModelPool status to show nothing held',
      BOUND_MS,
    );
  });

  it('answers the requests held for a pool at once when its ModelPool is deleted, not when their wait runs out', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    // a wait far beyond the test's bound: only the deletion can answer the requests in time
    applyColdPool(fake, 600_000);
    const gateway = await startKubeRouter(fake);
    cleanups.push(() => gateway.close());
    const { apiUrl, adminUrl } = gateway.router;
    await untilReady(adminUrl);
    const answers = Array.from({ length: 5 }, () => chat(apiUrl));
    await eventually(
      () => held(adminUrl),
      (n) => n === 5,
      '5 requests to be held',
      BOUND_MS,
    );

    fake.remove('modelpools', 'models', 'llama');
    // The client: a 503 it may retry, saying why, in OpenAI's envelope.
    const responses = await Promise.all(answers);
    expect(responses.map((r) => r.status)).toEqual([503, 503, 503, 503, 503]);
    for (const r of responses) {
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
      const { error } = (await r.json()) as { error: { code: string; type: string; message: string } };
      expect(error).toMatchObject({ code: 'no_ready_replica', type: 'server_error' });
      expect(error.message).toContain('pool serving this model was removed');
    }
    // The operator: a warning names the pool and how many requests it answered, and the held episode's
    // line closes it (the removed pool's series leave /metrics with it, as every gone pool's do).
    const warning = gateway.logs.find((l) => l.includes('pool removed: the requests waiting for it were answered'));
    expect(JSON.parse(warning!)).toMatchObject({ level: 40, pool: 'models/llama', requests: 5 });
    expect(JSON.parse(gateway.logs.find((l) => l.includes('no request held now'))!)).toMatchObject({ pool: 'models/llama', served: 0, rejected: 5 });
    await eventually(
      () => rawRequest(`${adminUrl}/metrics`).then((r) => r.body.split('\n').filter((l) => l.includes('pool="models/llama"'))),
      (lines) => lines.length === 0,
      'the removed pool to leave the metrics',
      BOUND_MS,
    );
  });

  it('answers 503 at once for a pool at zero that does not opt in', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    fake.apply('modelpools', modelPool('llama', 'llama'));
    fake.apply('modeldeployments', modelDeployment('llama-prod', 'llama-3', ['default'], [{ pool: 'llama' }]));
    const gateway = await startKubeRouter(fake);
    cleanups.push(() => gateway.close());
    await untilReady(gateway.router.adminUrl);
    const res = await chat(gateway.router.apiUrl);
    expect(res.status).toBe(503);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('no_ready_replica');
  });
});
