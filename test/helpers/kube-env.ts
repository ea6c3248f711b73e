/**
 * A small cluster on loopback for Kubernetes-mode tests: simulator "pods" each on its own 127.0.0.x
 * address and one shared port (as pods behind one Service are), EndpointSlice / ModelPool /
 * ModelDeployment builders for the fake API server, and a router pointed at it by kubeconfig.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig } from '../../src/config/load.js';
import { startRouter, type RunningRouter } from '../../src/main.js';
import { defaultSimOptions } from '../../src/sim/options.js';
import { startSim, type SimServer } from '../../src/sim/server.js';
import { FakeKubeApi, type FakeObject } from './fake-kube-api.js';
import { rawRequest } from './http.js';
import { captureLogs, KEY, testRouter, type TestRouter } from './router.js';

export interface Pod {
  name: string;
  ip: string;
  port: number;
  sim: SimServer;
}

let nextIp = 2;

/** Simulators named `names`, each on a fresh 127.0.0.x address, all on the same port. */
export async function startPods(names: string[], port?: number): Promise<Pod[]> {
  const pods: Pod[] = [];
  let shared = port ?? 0;
  for (const name of names) {
    const ip = `127.0.0.${nextIp}`;
    nextIp = nextIp >= 250 ? 2 : nextIp + 1;
    const sim = await startSim({ ...defaultSimOptions(), host: ip, port: shared, name, model: ['served/llama', 'served/bge'], itlMs: 1, ttftMs: 1 });
    shared = Number(new URL(sim.url).port);
    pods.push({ name, ip, port: shared, sim });
  }
  return pods;
}

export interface SliceMember {
  pod: Pod;
  ready?: boolean;
  terminating?: boolean;
  /** Overrides the pod's address (a pod that moved). */
  ip?: string;
}

export function endpointSlice(name: string, service: string, members: SliceMember[], options: { namespace?: string; portName?: string } = {}): FakeObject {
  const namespace = options.namespace ?? 'models';
  return {
    metadata: { name, namespace, labels: { 'kubernetes.io/service-name': service, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' } },
    addressType: 'IPv4',
    ports: [{ name: options.portName ?? 'http', port: members[0]?.pod.port ?? 8000, protocol: 'TCP' }],
    endpoints: members.map((m) => ({
      addresses: [m.ip ?? m.pod.ip],
      conditions: { ready: m.ready ?? !m.terminating, serving: true, terminating: m.terminating ?? false },
      targetRef: { kind: 'Pod', namespace, name: m.pod.name },
    })),
  };
}

export function modelPool(name: string, service: string, options: { namespace?: string; capabilities?: string[]; servedModelName?: string } = {}): FakeObject {
  return {
    metadata: { name, namespace: options.namespace ?? 'models' },
    spec: { service: { name: service, port: 'http' }, engine: 'vllm', servedModelName: options.servedModelName ?? 'served/llama', capabilities: options.capabilities ?? ['chat'] },
  };
}

export function modelDeployment(name: string, model: string, aliases: string[], targets: Array<{ pool: string; weight?: number }>, options: { namespace?: string; created?: string } = {}): FakeObject {
  return {
    metadata: { name, namespace: options.namespace ?? 'models', ...(options.created ? { creationTimestamp: options.created } : {}) },
    spec: { model, aliases, targets },
  };
}

/**
 * A fake API server with the one-model cluster most tests start from: pool `llama` (Service `llama`)
 * backed by `pods`, and deployment `llama-prod` (model `llama-3`, alias `default`). `cleanups` gets its
 * stop functions.
 */
export async function llamaCluster(podNames: string[], cleanups: Array<() => Promise<unknown>>): Promise<{ fake: FakeKubeApi; pods: Pod[] }> {
  const fake = await FakeKubeApi.start();
  cleanups.push(() => fake.close());
  const pods = await startPods(podNames);
  cleanups.push(() => Promise.all(pods.map((p) => p.sim.close())));
  fake.apply('modelpools', modelPool('llama', 'llama'));
  fake.apply('modeldeployments', modelDeployment('llama-prod', 'llama-3', ['default'], [{ pool: 'llama' }]));
  fake.apply(
    'endpointslices',
    endpointSlice(
      'llama-abc',
      'llama',
      pods.map((pod) => ({ pod })),
    ),
  );
  return { fake, pods };
}

export interface KubeRouterOptions {
  namespaces?: string[];
  token?: string;
  identity?: string;
  leaderElection?: boolean;
  /** The leader-election Lease (default: the router's default, `modelgate`). */
  leaseName?: string;
  resyncIntervalMs?: number;
  /** How long the state of an endpoint that left every snapshot is kept (the router's default: a minute). */
  forgetEndpointsAfterMs?: number;
}

/** A router in Kubernetes mode, its kubeconfig pointing at `fake`; logs captured. */
export async function startKubeRouter(fake: FakeKubeApi, options: KubeRouterOptions = {}): Promise<TestRouter<RunningRouter>> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-kube-'));
  await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
  await writeFile(join(dir, 'kubeconfig.yaml'), fake.kubeconfig(options.token));
  const config = buildConfig(
    {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      discovery: {
        mode: 'kubernetes',
        namespaces: options.namespaces ?? ['models'],
        kubeconfig: 'kubeconfig.yaml',
        resyncIntervalMs: options.resyncIntervalMs ?? 500,
        restartBackoffMs: { initialMs: 50, maxMs: 400 },
        leaderElection: {
          enabled: options.leaderElection ?? true,
          leaseNamespace: 'modelgate',
          leaseDurationMs: 1500,
          renewIntervalMs: 200,
          ...(options.leaseName ? { leaseName: options.leaseName } : {}),
        },
        identity: options.identity ?? 'router-0',
      },
    },
    dir,
  );
  const { logs, logger } = captureLogs();
  return testRouter(
    await startRouter(config, { logger, processMetrics: false, ...(options.forgetEndpointsAfterMs !== undefined ? { forgetEndpointsAfterMs: options.forgetEndpointsAfterMs } : {}) }),
    dir,
    logs,
    logger,
  );
}

/** Sends `count` chat requests for `model`; counts answers by replica name (or `status N` when not 200). */
export async function servedBy(router: RunningRouter, model: string, count = 12): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (let i = 0; i < count; i++) {
    const res = await rawRequest(`${router.apiUrl}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${KEY}` },
      body: { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 },
    });
    const key = res.status === 200 ? String(res.headers['x-sim-replica']) : `status ${res.status}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return counts;
}

/** Repeats `probe` until `accept` holds for its result (or throws after `timeoutMs`, with the last result). */
export async function eventually<T>(probe: () => T | Promise<T>, accept: (value: T) => boolean, what: string, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T;
  for (;;) {
    last = await probe();
    if (accept(last)) return last;
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}; last saw ${JSON.stringify(last instanceof Map ? [...last] : last)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export const only = (counts: Map<string, number>, ...names: string[]): boolean => [...counts.keys()].every((k) => names.includes(k)) && names.every((n) => counts.has(n));
