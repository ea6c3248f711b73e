import { afterEach, beforeEach, describe, expect, it } from '@jest/globals';
import {
  ApiException,
  CoordinationV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  KubeConfig,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  type Informer,
  type ObjectCache,
  type V1EndpointSlice,
} from '@kubernetes/client-node';
import { FakeKubeApi, type FakeObject } from './fake-kube-api.js';
import { waitFor } from './sim.js';

const NS = 'default';
const SERVICE_LABEL = 'kubernetes.io/service-name';
const SLICES_PATH = `/apis/discovery.k8s.io/v1/namespaces/${NS}/endpointslices`;

function slice(name: string, ip: string, labels: Record<string, string> = { [SERVICE_LABEL]: 'chat' }): FakeObject {
  return { metadata: { name, namespace: NS, labels }, addressType: 'IPv4', endpoints: [{ addresses: [ip], conditions: { ready: true } }], ports: [{ name: 'http', port: 8000, protocol: 'TCP' }] };
}

interface WatchedSlices {
  informer: Informer<V1EndpointSlice> & ObjectCache<V1EndpointSlice>;
  /** `verb name`, in the order the callbacks ran. */
  events: string[];
  errors: unknown[];
  /** name → first address, from the informer's cache. */
  addresses(): Record<string, string | undefined>;
}

let fake: FakeKubeApi;
let kc: KubeConfig;
let running: WatchedSlices[] = [];

beforeEach(async () => {
  fake = await FakeKubeApi.start();
  kc = new KubeConfig();
  kc.loadFromString(fake.kubeconfig());
});

afterEach(async () => {
  for (const { informer } of running) await informer.stop();
  running = [];
  await fake.close();
});

/** The informer the router builds: EndpointSlices of one namespace that belong to a Service. */
async function watchSlices(): Promise<WatchedSlices> {
  const api = kc.makeApiClient(DiscoveryV1Api);
  const informer = makeInformer(kc, SLICES_PATH, () => api.listNamespacedEndpointSlice({ namespace: NS, labelSelector: SERVICE_LABEL }), SERVICE_LABEL);
  const watched: WatchedSlices = {
    informer,
    events: [],
    errors: [],
    addresses: () => Object.fromEntries(informer.list(NS).map((s) => [s.metadata?.name ?? '', s.endpoints?.[0]?.addresses[0]])),
  };
  for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, (s) => watched.events.push(`${verb} ${s.metadata?.name ?? ''}`));
  informer.on('error', (err) => watched.errors.push(err));
  running.push(watched);
  await informer.start();
  return watched;
}

const watchRequests = (): Array<string | undefined> => fake.requests.filter((r) => r.watch).map((r) => r.query.resourceVersion);
const listRequests = (): number => fake.requests.filter((r) => !r.watch && r.path === SLICES_PATH).length;

/**
 * After a reconnect, client-node may wait out a backoff (1 s, doubling) before it watches again, and
 * `stop()` does not cancel that wait: a test ends only once the informer is watching again.
 */
const watchingAgain = (): Promise<void> => waitFor(() => fake.openWatches() === 1, 'the informer to watch again');

describe('FakeKubeApi with the real @kubernetes/client-node informer', () => {
  it('delivers adds, updates and deletes of the slices that match the label selector', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const watched = await watchSlices();
    fake.apply('endpointslices', slice('unlabelled', '10.0.0.9', {}));
    fake.apply('endpointslices', slice('b', '10.0.0.2'));
    fake.apply('endpointslices', slice('b', '10.0.0.3'));
    fake.remove('endpointslices', NS, 'b');
    await waitFor(() => watched.events.includes('delete b'), 'delete b');

    expect(watched.events).toEqual(['add a', 'add b', 'update b', 'delete b']);
    expect(watched.addresses()).toEqual({ a: '10.0.0.1' });
    expect(watched.errors).toEqual([]);
    expect(fake.requests[0]).toEqual({ method: 'GET', path: SLICES_PATH, query: { labelSelector: SERVICE_LABEL }, token: 'test-token', watch: false });
    expect(fake.requests[1]).toMatchObject({ path: SLICES_PATH, query: { watch: 'true', labelSelector: SERVICE_LABEL, resourceVersion: '1001' }, watch: true });
  });

  it('resumes from its resourceVersion after dropWatches and keeps receiving events', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const watched = await watchSlices();
    fake.apply('endpointslices', slice('b', '10.0.0.2'));
    await waitFor(() => watched.events.includes('add b'), 'add b');

    fake.dropWatches();
    await watchingAgain();
    fake.apply('endpointslices', slice('c', '10.0.0.3'));
    await waitFor(() => watched.events.includes('add c'), 'add c');

    expect(watchRequests()).toEqual(['1001', '1002']);
    expect(listRequests()).toBe(1);
    expect(watched.errors).toEqual([]);
  });

  it.each(['event', 'status'] as const)('relists after a watch is told 410 Gone (as %s) and catches up on what it missed', async (goneAs) => {
    fake.goneAs = goneAs;
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const watched = await watchSlices();

    // All synchronous: the watch ends, changes happen that no watch sees, and their history is compacted away.
    fake.dropWatches();
    fake.apply('endpointslices', slice('a', '10.0.0.5'));
    fake.apply('endpointslices', slice('d', '10.0.0.4'));
    fake.compact();
    await waitFor(() => watched.addresses().a === '10.0.0.5' && watched.addresses().d === '10.0.0.4', 'the relisted state');

    expect(listRequests()).toBe(2);
    expect(watched.events).toEqual(['add a', 'update a', 'add d']);
    expect(watched.errors).toEqual([]);
    await watchingAgain();
    expect(watchRequests()).toEqual(['1001', '1001', '1003']);
  });

  it('never reports a silently removed slice: the ghost stays cached until a relist', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    fake.apply('endpointslices', slice('ghost', '10.0.0.2'));
    const watched = await watchSlices();

    fake.remove('endpointslices', NS, 'ghost', { silent: true });
    fake.apply('endpointslices', slice('c', '10.0.0.3'));
    await waitFor(() => watched.events.includes('add c'), 'add c');
    fake.dropWatches();
    await watchingAgain();
    fake.apply('endpointslices', slice('d', '10.0.0.4'));
    await waitFor(() => watched.events.includes('add d'), 'add d');

    expect(fake.get('endpointslices', NS, 'ghost')).toBeUndefined();
    expect(watched.addresses()).toEqual({ a: '10.0.0.1', ghost: '10.0.0.2', c: '10.0.0.3', d: '10.0.0.4' });
    expect(watched.events).not.toContain('delete ghost');

    // Only a relist corrects it, and client-node then reports the ghost as deleted.
    fake.dropWatches();
    fake.apply('endpointslices', slice('e', '10.0.0.5'));
    fake.compact();
    await waitFor(() => watched.events.includes('delete ghost'), 'delete ghost');
    expect(Object.keys(watched.addresses()).sort()).toEqual(['a', 'c', 'd', 'e']);
    await watchingAgain();
  });

  it('emits error and stops when the re-watch fails with a 500; start() resumes without a relist', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const watched = await watchSlices();

    fake.failNext(1, 500, { watch: true });
    fake.dropWatches();
    await waitFor(() => watched.errors.length > 0, 'an informer error');

    expect(watched.errors).toEqual([expect.objectContaining({ statusCode: 500, message: 'Internal Server Error' })]);
    expect(fake.openWatches()).toBe(0);

    await watched.informer.start();
    fake.apply('endpointslices', slice('b', '10.0.0.2'));
    await waitFor(() => watched.events.includes('add b'), 'add b');
    expect(watchRequests()).toEqual(['1001', '1001', '1001']);
    expect(listRequests()).toBe(1);
  });

  it('emits error on a dropped connection, and start() resolves while the server is down', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const watched = await watchSlices();

    fake.setDown(true);
    await waitFor(() => watched.errors.length === 1, 'an informer error');
    await expect(watched.informer.start()).resolves.toBeUndefined();
    await waitFor(() => watched.errors.length === 2, 'a second informer error');
    expect(watched.errors).toEqual([expect.objectContaining({ name: 'TypeError', message: 'terminated' }), expect.objectContaining({ name: 'TypeError', message: 'fetch failed' })]);

    fake.setDown(false);
    await watched.informer.start();
    fake.apply('endpointslices', slice('b', '10.0.0.2'));
    await waitFor(() => watched.events.includes('add b'), 'add b');
    expect(fake.openWatches()).toBe(1);
  });
});

describe('FakeKubeApi with the real @kubernetes/client-node API clients', () => {
  it('lists ModelPools and merge-patches their status without touching generation', async () => {
    const applied = fake.apply('modelpools', { metadata: { name: 'chat', namespace: NS }, spec: { selector: { app: 'vllm' }, targetPort: 8000 } });
    const custom = kc.makeApiClient(CustomObjectsApi);
    const pool = { group: 'modelgate.io', version: 'v1alpha1', namespace: NS, plural: 'modelpools', name: 'chat' };

    const list: unknown = await custom.listNamespacedCustomObject({ group: pool.group, version: pool.version, namespace: NS, plural: pool.plural });
    expect(list).toMatchObject({
      apiVersion: 'modelgate.io/v1alpha1',
      kind: 'ModelPoolList',
      metadata: { resourceVersion: '1001' },
      items: [{ kind: 'ModelPool', metadata: { name: 'chat', generation: 1 } }],
    });

    const status = { readyReplicas: 2, conditions: [{ type: 'Ready', status: 'True' }] };
    const patched: unknown = await custom.patchNamespacedCustomObjectStatus({ ...pool, body: { status } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    expect(patched).toMatchObject({ status, metadata: { generation: 1, resourceVersion: '1002' } });
    expect(fake.statusWrites).toEqual([{ resource: 'modelpools', namespace: NS, name: 'chat', token: 'test-token', status }]);
    expect(fake.get('modelpools', NS, 'chat')).toMatchObject({ spec: applied.spec, status, metadata: { uid: applied.metadata.uid, generation: 1 } });

    // Without the header the client sends a JSON patch, which the fake (merge patch only) refuses.
    await expect(custom.patchNamespacedCustomObjectStatus({ ...pool, body: { status } })).rejects.toMatchObject({ code: 415 });
    // A spec change bumps generation and keeps the status the operator did not send.
    expect(fake.apply('modelpools', { metadata: { name: 'chat', namespace: NS }, spec: { selector: { app: 'sglang' }, targetPort: 8000 } })).toMatchObject({ status, metadata: { generation: 2 } });
  });

  it('reads, creates and replaces Leases with optimistic concurrency', async () => {
    kc.loadFromString(fake.kubeconfig('lease-token'));
    const leases = kc.makeApiClient(CoordinationV1Api);
    const name = 'modelgate-leader';

    const missing = leases.readNamespacedLease({ namespace: NS, name });
    await expect(missing).rejects.toBeInstanceOf(ApiException);
    await expect(missing).rejects.toMatchObject({ code: 404 });

    const created = await leases.createNamespacedLease({ namespace: NS, body: { metadata: { name }, spec: { holderIdentity: 'pod-a', leaseDurationSeconds: 15 } } });
    expect(created.metadata?.resourceVersion).toBe('1001');
    await expect(leases.createNamespacedLease({ namespace: NS, body: { metadata: { name } } })).rejects.toMatchObject({ code: 409 });

    const stale = { metadata: { name, resourceVersion: '1000' }, spec: { holderIdentity: 'pod-b' } };
    await expect(leases.replaceNamespacedLease({ namespace: NS, name, body: stale })).rejects.toMatchObject({ code: 409 });

    const current = await leases.readNamespacedLease({ namespace: NS, name });
    const replaced = await leases.replaceNamespacedLease({ namespace: NS, name, body: { ...current, spec: { ...current.spec, holderIdentity: 'pod-b' } } });
    expect(replaced.spec?.holderIdentity).toBe('pod-b');
    expect(replaced.metadata?.resourceVersion).toBe('1002');
    expect(fake.get('leases', NS, name)?.spec).toMatchObject({ holderIdentity: 'pod-b', leaseDurationSeconds: 15 });
    expect(new Set(fake.requests.map((r) => r.token))).toEqual(new Set(['lease-token']));
  });
});

/** Reads a watch response line by line until `done` holds for the events so far or the stream ends. */
async function readEvents(
  url: string,
  done: (events: Array<{ type: string; object: Record<string, unknown> }>) => boolean = () => false,
): Promise<Array<{ type: string; object: Record<string, unknown> }>> {
  const controller = new AbortController();
  const res = await fetch(url, { signal: controller.signal });
  expect(res.status).toBe(200);
  if (res.body === null) throw new Error('a watch response needs a body');
  const events: Array<{ type: string; object: Record<string, unknown> }> = [];
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    buffered += read.value;
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) events.push(JSON.parse(line) as { type: string; object: Record<string, unknown> });
    if (done(events)) {
      controller.abort();
      await reader.cancel().catch(() => undefined);
      break;
    }
  }
  return events;
}

describe('FakeKubeApi on the wire', () => {
  it('filters lists by equality label selectors and answers errors as Status objects', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1', { [SERVICE_LABEL]: 'chat', tier: 'gpu' }));
    fake.apply('endpointslices', slice('b', '10.0.0.2', { [SERVICE_LABEL]: 'embed' }));
    fake.apply('endpointslices', slice('c', '10.0.0.3', {}));
    const names = async (selector: string): Promise<string[]> => {
      const res = await fetch(`${fake.url}/apis/discovery.k8s.io/v1/endpointslices?labelSelector=${encodeURIComponent(selector)}`);
      const body = (await res.json()) as { kind: string; items: Array<{ metadata: { name: string } }> };
      expect(body.kind).toBe('EndpointSliceList');
      return body.items.map((item) => item.metadata.name);
    };

    expect(await names('')).toEqual(['a', 'b', 'c']);
    expect(await names(SERVICE_LABEL)).toEqual(['a', 'b']);
    expect(await names(`!${SERVICE_LABEL}`)).toEqual(['c']);
    expect(await names(`${SERVICE_LABEL}=chat,tier`)).toEqual(['a']);
    expect(await names(`${SERVICE_LABEL}==embed`)).toEqual(['b']);
    expect(await names(`${SERVICE_LABEL}!=chat`)).toEqual(['b', 'c']);

    const bad = await fetch(`${fake.url}/apis/discovery.k8s.io/v1/endpointslices?labelSelector=${encodeURIComponent('tier in (gpu)')}`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', reason: 'BadRequest', code: 400 });

    fake.failNext(1, 503, { watch: false, resource: 'endpointslices' });
    const failed = await fetch(`${fake.url}${SLICES_PATH}`);
    expect(failed.status).toBe(503);
    expect(await failed.json()).toMatchObject({ kind: 'Status', reason: 'ServiceUnavailable', code: 503 });
    expect((await fetch(`${fake.url}${SLICES_PATH}`)).status).toBe(200);
  });

  it('replays history through the selector, sends bookmarks on request and ends at timeoutSeconds', async () => {
    const from = fake.apply('endpointslices', slice('a', '10.0.0.1')).metadata.resourceVersion;
    fake.apply('endpointslices', slice('a', '10.0.0.1', { other: 'x' }));
    fake.apply('endpointslices', slice('b', '10.0.0.2'));
    const url = `${fake.url}${SLICES_PATH}?watch=1&labelSelector=${encodeURIComponent(SERVICE_LABEL)}&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=${from}`;
    const reading = readEvents(url);
    await waitFor(() => fake.openWatches() === 1, 'the watch to open');
    fake.bookmark();

    const events = await reading;
    expect(events.map((e) => `${e.type} ${String((e.object.metadata as { name?: string }).name)}`)).toEqual(['DELETED a', 'ADDED b', 'BOOKMARK undefined']);
    expect(events[2]?.object).toEqual({ kind: 'EndpointSlice', apiVersion: 'discovery.k8s.io/v1', metadata: { resourceVersion: '1003' } });
    expect(fake.openWatches()).toBe(0);
  });

  it('answers a watch from a compacted resourceVersion with an ERROR event or an HTTP 410', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    fake.compact();
    const url = `${fake.url}${SLICES_PATH}?watch=true&resourceVersion=1000`;
    const gone = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'too old resource version: 1000 (1001)', reason: 'Expired', code: 410 };

    expect(await readEvents(url)).toEqual([{ type: 'ERROR', object: gone }]);
    fake.goneAs = 'status';
    const res = await fetch(url);
    expect(res.status).toBe(410);
    expect(await res.json()).toEqual(gone);
  });

  it('delays every response by latencyMs, and close() drops what is still pending', async () => {
    fake.latencyMs = 150;
    const started = Date.now();
    expect((await fetch(`${fake.url}${SLICES_PATH}`)).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);

    fake.latencyMs = 60_000;
    const pending = fetch(`${fake.url}${SLICES_PATH}`);
    await waitFor(() => fake.requests.length === 2, 'the second request to arrive');
    await fake.close();
    await expect(pending).rejects.toThrow('fetch failed');
  });

  it('answers each watch without a resourceVersion with synthetic ADDED events, then live ones', async () => {
    fake.apply('endpointslices', slice('a', '10.0.0.1'));
    const reading = readEvents(`${fake.url}${SLICES_PATH}?watch=true`, (events) => events.length === 2);
    await waitFor(() => fake.openWatches() === 1, 'the watch to open');
    fake.apply('endpointslices', slice('a', '10.0.0.7'));

    expect((await reading).map((e) => e.type)).toEqual(['ADDED', 'MODIFIED']);
    await waitFor(() => fake.openWatches() === 0, 'the closed watch to be forgotten');
  });
});
