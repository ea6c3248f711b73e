/**
 * Kubernetes mode: requests waiting in a pool's admission queue when discovery changes its endpoints.
 * A replica that joins takes them at once (it is what an autoscaler adds under a queue), and a pool
 * left with no ready replica answers them 503 at once, as it answers a new request. The queue timeout
 * is far longer than the test's bound: a request still waiting for it fails the test.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { rawRequest, type RawResponse } from '../../helpers/http.js';
import { endpointSlice, eventually, llamaCluster, modelPool, startKubeRouter, startPods, type Pod } from '../../helpers/kube-env.js';
import { KEY } from '../../helpers/router.js';
import { type FakeKubeApi } from '../../helpers/fake-kube-api.js';

const BOUND_MS = 5000;
const QUEUE_TIMEOUT_MS = 60_000;
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Pool `llama` with one pod, at most one request at a time on it: a second request queues. */
async function oneSlotCluster(): Promise<{ fake: FakeKubeApi; pod: Pod; send: () => Promise<RawResponse>; queueDepth: () => Promise<number>; inFlight: () => Promise<number> }> {
  const { fake, pods } = await llamaCluster(['pod-a'], cleanups);
  const pool = modelPool('llama', 'llama');
  fake.apply('modelpools', { ...pool, spec: { ...(pool.spec as object), resilience: { maxConcurrencyPerReplica: 1, queue: { maxSize: 10, timeoutMs: QUEUE_TIMEOUT_MS } } } });
  const gateway = await startKubeRouter(fake);
  cleanups.splice(2, 0, () => gateway.close()); // the router closes before the fake and the pods
  const { apiUrl, adminUrl } = gateway.router;
  await eventually(
    () => rawRequest(`${adminUrl}/readyz`).then((r) => r.status),
    (s) => s === 200,
    'the router to become ready',
    BOUND_MS,
  );
  const send = (): Promise<RawResponse> =>
    rawRequest(`${apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'default', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 } });
  const gauge = (series: string) => async (): Promise<number> => {
    const line = (await rawRequest(`${adminUrl}/metrics`)).body.split('\n').find((l) => l.startsWith(`${series}{pool="models/llama"`));
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  };
  const pod = pods[0] as Pod;
  // pod-a takes one request and never answers it: the next one queues
  await rawRequest(`${pod.sim.url}/sim/config`, { body: { fault: 'hang' } });
  return { fake, pod, send, queueDepth: gauge('modelgate_queue_depth'), inFlight: gauge('modelgate_endpoint_in_flight_requests') };
}

/** `answer`, or a failure once `BOUND_MS` has passed (the queue timeout is far longer). */
function within<T>(answer: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${BOUND_MS} ms: ${what}`)), BOUND_MS)));
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}

describe('Kubernetes mode: queued requests when the endpoints change', () => {
  it('sends a queued request to a replica that joins the pool at once, not when a slot frees on the old one', async () => {
    const { fake, pod, send, queueDepth, inFlight } = await oneSlotCluster();
    const [joining] = await startPods(['pod-b'], pod.port);
    cleanups.push(() => joining!.sim.close());
    const busy = send(); // hangs on pod-a
    await eventually(inFlight, (n) => n === 1, 'pod-a to hold a request', BOUND_MS);
    const queued = send();
    await eventually(queueDepth, (d) => d === 1, 'a request to queue', BOUND_MS);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod }, { pod: joining! }]));
    const res = await within(queued, 'the queued request, once pod-b joined');
    expect(res.status).toBe(200);
    expect(res.headers['x-sim-replica']).toBe('pod-b');
    await rawRequest(`${pod.sim.url}/sim/config`, { body: { fault: '' } });
    void busy;
  });

  it('answers a queued request 503 no_ready_replica as soon as the pool has no ready replica, as a new request is', async () => {
    const { fake, pod, send, queueDepth, inFlight } = await oneSlotCluster();
    const busy = send();
    await eventually(inFlight, (n) => n === 1, 'pod-a to hold a request', BOUND_MS);
    const queued = send();
    await eventually(queueDepth, (d) => d === 1, 'a request to queue', BOUND_MS);
    fake.apply('endpointslices', endpointSlice('llama-abc', 'llama', [{ pod, ready: false }]));
    const res = await within(queued, 'the queued request, once the slice had no ready endpoint');
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBeDefined();
    expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'no_ready_replica' } });
    expect((await send()).status).toBe(503); // as a new request is
    await rawRequest(`${pod.sim.url}/sim/config`, { body: { fault: '' } });
    void busy;
  });
});
