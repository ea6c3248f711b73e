/**
 * Two ModelDeployments of one name in two namespaces (team-a/llama and team-b/llama) are two
 * deployments to the operator: their series, access-log lines and goodput objectives stay apart. The
 * `deployment` label is `<namespace>/<name>` in Kubernetes mode, as the `pool` label is; with the bare
 * name both teams' requests were counted in one series, the gauge of ready replicas showed whichever
 * deployment was listed last, and a request for team-b's deployment was judged by team-a's SLO.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { defaultSimOptions } from '../../../src/sim/options.js';
import { startSim } from '../../../src/sim/server.js';
import { FakeKubeApi } from '../../helpers/fake-kube-api.js';
import { rawRequest } from '../../helpers/http.js';
import { endpointSlice, eventually, modelDeployment, modelPool, only, servedBy, startKubeRouter, startPods } from '../../helpers/kube-env.js';
import { KEY, metricSum } from '../../helpers/router.js';
import { writeFile } from 'node:fs/promises';

const BOUND_MS = 5000;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A router watching team-a and team-b, once team-b's deployment (the younger) is served by its pod. */
async function routerServingTeamB(fake: FakeKubeApi): Promise<Awaited<ReturnType<typeof startKubeRouter>>> {
  const gateway = await startKubeRouter(fake, { namespaces: ['team-a', 'team-b'] });
  cleanups.push(() => gateway.close());
  await eventually(
    () => servedBy(gateway.router, 'llama-b', 1),
    (c) => only(c, 'pod-b'),
    'team-b’s deployment to be served',
    BOUND_MS,
  );
  return gateway;
}

describe('Kubernetes mode: deployments of one name in two namespaces', () => {
  it('keep their own series, access-log identity and SLO', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    const [fast] = await startPods(['pod-a']);
    cleanups.push(() => fast!.sim.close());
    // team-b's replica takes 50 ms to its first token: inside the config's objective (2 s), outside team-b's own (10 ms)
    const slow = await startSim({ ...defaultSimOptions(), host: '127.0.0.251', port: 0, name: 'pod-b', model: ['served/llama'], itlMs: 1, ttftMs: 50 });
    cleanups.push(() => slow.close());
    const slowPod = { name: 'pod-b', ip: '127.0.0.251', port: Number(new URL(slow.url).port), sim: slow };
    for (const [namespace, pod] of [
      ['team-a', fast!],
      ['team-b', slowPod],
    ] as const) {
      fake.apply('modelpools', modelPool('llama', 'llama', { namespace }));
      fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod }], { namespace }));
    }
    // team-a's is older: it keeps the contested name `llama`; each is asked for by its own model name
    fake.apply('modeldeployments', modelDeployment('llama', 'llama-a', [], [{ pool: 'llama' }], { namespace: 'team-a', created: '2024-01-01T00:00:00Z' }));
    fake.apply('modeldeployments', {
      ...modelDeployment('llama', 'llama-b', [], [{ pool: 'llama' }], { namespace: 'team-b', created: '2024-02-01T00:00:00Z' }),
      spec: { model: 'llama-b', targets: [{ pool: 'llama' }], slo: { ttftMs: 10, itlMs: 1 } },
    });
    const gateway = await routerServingTeamB(fake);
    const before = (await rawRequest(`${gateway.router.adminUrl}/metrics`)).body;
    const servedB = metricSum(before, 'modelgate_requests_total', { deployment: 'team-b/llama', code: '200' });
    expect(servedB).toBeGreaterThan(0); // the wait's own requests

    expect(only(await servedBy(gateway.router, 'llama-a', 2), 'pod-a')).toBe(true);
    expect(only(await servedBy(gateway.router, 'llama-b', 3), 'pod-b')).toBe(true);

    const metrics = (await rawRequest(`${gateway.router.adminUrl}/metrics`)).body;
    const requests = (deployment: string): number => metricSum(metrics, 'modelgate_requests_total', { route: 'chat', deployment, code: '200' });
    expect(requests('team-a/llama')).toBe(2);
    expect(requests('team-b/llama')).toBe(servedB + 3);
    expect(metrics).toContain('modelgate_requests_total{route="chat",deployment="team-a/llama",pool="team-a/llama",code="200"} 2');
    expect(metrics).not.toMatch(/deployment="llama"/);
    expect(metrics).toMatch(/^modelgate_deployment_ready_endpoints\{deployment="team-a\/llama"\} 1$/m);
    expect(metrics).toMatch(/^modelgate_deployment_ready_endpoints\{deployment="team-b\/llama"\} 1$/m);
    // each judged by its own objective
    const goodput = (deployment: string, result: string): number => metricSum(metrics, 'modelgate_goodput_requests_total', { deployment, result });
    expect([goodput('team-a/llama', 'within'), goodput('team-a/llama', 'outside')]).toEqual([2, 0]);
    expect([goodput('team-b/llama', 'within'), goodput('team-b/llama', 'outside')]).toEqual([0, servedB + 3]);

    // the access log names each deployment as the metrics do
    const lines = gateway.logs
      .map((l) => JSON.parse(l) as { msg?: string; status?: number; model?: string; deployment?: string })
      .filter((l) => l.msg === 'request' && l.status === 200 && l.model?.startsWith('llama-'));
    expect(new Set(lines.map((l) => `${l.model} ${l.deployment}`))).toEqual(new Set(['llama-a team-a/llama', 'llama-b team-b/llama']));
  });

  it('a key’s per-deployment limit under the contested name counts the deployment that holds it, not the other namespace’s too', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    const pods = await startPods(['pod-a', 'pod-b']);
    for (const pod of pods) cleanups.push(() => pod.sim.close());
    for (const [namespace, pod] of [
      ['team-a', pods[0]!],
      ['team-b', pods[1]!],
    ] as const) {
      fake.apply('modelpools', modelPool('llama', 'llama', { namespace }));
      fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod }], { namespace }));
    }
    fake.apply('modeldeployments', modelDeployment('llama', 'llama-a', [], [{ pool: 'llama' }], { namespace: 'team-a', created: '2024-01-01T00:00:00Z' }));
    fake.apply('modeldeployments', modelDeployment('llama', 'llama-b', [], [{ pool: 'llama' }], { namespace: 'team-b', created: '2024-02-01T00:00:00Z' }));
    const gateway = await routerServingTeamB(fake);
    // `llama` is team-a's (the older): the key may send it 2 requests a minute
    await writeFile(gateway.keysFile, `- name: tester\n  key: ${KEY}\n  limits: { deployments: { llama: { requestsPerMinute: 2 } } }\n`);
    await eventually(
      () => gateway.logs.some((l) => l.includes('API keys reloaded')),
      (done) => done,
      'the keys file to be reloaded',
      BOUND_MS,
    );
    // team-b's deployment is named llama too, but does not hold the name: its requests are not counted under it
    expect(await servedBy(gateway.router, 'llama-b', 4)).toEqual(new Map([['pod-b', 4]]));
    expect(await servedBy(gateway.router, 'llama-a', 3)).toEqual(
      new Map([
        ['pod-a', 2],
        ['status 429', 1],
      ]),
    );
  });
});
