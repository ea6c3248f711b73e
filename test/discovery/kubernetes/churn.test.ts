/**
 * A long-running router under churn, in Kubernetes mode against the fake API server: what it keeps
 * per pool and per replica goes when discovery drops the pool or the replica, at that change — not
 * when someone opens /status, not at a later timer.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { endpointSlice, eventually, llamaCluster, modelDeployment, modelPool, only, servedBy, startKubeRouter } from '../../helpers/kube-env.js';

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
});
