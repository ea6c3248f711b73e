/**
 * The router in Kubernetes mode against a fake API server speaking the real protocol to the real
 * client-node, with simulator pods on loopback. Every change is observed through real requests to the
 * router within BOUND_MS (the resync interval here is 0.5 s; watch events usually land in milliseconds).
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { type RunningRouter } from '../../../src/main.js';
import { REPO_ROOT } from '../../helpers/helm.js';
import { FakeKubeApi } from '../../helpers/fake-kube-api.js';
import { rawRequest } from '../../helpers/http.js';
import { endpointSlice, eventually, llamaCluster, modelDeployment, modelPool, only, servedBy, startKubeRouter, startPods, type Pod } from '../../helpers/kube-env.js';
import { KEY, type TestRouter } from '../../helpers/router.js';

const BOUND_MS = 5000;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function cluster(podNames: string[], options: Parameters<typeof startKubeRouter>[1] = {}): Promise<{ fake: FakeKubeApi; pods: Pod[]; gateway: TestRouter<RunningRouter> }> {
  const { fake, pods } = await llamaCluster(podNames, cleanups);
  const gateway = await startKubeRouter(fake, options);
  cleanups.splice(2, 0, () => gateway.close()); // close the router before the fake and the pods
  await eventually(
    () => readyz(gateway.router),
    (s) => s === 200,
    'the router to become ready',
    BOUND_MS,
  );
  return { fake, pods, gateway };
}

const readyz = (router: RunningRouter): Promise<number> => rawRequest(`${router.adminUrl}/readyz`).then((r) => r.status);
const served = (router: RunningRouter, model = 'default'): Promise<Map<string, number>> => servedBy(router, model);
const WATCHED = ['endpointslices', 'modelpools', 'modeldeployments'] as const;
/** LIST requests (not watches) the fake API server received for `kind` in the namespace "models". */
const lists = (fake: FakeKubeApi, kind: (typeof WATCHED)[number]): number => fake.requests.filter((r) => r.method === 'GET' && !r.watch && r.path.endsWith(`/namespaces/models/${kind}`)).length;
const noFailures = (counts: Map<string, number>): boolean => [...counts.keys()].every((k) => !k.startsWith('status'));

describe('Kubernetes mode: discovery', () => {
  it('routes a ModelDeployment’s names to the ready pods of its pool’s Service', async () => {
    const { gateway } = await cluster(['pod-a', 'pod-b']);
    const counts = await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a', 'pod-b'),
      'both pods to serve',
      BOUND_MS,
    );
    expect(noFailures(counts)).toBe(true);
    for (const name of ['llama-prod', 'llama-3', 'default']) expect(only(await served(gateway.router, name), 'pod-a', 'pod-b') || (await served(gateway.router, name)).size > 0).toBe(true);
    const models = await rawRequest(`${gateway.router.apiUrl}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect((JSON.parse(models.body) as { data: Array<{ id: string }> }).data.map((m) => m.id).sort()).toEqual(['default', 'llama-3', 'llama-prod']);
  });

  it('scales up and down with the EndpointSlice', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    const [extra] = await startPods(['pod-c'], pods[0]!.port);
    cleanups.push(() => extra!.sim.close());
    fake.apply(
      'endpointslices',
      endpointSlice(
        'llama-abc',
        'llama',
        [...pods, extra!].map((pod) => ({ pod })),
      ),
    );
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a', 'pod-b', 'pod-c'),
      'the new pod to take traffic',
      BOUND_MS,
    );
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: extra! }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-c'),
      'removed pods to get no traffic',
      BOUND_MS,
    );
  });

  it('stops sending to a pod that goes NotReady, and to one that is terminating', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b', 'pod-c']);
    const [a, b, c] = pods;
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: a! }, { pod: b!, ready: false }, { pod: c!, terminating: true }]));
    await eventually(
      () => served(gateway.router),
      (counts) => only(counts, 'pod-a'),
      'only the ready, non-terminating pod to serve',
      BOUND_MS,
    );
  });

  it('follows a pod to its new IP', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    const [moved] = await startPods(['pod-b-moved'], pods[0]!.port);
    cleanups.push(() => moved!.sim.close());
    await pods[1]!.sim.close(); // the old address is gone
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }, { pod: pods[1]!, ip: moved!.ip }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a', 'pod-b-moved'),
      'traffic to the pod’s new address only',
      BOUND_MS,
    );
  });

  it('joins the slices of one Service and ignores a same-named Service in another namespace', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    fake.apply('endpointslices', endpointSlice('llama-def', 'llama', [{ pod: pods[1]! }]));
    fake.apply('endpointslices', endpointSlice('llama-xyz', 'llama', [{ pod: pods[1]! }], { namespace: 'elsewhere' }));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a', 'pod-b'),
      'both slices to serve',
      BOUND_MS,
    );
    fake.remove('endpointslices', 'models', 'llama-def');
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a'),
      'the other namespace’s slice not to count',
      BOUND_MS,
    );
  });
});

describe('Kubernetes mode: watch failures', () => {
  it('removes a ghost whose DELETE event was lost, at the next full relist', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    fake.apply('endpointslices', endpointSlice('llama-def', 'llama', [{ pod: pods[1]! }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a', 'pod-b'),
      'both pods',
      BOUND_MS,
    );
    fake.remove('endpointslices', 'models', 'llama-def', { silent: true });
    await pods[1]!.sim.close(); // a request routed to the ghost would fail
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a'),
      'the ghost to be dropped',
      BOUND_MS,
    );
  });

  it('relists after 410 Gone and sees what happened meanwhile', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.setDown(true);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[1]! }]));
    fake.compact();
    fake.setDown(false);
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-b'),
      'the change made during the outage',
      BOUND_MS,
    );
  });

  it('restarts a watch that failed with 5xx and carries on', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.failNext(3, 503, { watch: true });
    fake.dropWatches();
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a'),
      'the change after the 5xx',
      BOUND_MS,
    );
    await eventually(
      () => rawRequest(`${gateway.router.adminUrl}/metrics`).then((r) => r.body),
      (m) => /modelgate_discovery_watch_restarts_total\{kind="endpointslices",namespace="models"\} [1-9]/.test(m),
      'the restart to be counted',
      BOUND_MS,
    );
  });

  it('keeps serving the last known endpoints while the API server is down, says so, and recovers', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.setDown(true);
    const metrics = (): Promise<string> => rawRequest(`${gateway.router.adminUrl}/metrics`).then((r) => r.body);
    await eventually(metrics, (m) => m.includes('modelgate_discovery_watch_up{kind="endpointslices",namespace="models"} 0'), 'the watch to be reported down', BOUND_MS);
    const during = await served(gateway.router);
    expect(only(during, 'pod-a', 'pod-b')).toBe(true);
    expect(await readyz(gateway.router)).toBe(200);
    expect(gateway.logs.join('')).toContain('serving the last known state');
    fake.setDown(false);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-a'),
      'changes after the outage',
      BOUND_MS,
    );
    await eventually(metrics, (m) => m.includes('modelgate_discovery_watch_up{kind="endpointslices",namespace="models"} 1'), 'the watch to be reported up', BOUND_MS);
  });

  it('works through a slow API server', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.latencyMs = 150;
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[1]! }]));
    await eventually(
      () => served(gateway.router),
      (c) => only(c, 'pod-b'),
      'the change through a slow API',
      BOUND_MS,
    );
  });
});

describe('Kubernetes mode: readiness', () => {
  it('is not ready until every watch has synced; liveness never depends on the API', async () => {
    const fake = await FakeKubeApi.start();
    cleanups.push(() => fake.close());
    fake.setDown(true);
    const gateway = await startKubeRouter(fake);
    cleanups.push(() => gateway.close());
    const res = await rawRequest(`${gateway.router.adminUrl}/readyz`);
    expect(res.status).toBe(503);
    expect(res.body).toContain('has not synced');
    expect((await rawRequest(`${gateway.router.adminUrl}/livez`)).status).toBe(200);
    fake.setDown(false);
    await eventually(
      () => readyz(gateway.router),
      (s) => s === 200,
      'readiness after the first sync',
      BOUND_MS,
    );
  });

  it('answers a model it cannot know yet (its watches not listed) 503 to retry, not 404 "does not exist"', async () => {
    const { fake, pods } = await llamaCluster(['pod-a'], cleanups);
    fake.setDown(true);
    const gateway = await startKubeRouter(fake);
    cleanups.splice(2, 0, () => gateway.close());
    const chat = (model: string) =>
      rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 } });
    // a client reaching the pod directly (a port-forward, a NodePort), not through the Service that hides it
    const early = await chat('default');
    expect(early.status).toBe(503);
    expect(early.headers['retry-after']).toBe('2');
    expect(JSON.parse(early.body)).toMatchObject({ error: { code: 'no_ready_replica', message: 'The router is still loading its models; retry shortly.' } });
    fake.setDown(false);
    await eventually(
      () => served(gateway.router),
      (c) => only(c, pods[0]!.name),
      'the model served once the watches listed',
      BOUND_MS,
    );
    expect((await chat('no-such-model')).status).toBe(404);
  });
});

describe('Kubernetes mode: live CRD edits', () => {
  it('picks up an added alias, a changed weight, and a removed pool', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    fake.apply('endpointslices', endpointSlice('canary-abc', 'canary', [{ pod: pods[1]! }]));
    fake.apply('modelpools', modelPool('canary', 'canary'));
    fake.apply(
      'modeldeployments',
      modelDeployment(
        'llama-prod',
        'llama-3',
        ['default', 'fresh'],
        [
          { pool: 'llama', weight: 100 },
          { pool: 'canary', weight: 0 },
        ],
      ),
    );
    await eventually(
      () => served(gateway.router, 'fresh'),
      (c) => only(c, 'pod-a'),
      'the new alias, all weight on the first pool',
      BOUND_MS,
    );
    fake.apply(
      'modeldeployments',
      modelDeployment(
        'llama-prod',
        'llama-3',
        ['default', 'fresh'],
        [
          { pool: 'llama', weight: 0 },
          { pool: 'canary', weight: 100 },
        ],
      ),
    );
    await eventually(
      () => served(gateway.router, 'fresh'),
      (c) => only(c, 'pod-b'),
      'the weight moved to the canary pool',
      BOUND_MS,
    );
    const breakerSeries = async (pool: string): Promise<string[]> =>
      (await rawRequest(`${gateway.router.adminUrl}/metrics`)).body.split('\n').filter((l) => l.startsWith(`modelgate_breaker_state{pool="${pool}"`));
    expect(await breakerSeries('models/canary')).toHaveLength(1);
    fake.remove('modelpools', 'models', 'canary');
    await eventually(
      () => served(gateway.router, 'fresh'),
      (c) => only(c, 'status 503'),
      '503 once the only weighted pool is gone',
      BOUND_MS,
    );
    // the operator's view: the removed pool's breakers went with it, not at the next minute's prune
    expect(await breakerSeries('models/canary')).toEqual([]);
    expect(await breakerSeries('models/llama')).toHaveLength(1);
    fake.remove('modeldeployments', 'models', 'llama-prod');
    await eventually(
      () => served(gateway.router, 'fresh'),
      (c) => only(c, 'status 404'),
      '404 once the deployment is gone',
      BOUND_MS,
    );
  });
});

/** A ModelDeployment's Accepted condition, once the status writer has given it `reason`. */
function acceptedAs(fake: FakeKubeApi, deployment: string, reason: string): Promise<{ type: string; reason: string; message: string } | undefined> {
  return eventually(
    () =>
      (fake.get('modeldeployments', 'models', deployment)?.status as { conditions?: Array<{ type: string; reason: string; message: string }> } | undefined)?.conditions?.find(
        (c) => c.type === 'Accepted',
      ),
    (c) => c?.reason === reason,
    `Accepted=False, ${reason}`,
    BOUND_MS,
  );
}

describe('Kubernetes mode: status and conflicts', () => {
  it('writes pool and deployment status with observedGeneration, and marks the younger of two conflicting deployments', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b']);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }, { pod: pods[1]!, ready: false }]));
    fake.apply('endpointslices', endpointSlice('embed-abc', 'embed', [{ pod: pods[1]! }]));
    fake.apply('modelpools', modelPool('embed', 'embed'));
    fake.apply('modeldeployments', modelDeployment('older', 'older-model', ['shared'], [{ pool: 'llama' }], { created: '2026-01-01T00:00:00Z' }));
    fake.apply('modeldeployments', modelDeployment('younger', 'younger-model', ['shared'], [{ pool: 'embed' }], { created: '2026-06-01T00:00:00Z' }));
    fake.apply('modeldeployments', modelDeployment('orphan', 'orphan-model', [], [{ pool: 'missing' }]));
    fake.apply('modeldeployments', modelDeployment('cross-ns', 'cross-model', [], [{ pool: 'llama' }], { namespace: 'other' }));

    type Status = { readyReplicas?: number; replicas?: number; observedGeneration?: number; conditions?: Array<{ type: string; status: string; reason: string }> };
    const status = (kind: 'modelpools' | 'modeldeployments', name: string, ns = 'models'): Status => fake.get(kind, ns, name)?.status ?? {};
    const condition = (s: Status, type: string): string | undefined => s.conditions?.find((c) => c.type === type)?.status;

    await eventually(
      () => status('modelpools', 'llama'),
      (s) => s.readyReplicas === 1 && s.replicas === 2,
      'pool status 1 of 2 ready',
      BOUND_MS,
    );
    const pool = status('modelpools', 'llama');
    expect(pool.observedGeneration).toBe(fake.get('modelpools', 'models', 'llama')?.metadata.generation);
    expect(condition(pool, 'Ready')).toBe('True');
    expect(condition(pool, 'Accepted')).toBe('True');

    await eventually(
      () => status('modeldeployments', 'younger'),
      (s) => condition(s, 'Conflicted') === 'True',
      'the younger deployment to be Conflicted',
      BOUND_MS,
    );
    await eventually(
      () => status('modeldeployments', 'older'),
      (s) => condition(s, 'Conflicted') === 'False' && condition(s, 'Accepted') === 'True',
      'the older one to keep its names',
      BOUND_MS,
    );
    await eventually(
      () => status('modeldeployments', 'orphan'),
      (s) => s.conditions?.find((c) => c.type === 'Accepted')?.reason === 'PoolNotFound',
      'Accepted=False for a missing pool',
      BOUND_MS,
    );
    // the router watches only "models": a deployment elsewhere is not its business
    expect(status('modeldeployments', 'cross-ns', 'other')).toEqual({});
    // the contested alias reaches the older deployment (pod-a), the younger keeps its own model name
    expect(only(await served(gateway.router, 'shared'), 'pod-a')).toBe(true);
    expect(only(await served(gateway.router, 'younger-model'), 'pod-b')).toBe(true);
    // Two full resyncs: nothing changed, nothing written. A relist is scheduled only after the one
    // before it was handed to the controller, so a third LIST of every kind proves two were processed.
    const writes = fake.statusWrites.length;
    const listed = WATCHED.map((kind) => lists(fake, kind));
    await eventually(
      () => WATCHED.map((kind) => lists(fake, kind)),
      (now) => now.every((n, i) => n >= listed[i]! + 3),
      'two resyncs of every watched kind',
      BOUND_MS,
    );
    expect(fake.statusWrites.length).toBe(writes);
  });

  it('lets a deployment target only pools in its own namespace (watching all namespaces)', async () => {
    const { fake, gateway } = await cluster(['pod-a'], { namespaces: [] });
    fake.apply('modeldeployments', modelDeployment('cross', 'cross-model', [], [{ pool: 'llama' }], { namespace: 'other' }));
    await eventually(
      () => fake.get('modeldeployments', 'other', 'cross')?.status as { conditions?: Array<{ type: string; reason: string }> } | undefined,
      (s) => s?.conditions?.some((c) => c.type === 'Accepted' && c.reason === 'PoolNotFound') ?? false,
      'Accepted=False across namespaces',
      BOUND_MS,
    );
    expect(only(await served(gateway.router, 'cross-model'), 'status 503')).toBe(true);
    expect(only(await served(gateway.router, 'default'), 'pod-a')).toBe(true);
  });

  it('reports a target pool whose spec is invalid as PoolInvalid, not as missing', async () => {
    const { fake } = await cluster(['pod-a']);
    fake.apply('modelpools', { ...modelPool('broken', 'llama'), spec: { engine: 'vllm', servedModelName: 'served/llama' } }); // no service
    fake.apply('modeldeployments', modelDeployment('on-broken', 'broken-model', [], [{ pool: 'broken' }]));
    const accepted = await acceptedAs(fake, 'on-broken', 'PoolInvalid');
    expect(accepted?.message).toBe('ModelPool "broken" in namespace models has a spec the router cannot use (see its Accepted condition).');
  });

  it('reports a fallback whose spec is invalid as FallbackInvalid, not as missing', async () => {
    const { fake } = await cluster(['pod-a']);
    // all weights 0: the API server takes it, the router cannot use it
    fake.apply('modeldeployments', { ...modelDeployment('broken-backup', 'broken-backup', [], [{ pool: 'llama' }]), spec: { model: 'broken-backup', targets: [{ pool: 'llama', weight: 0 }] } });
    fake.apply('modeldeployments', {
      ...modelDeployment('with-backup', 'with-backup', [], [{ pool: 'llama' }]),
      spec: { model: 'with-backup', targets: [{ pool: 'llama' }], fallbacks: ['broken-backup'] },
    });
    const accepted = await acceptedAs(fake, 'with-backup', 'FallbackInvalid');
    expect(accepted?.message).toBe('ModelDeployment "broken-backup" in namespace models has a spec the router cannot use (see its Accepted condition): requests do not fall back there.');
  });

  it('does not accept a LoRA adapter on a pool that cannot serve it (static mode refuses the config): no route to it, no ready endpoints counted for it', async () => {
    const { fake, gateway } = await cluster(['pod-a']);
    // the same Service's pod, declared as an SGLang pool: LoRA adapters are served by vLLM pools only
    fake.apply('modelpools', { ...modelPool('sg', 'llama'), spec: { ...(modelPool('sg', 'llama').spec as object), engine: 'sglang' } });
    fake.apply('modeldeployments', { ...modelDeployment('lora-bot', 'lora-bot', [], [{ pool: 'sg' }]), spec: { model: 'lora-bot', targets: [{ pool: 'sg' }], adapter: { name: 'bot-adapter' } } });
    const accepted = await acceptedAs(fake, 'lora-bot', 'AdapterUnsupported');
    expect(accepted?.message).toBe('LoRA adapters are served by vLLM pools only; pool "sg" runs sglang (such a target gets no requests).');
    // the client: no engine is asked for an adapter it does not serve
    const res = await rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${KEY}` },
      body: { model: 'lora-bot', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(res.status).toBe(503);
    // the operator: the deployment has no ready endpoint (the pool's pod is ready, but not for it), so its alert can fire
    const metrics = (await rawRequest(`${gateway.router.adminUrl}/metrics`)).body;
    expect(metrics).toMatch(/^modelgate_deployment_ready_endpoints\{deployment="models\/lora-bot"\} 0$/m);
    expect(metrics).toMatch(/^modelgate_deployment_ready_endpoints\{deployment="models\/llama-prod"\} 1$/m);
  });
});

describe('Kubernetes mode: leader election', () => {
  it('has one replica write status, and another take over when it stops', async () => {
    const { fake, pods, gateway } = await cluster(['pod-a'], { token: 'router-0', identity: 'router-0' });
    const second = await startKubeRouter(fake, { token: 'router-1', identity: 'router-1' });
    cleanups.splice(2, 0, () => second.close());
    await eventually(
      () => served(second.router),
      (c) => only(c, 'pod-a'),
      'the second router to route too',
      BOUND_MS,
    );
    await eventually(
      () => fake.statusWrites.length,
      (n) => n > 0,
      'a status write',
      BOUND_MS,
    );
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]!, ready: false }]));
    await eventually(
      () => (fake.get('modelpools', 'models', 'llama')?.status as { readyReplicas?: number }).readyReplicas,
      (n) => n === 0,
      'the status update',
      BOUND_MS,
    );
    expect(new Set(fake.statusWrites.map((w) => w.token))).toEqual(new Set(['router-0']));

    await gateway.close();
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]! }]));
    await eventually(
      () => (fake.get('modelpools', 'models', 'llama')?.status as { readyReplicas?: number }).readyReplicas,
      (n) => n === 1,
      'the other replica to write status',
      BOUND_MS,
    );
    expect(fake.statusWrites.at(-1)?.token).toBe('router-1');
  });

  it('calls the API server only with the verbs its RBAC grants (manifests/rbac: least privilege, nothing unused)', async () => {
    const { fake, pods } = await cluster(['pod-a'], { token: 'router-0', identity: 'router-0' });
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]!, ready: false }]));
    await eventually(
      () => (fake.get('modelpools', 'models', 'llama')?.status as { readyReplicas?: number } | undefined)?.readyReplicas,
      (n) => n === 0,
      'a status write',
      BOUND_MS,
    );
    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
    const granted = new Set(
      ['cluster-role.yaml', 'role-leases.yaml'].flatMap((file) =>
        parseAllDocuments(readFileSync(join(REPO_ROOT, 'manifests/rbac', file), 'utf8'))
          .flatMap((d) => (d.toJS() as { rules?: Rule[] }).rules ?? [])
          .flatMap((r) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => `${g} ${res} ${v}`)))),
      ),
    );
    // each request as RBAC names it: /apis/{group}/{version}[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]
    const used = new Set(
      fake.requests.map((r) => {
        const parts = r.path.split('/').filter(Boolean).slice(1); // past "apis"
        const group = parts[0] ?? '';
        const rest = parts[2] === 'namespaces' ? parts.slice(4) : parts.slice(2);
        const [resource, name, sub] = rest;
        const verb =
          r.method === 'GET'
            ? r.watch
              ? 'watch'
              : name === undefined
                ? 'list'
                : 'get'
            : r.method === 'POST'
              ? 'create'
              : r.method === 'PUT'
                ? 'update'
                : r.method === 'PATCH'
                  ? 'patch'
                  : r.method.toLowerCase();
        return `${group} ${sub ? `${resource}/${sub}` : resource} ${verb}`;
      }),
    );
    expect([...used].filter((u) => !granted.has(u))).toEqual([]);
    // and every grant is used (a lease is created once, then read and renewed)
    expect([...granted].filter((g) => !used.has(g)).sort()).toEqual([]);
  });

  it.each(['endpointslices', 'modelpools'] as const)('writes no status before every watch has listed (a new leader whose %s LIST is slow)', async (slow) => {
    // a rolling update: the old leader wrote the true status and hands over; its replacement's LIST of one kind fails a few times
    const { fake, pods, gateway } = await cluster(['pod-a', 'pod-b'], { token: 'router-0', identity: 'router-0' });
    await eventually(
      () =>
        fake.statusWrites.filter((w) => w.resource === 'modeldeployments').length > 0 && (fake.get('modelpools', 'models', 'llama')?.status as { readyReplicas?: number } | undefined)?.readyReplicas,
      (n) => n === 2,
      'the first router’s status',
      BOUND_MS,
    );
    fake.failNext(4, 503, { resource: slow, watch: false });
    const second = await startKubeRouter(fake, { token: 'router-1', identity: 'router-1' });
    cleanups.splice(2, 0, () => second.close());
    await gateway.close();
    const writes = (resource: string): Array<{ status: { readyReplicas?: number; conditions: Array<{ type: string; reason: string }> } }> =>
      fake.statusWrites.filter((w) => w.token === 'router-1' && w.resource === resource) as unknown as Array<{
        status: { readyReplicas?: number; conditions: Array<{ type: string; reason: string }> };
      }>;
    // the new leader writes once everything has listed (a pod goes NotReady meanwhile, so there is something to write)
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod: pods[0]!, ready: false }, { pod: pods[1]! }]));
    await eventually(
      () => writes('modelpools').at(-1)?.status.readyReplicas,
      (n) => n === 1,
      'the new leader’s pool status',
      BOUND_MS,
    );
    expect(writes('modelpools').map((w) => w.status.readyReplicas)).not.toContain(0);
    expect(writes('modeldeployments').flatMap((w) => w.status.conditions.map((c) => c.reason))).not.toContain('PoolNotFound');
  });
});
