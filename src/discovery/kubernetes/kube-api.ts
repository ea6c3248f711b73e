/**
 * The Kubernetes API as modelgate uses it: informers for the three watched kinds, status writes for
 * the two CRDs, and Leases. The only module that talks to @kubernetes/client-node's clients.
 */
import { setTimeout as delay } from 'node:timers/promises';
import {
  ApiException,
  CoordinationV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  ListWatch,
  Observable,
  PatchStrategy,
  setHeaderOptions,
  Watch,
  type Informer,
  type ConfigurationOptions,
  type KubernetesListObject,
  type KubernetesObject,
  type ObjectCache,
  type ObservableMiddleware,
  type V1Lease,
} from '@kubernetes/client-node';
import { resolveKubeCredentials, type KubeCredentialsInput, type KubeCredentialsSource } from './kube-credentials.js';

export type WatchedKind = 'endpointslices' | 'modelpools' | 'modeldeployments';
export type StatusKind = 'modelpools' | 'modeldeployments';

/** The label the EndpointSlice controller puts on every slice: the name of its Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const CRD_GROUP = 'modelgate.io';
export const CRD_VERSION = 'v1alpha1';

export type KubeInformer<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

export interface LeaseRecord {
  holderIdentity: string;
  leaseDurationSeconds: number;
  acquireTime?: Date;
  renewTime?: Date;
  leaseTransitions: number;
  resourceVersion: string | undefined;
}

/** What discovery and the controller need from the API server. */
export interface KubeApi {
  /** A new informer (own cache, own list and watch) for `kind` in `namespace` (undefined: all). */
  informer(kind: WatchedKind, namespace: string | undefined): KubeInformer<KubernetesObject>;
  /** Resolves with the resourceVersion the write gave the object (when the API server said it). */
  patchStatus(kind: StatusKind, namespace: string, name: string, status: object): Promise<string | undefined>;
  readLease(namespace: string, name: string): Promise<LeaseRecord | undefined>;
  /** Creates the lease; resolves false if it already exists. */
  createLease(namespace: string, name: string, lease: LeaseRecord): Promise<boolean>;
  /** Replaces the lease if its resourceVersion still matches; resolves false on a conflict. */
  replaceLease(namespace: string, name: string, lease: LeaseRecord): Promise<boolean>;
}

/** HTTP status of a failed API call, if it has one. */
export function statusOf(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  const code = (err as { statusCode?: unknown; code?: unknown } | null)?.statusCode ?? (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

function toRecord(lease: V1Lease): LeaseRecord {
  const spec = lease.spec ?? {};
  return {
    holderIdentity: spec.holderIdentity ?? '',
    leaseDurationSeconds: spec.leaseDurationSeconds ?? 0,
    ...(spec.acquireTime ? { acquireTime: new Date(spec.acquireTime) } : {}),
    ...(spec.renewTime ? { renewTime: new Date(spec.renewTime) } : {}),
    leaseTransitions: spec.leaseTransitions ?? 0,
    resourceVersion: lease.metadata?.resourceVersion,
  };
}

function toLease(namespace: string, name: string, record: LeaseRecord): V1Lease {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name, namespace, ...(record.resourceVersion ? { resourceVersion: record.resourceVersion } : {}) },
    spec: {
      holderIdentity: record.holderIdentity,
      leaseDurationSeconds: record.leaseDurationSeconds,
      ...(record.acquireTime ? { acquireTime: record.acquireTime } : {}),
      ...(record.renewTime ? { renewTime: record.renewTime } : {}),
      leaseTransitions: record.leaseTransitions,
    },
  };
}

/** How long a call may wait for the API server: a LIST (an informer's, of every object of a kind), anything else (status, Lease). */
export interface KubeTimeouts {
  listMs: number;
  requestMs: number;
}

/**
 * Without a bound, a call the API server (or a proxy before it) never answers hung its caller for good:
 * a watch that never restarted, a leader that never learned it had lost its lease, a shutdown that
 * waited on a status write. Watches themselves are long-lived and get none.
 */
export const KUBE_TIMEOUTS: KubeTimeouts = { listMs: 60_000, requestMs: 10_000 };

/**
 * Per-call options that abort a request unanswered after `ms`, through the signal client-node's
 * generated client hands to fetch (`RequestContext.setSignal`; test/discovery/kubernetes/kube-credentials.test.ts pins it).
 */
function timeoutOptions(ms: number, opt: ConfigurationOptions<ObservableMiddleware> = {}): ConfigurationOptions<ObservableMiddleware> {
  const bounded: ObservableMiddleware = {
    pre: (context) => {
      context.setSignal(AbortSignal.timeout(ms));
      return new Observable(Promise.resolve(context));
    },
    post: (response) => new Observable(Promise.resolve(response)),
  };
  return { ...opt, middleware: [...(opt.middleware ?? []), bounded], middlewareMergeStrategy: 'append' };
}

/**
 * The API with the credentials {@link resolveKubeCredentials} finds (discovery.kubeconfig, $KUBECONFIG,
 * the service account, ~/.kube/config); `credentials` says which, for the log. Throws
 * {@link KubeCredentialsError} (one line) when none is usable.
 */
export function createKubeApi(input: KubeCredentialsInput, timeouts: KubeTimeouts = KUBE_TIMEOUTS): KubeApi & { readonly credentials: KubeCredentialsSource } {
  const { kubeConfig: kc, source } = resolveKubeCredentials(input);
  const discovery = kc.makeApiClient(DiscoveryV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const bounded = timeoutOptions(timeouts.requestMs);
  const listing = timeoutOptions(timeouts.listMs);
  const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch, bounded);

  const list = (kind: WatchedKind, namespace: string | undefined): (() => Promise<KubernetesListObject<KubernetesObject>>) => {
    if (kind === 'endpointslices') {
      return namespace
        ? () => discovery.listNamespacedEndpointSlice({ namespace, labelSelector: SERVICE_NAME_LABEL }, listing)
        : () => discovery.listEndpointSliceForAllNamespaces({ labelSelector: SERVICE_NAME_LABEL }, listing);
    }
    const plural = kind;
    return namespace
      ? () => custom.listNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace, plural }, listing) as Promise<KubernetesListObject<KubernetesObject>>
      : () => custom.listClusterCustomObject({ group: CRD_GROUP, version: CRD_VERSION, plural }, listing) as Promise<KubernetesListObject<KubernetesObject>>;
  };

  const path = (kind: WatchedKind, namespace: string | undefined): string => {
    const base = kind === 'endpointslices' ? '/apis/discovery.k8s.io/v1' : `/apis/${CRD_GROUP}/${CRD_VERSION}`;
    return namespace ? `${base}/namespaces/${namespace}/${kind}` : `${base}/${kind}`;
  };

  return {
    credentials: source,
    informer(kind, namespace) {
      // What makeInformer builds, plus an unref'd reconnect delay: client-node's stop() does not cancel
      // a pending delay, and its default timer would hold the process open for up to 30 s.
      return new ListWatch(path(kind, namespace), new Watch(kc), list(kind, namespace), false, kind === 'endpointslices' ? SERVICE_NAME_LABEL : undefined, undefined, {
        delayFn: (ms) => delay(ms, undefined, { ref: false }),
      });
    },
    async patchStatus(kind, namespace, name, status) {
      const written = (await custom.patchNamespacedCustomObjectStatus({ group: CRD_GROUP, version: CRD_VERSION, namespace, plural: kind, name, body: { status } }, mergePatch)) as unknown;
      const version = (written as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion;
      return typeof version === 'string' ? version : undefined;
    },
    async readLease(namespace, name) {
      try {
        return toRecord(await coordination.readNamespacedLease({ namespace, name }, bounded));
      } catch (err) {
        if (statusOf(err) === 404) return undefined;
        throw err;
      }
    },
    async createLease(namespace, name, lease) {
      try {
        await coordination.createNamespacedLease({ namespace, body: toLease(namespace, name, lease) }, bounded);
        return true;
      } catch (err) {
        if (statusOf(err) === 409) return false;
        throw err;
      }
    },
    async replaceLease(namespace, name, lease) {
      try {
        await coordination.replaceNamespacedLease({ namespace, name, body: toLease(namespace, name, lease) }, bounded);
        return true;
      } catch (err) {
        if (statusOf(err) === 409) return false;
        throw err;
      }
    },
  };
}
