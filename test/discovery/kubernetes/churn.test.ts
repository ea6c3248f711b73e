/**
 * A long-running router under churn, in Kubernetes mode against the fake API server: what it keeps
 * per pool goes when discovery drops the pool, at that change — not when someone opens /status; what
 * it keeps per replica goes once discovery has not listed the replica for a minute (a readiness blip
 * keeps it).
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { rawRequest } from '../../helpers/http.js';
import { endpointSlice, eventually, llamaCluster, modelDeployment, modelPool, only, servedBy, startKubeRouter, startPods } from '../../helpers/kube-env.js';
import { KEY, metricSum } from '../../helpers/router.js';

const BOUND_MS = 5000;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('Kubernetes mode: churn', () => {
  it("drops a deleted pool's recent-traffic ring when the pool leaves discovery, without anyone opening /status", async () => {
    const { fake, pods } = await llamaCluster(['pod-a'], cleanups);
    fake.apply('modelpools', modelPool('canary', 'canary'));
    fake.apply('modeldeployments', modelDeployment('canary-prod', 'canary-model', [], [{ pool: 'canary' }]));
    fake.apply('endpointslices', endpointSlice('canary-abc', 'canary', [{ pod: pods[0]! }]));
    const gateway = await startKubeRouter(fake);
    cleanups.push(() => gateway.close());
    const { router } = gateway;
    await eventually(
      () => servedBy(router, 'canary-model', 2),
      (c) => only(c, 'pod-a'),
      'the canary pool to serve',
      BOUND_MS,
    );
    await eventually(
      () => servedBy(router, 'default', 2),
      (c) => only(c, 'pod-a'),
      'the llama pool to serve',
      BOUND_MS,
    );
    expect(router.recent.size).toBe(2);
    fake.remove('modeldeployments', 'models', 'canary-prod');
    fake.remove('modelpools', 'models', 'canary');
    await eventually(
      () => servedBy(router, 'canary-model', 1),
      (c) => only(c, 'status 404'),
      'the canary deployment to be gone',
      BOUND_MS,
    );
    await eventually(
      () => servedBy(router, 'default', 1),
      (c) => only(c, 'pod-a'),
      'llama still serving',
      BOUND_MS,
    );
    expect(router.recent.size).toBe(1);
  });

  /** Two pods, the slice listing pod-a only; pod-a has served a prompt of 4 prefix blocks (64 characters each) and remembers them. */
  async function podAServed(forgetEndpointsAfterMs?: number) {
    const { fake, pods } = await llamaCluster(['pod-a'], cleanups);
    const [next] = await startPods(['pod-b'], pods[0]!.port);
    cleanups.push(() => next!.sim.close());
    const gateway = await startKubeRouter(fake, forgetEndpointsAfterMs === undefined ? {} : { forgetEndpointsAfterMs });
    cleanups.push(() => gateway.close());
    const { router } = gateway;
    const chat = (): Promise<string> =>
      rawRequest(`${router.apiUrl}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${KEY}` },
        body: { model: 'default', messages: [{ role: 'user', content: 'x'.repeat(300) }], max_tokens: 1 },
      }).then((r) => String(r.headers['x-sim-replica'] ?? r.status));
    await eventually(chat, (r) => r === 'pod-a', 'pod-a to serve', BOUND_MS);
    const podA = `models/pod-a:${pods[0]!.port}`;
    const scrape = async (): Promise<string> => (await rawRequest(`${router.adminUrl}/metrics`)).body;
    expect([...router.breakers.states()].map((b) => b.endpoint)).toEqual([podA]);
    expect(metricSum(await scrape(), 'modelgate_prefix_index_blocks', {})).toBeGreaterThan(0);
    return { fake, pods, next: next!, router, podA, scrape };
  }

  it("forgets a replaced pod's breaker, prefix memory and attempt series once it has been out of every snapshot past the grace (none here), not at a later timer", async () => {
    const { fake, pods, next, router, scrape } = await podAServed(0);
    // the rollout: pod-a replaced by pod-b
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: next }]));
    await eventually(
      () => servedBy(router, 'default', 1),
      (c) => only(c, 'pod-b'),
      'pod-b to serve',
      BOUND_MS,
    );
    expect([...router.breakers.states()].map((b) => b.endpoint)).toEqual([`models/pod-b:${pods[0]!.port}`]);
    const text = await scrape();
    expect(text).not.toContain('pod-a');
    expect(metricSum(text, 'modelgate_prefix_index_blocks', {})).toBe(0); // pod-b has had only 'hi': no whole block
  });

  it('keeps the breaker and prefix memory of a pod out of its readiness for a moment (the grace is a minute)', async () => {
    const { fake, pods, next, router, podA, scrape } = await podAServed();
    const blocks = metricSum(await scrape(), 'modelgate_prefix_index_blocks', {});
    // pod-a fails its readiness probe: out of the snapshot, pod-b serves alone
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]!, ready: false }, { pod: next }]));
    const ready = async (): Promise<number> => metricSum(await scrape(), 'modelgate_pool_ready_endpoints', { pool: 'models/llama' });
    await eventually(ready, (n) => n === 1, 'pod-a out of the snapshot', BOUND_MS);
    // a scrape meanwhile keeps its series (its attempts, its breaker)
    const during = (await scrape()).split('\n').filter((line) => line.includes('pod-a'));
    expect(during.some((line) => line.startsWith('modelgate_upstream_attempts_total'))).toBe(true);
    expect(during.some((line) => line.startsWith('modelgate_breaker_state'))).toBe(true);
    // and passes it again
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }, { pod: next }]));
    await eventually(ready, (n) => n === 2, 'pod-a back in the snapshot', BOUND_MS);
    expect([...router.breakers.states()].map((b) => b.endpoint)).toContain(podA);
    // what pod-a's engine still caches is still what the router predicts (the 'hi' chats add no whole block)
    expect(metricSum(await scrape(), 'modelgate_prefix_index_blocks', {})).toBe(blocks);
  });
});
