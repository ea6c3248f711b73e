/**
 * A fake Kubernetes API server for tests. It speaks the real wire protocol (JSON over plain HTTP on
 * 127.0.0.1, `?watch=true` streams of one JSON event per line, `Status` errors) for the four resources
 * modelgate uses, so `@kubernetes/client-node` can be pointed at it with {@link FakeKubeApi.kubeconfig}.
 *
 * What it models: one global resourceVersion counter, an event history that watches resume from (and
 * that {@link FakeKubeApi.compact} forgets, giving "410 Gone"), label selectors, status subresources
 * with merge patch, optimistic concurrency on PUT, and the faults a watcher has to survive (server
 * down, injected HTTP errors, latency, dropped watches, lost DELETE events). Verbs it does not model
 * answer 405 MethodNotAllowed, so a test notices when it exercises something the fake does not know.
 * Authentication is recorded, never enforced. `close()` leaves no socket and no timer behind.
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, type Socket } from 'node:net';
import { stringify } from 'yaml';

export type FakeResource = 'endpointslices' | 'modelpools' | 'modeldeployments' | 'leases';

interface ResourceType {
  group: string;
  version: string;
  kind: string;
  /** Has a `/status` subresource: writes to the object ignore `status`, writes to `/status` only change it. */
  hasStatus: boolean;
}

const RESOURCES: Readonly<Record<FakeResource, ResourceType>> = {
  endpointslices: { group: 'discovery.k8s.io', version: 'v1', kind: 'EndpointSlice', hasStatus: false },
  modelpools: { group: 'modelgate.io', version: 'v1alpha1', kind: 'ModelPool', hasStatus: true },
  modeldeployments: { group: 'modelgate.io', version: 'v1alpha1', kind: 'ModelDeployment', hasStatus: true },
  leases: { group: 'coordination.k8s.io', version: 'v1', kind: 'Lease', hasStatus: false },
};

const FIRST_RESOURCE_VERSION = 1000;

export interface FakeObjectMeta {
  name: string;
  /** Defaults to `default` in {@link FakeKubeApi.apply}. */
  namespace?: string;
  labels?: Record<string, string>;
  uid?: string;
  resourceVersion?: string;
  /** Set on create when missing; pass one to control an object's age. */
  creationTimestamp?: string;
  generation?: number;
  [field: string]: unknown;
}

/** An object as tests write it: EndpointSlices carry `endpoints`/`ports` at the top level, others a `spec`. */
export interface FakeObject {
  apiVersion?: string;
  kind?: string;
  metadata: FakeObjectMeta;
  spec?: unknown;
  status?: unknown;
  [field: string]: unknown;
}

export interface StoredObject extends FakeObject {
  apiVersion: string;
  kind: string;
  metadata: FakeObjectMeta & { namespace: string; uid: string; resourceVersion: string; creationTimestamp: string; generation: number };
}

export interface RecordedRequest {
  method: string;
  /** The path without the query string. */
  path: string;
  query: Record<string, string>;
  /** The bearer token of the `Authorization` header, if any. */
  token: string | undefined;
  watch: boolean;
}

export interface StatusWrite {
  resource: FakeResource;
  namespace: string;
  name: string;
  token: string | undefined;
  /** The object's `status` as stored after the write. */
  status: unknown;
}

export interface FailFilter {
  /** Only watch requests (true) or only other requests (false). */
  watch?: boolean;
  resource?: FakeResource;
}

type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

interface HistoryEvent {
  resourceVersion: number;
  resource: FakeResource;
  type: EventType;
  object: StoredObject;
  /** The state before a MODIFIED, so a selector watch can turn it into ADDED or DELETED. */
  previous: StoredObject | undefined;
}

interface WireEvent {
  type: EventType | 'BOOKMARK' | 'ERROR';
  object: unknown;
}

interface Requirement {
  key: string;
  op: 'exists' | 'absent' | 'equals' | 'differs';
  value: string;
}

interface Watcher {
  resource: FakeResource;
  namespace: string | undefined;
  selector: Requirement[];
  bookmarks: boolean;
  res: ServerResponse;
  timer: NodeJS.Timeout | undefined;
}

interface Route {
  resource: FakeResource;
  type: ResourceType;
  namespace: string | undefined;
  name: string | undefined;
  subresource: string | undefined;
}

interface Call {
  method: string;
  route: Route;
  query: Record<string, string>;
  watch: boolean;
  token: string | undefined;
  contentType: string;
  body: string;
  res: ServerResponse;
}

interface Fault {
  remaining: number;
  status: number;
  filter: FailFilter;
}

const REASONS: Readonly<Record<number, string>> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  410: 'Expired',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

/** An error answered as a Kubernetes `Status`. */
class StatusError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly details: Record<string, string> | undefined;

  constructor(code: number, message: string, options: { reason?: string; details?: Record<string, string> } = {}) {
    super(message);
    this.code = code;
    this.reason = options.reason ?? REASONS[code] ?? 'Unknown';
    this.details = options.details;
  }

  toStatus(): Record<string, unknown> {
    return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: this.message, reason: this.reason, ...(this.details ? { details: this.details } : {}), code: this.code };
  }
}

export class FakeKubeApi {
  /** Delay before every response (for watches: before the response headers). */
  latencyMs: number;
  /** How a watch resuming from a compacted resourceVersion learns it: a 200 + ERROR event, or an HTTP 410. */
  goneAs: 'event' | 'status' = 'event';
  url = '';
  readonly requests: RecordedRequest[] = [];
  readonly statusWrites: StatusWrite[] = [];

  private readonly server: http.Server;
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly watchers = new Set<Watcher>();
  private readonly store = new Map<FakeResource, Map<string, StoredObject>>();
  private history: HistoryEvent[] = [];
  private faults: Fault[] = [];
  private resourceVersion = FIRST_RESOURCE_VERSION;
  private compactedAt = FIRST_RESOURCE_VERSION;
  private down = false;

  private constructor(latencyMs: number) {
    this.latencyMs = latencyMs;
    this.server = http.createServer((req, res) => this.onRequest(req, res));
    this.server.on('connection', (socket) => {
      if (this.down) {
        socket.destroy();
        return;
      }
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  /** Listens on 127.0.0.1 and a free port. */
  static async start(options: { latencyMs?: number } = {}): Promise<FakeKubeApi> {
    const fake = new FakeKubeApi(options.latencyMs ?? 0);
    await new Promise<void>((resolve) => fake.server.listen(0, '127.0.0.1', resolve));
    fake.url = `http://127.0.0.1:${(fake.server.address() as AddressInfo).port}`;
    return fake;
  }

  /** Ends every watch, destroys every connection, cancels every pending timer and stops listening. */
  async close(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const watcher of this.watchers) this.endWatch(watcher);
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Kubeconfig YAML for this server: plain HTTP (hence `insecure-skip-tls-verify`), a bearer token, namespace `default`. */
  kubeconfig(token = 'test-token'): string {
    return stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'fake', cluster: { server: this.url, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'fake-user', user: { token } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake-user', namespace: 'default' } }],
      'current-context': 'fake',
    });
  }

  /**
   * Creates or replaces an object, as an operator would: an existing object keeps its uid, creation
   * time and (when `obj` has none) status; generation rises only when the spec changes. Every call is
   * a write (ADDED or MODIFIED to watchers), even when nothing changed.
   */
  apply(resource: FakeResource, obj: FakeObject): StoredObject {
    const namespace = obj.metadata.namespace ?? 'default';
    const previous = this.find(resource, namespace, obj.metadata.name);
    const next = this.stamp(resource, structuredClone(obj), namespace, previous);
    if (previous !== undefined && next.status === undefined && previous.status !== undefined) next.status = structuredClone(previous.status);
    return this.commit(resource, previous === undefined ? 'ADDED' : 'MODIFIED', next, previous);
  }

  /**
   * Deletes an object; watchers get DELETED with its last state at a new resourceVersion. `silent`
   * simulates a lost DELETE event: the object is gone from lists but no watch ever reports it.
   * Returns whether the object existed.
   */
  remove(resource: FakeResource, namespace: string, name: string, options: { silent?: boolean } = {}): boolean {
    const previous = this.find(resource, namespace, name);
    if (previous === undefined) return false;
    this.commit(resource, 'DELETED', structuredClone(previous), previous, options.silent === true);
    return true;
  }

  get(resource: FakeResource, namespace: string, name: string): StoredObject | undefined {
    const found = this.find(resource, namespace, name);
    return found === undefined ? undefined : structuredClone(found);
  }

  list(resource: FakeResource, namespace?: string): StoredObject[] {
    return this.matching(resource, namespace, []).map((obj) => structuredClone(obj));
  }

  /** While down, new connections are destroyed at once; going down destroys every open connection (watches included). */
  setDown(down: boolean): void {
    this.down = down;
    if (down) for (const socket of this.sockets) socket.destroy();
  }

  /** The next `count` requests matching `filter` get `status` with a Status body. */
  failNext(count: number, status = 500, filter: FailFilter = {}): void {
    this.faults.push({ remaining: count, status, filter });
  }

  /** Cleanly ends every open watch response, as the API server does when a watch's timeout passes. */
  dropWatches(): void {
    for (const watcher of this.watchers) this.endWatch(watcher);
  }

  /** Forgets the event history up to now: a watch resuming from an older resourceVersion gets 410 Gone. */
  compact(): void {
    this.compactedAt = this.resourceVersion;
    this.history = [];
  }

  /** Sends a BOOKMARK at the current resourceVersion to every watch that asked for `allowWatchBookmarks`. */
  bookmark(): void {
    for (const watcher of this.watchers) {
      if (!watcher.bookmarks) continue;
      const { kind } = RESOURCES[watcher.resource];
      this.send(watcher.res, { type: 'BOOKMARK', object: { kind, apiVersion: apiVersionOf(watcher.resource), metadata: { resourceVersion: String(this.resourceVersion) } } });
    }
  }

  openWatches(): number {
    return this.watchers.size;
  }

  // --- store ---

  private find(resource: FakeResource, namespace: string, name: string): StoredObject | undefined {
    return this.store.get(resource)?.get(`${namespace}/${name}`);
  }

  private matching(resource: FakeResource, namespace: string | undefined, selector: Requirement[]): StoredObject[] {
    const objects = [...(this.store.get(resource)?.values() ?? [])];
    return objects.filter((obj) => isVisible(obj, namespace, selector));
  }

  /** Fills in what the server owns: apiVersion, kind, namespace, uid, creation time, generation. */
  private stamp(resource: FakeResource, obj: FakeObject, namespace: string, previous: StoredObject | undefined): StoredObject {
    const meta = obj.metadata;
    const generation = previous === undefined ? 1 : previous.metadata.generation + (sameSpec(previous, obj) ? 0 : 1);
    const metadata = {
      ...meta,
      namespace,
      uid: previous?.metadata.uid ?? meta.uid ?? randomUUID(),
      creationTimestamp: previous?.metadata.creationTimestamp ?? meta.creationTimestamp ?? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      generation,
      resourceVersion: '',
    };
    return { ...obj, apiVersion: apiVersionOf(resource), kind: RESOURCES[resource].kind, metadata };
  }

  /** Writes at a new resourceVersion and, unless silent, records the event and sends it to matching watches. */
  private commit(resource: FakeResource, type: EventType, object: StoredObject, previous: StoredObject | undefined, silent = false): StoredObject {
    this.resourceVersion += 1;
    object.metadata.resourceVersion = String(this.resourceVersion);
    let objects = this.store.get(resource);
    if (objects === undefined) this.store.set(resource, (objects = new Map<string, StoredObject>()));
    const key = `${object.metadata.namespace}/${object.metadata.name}`;
    if (type === 'DELETED') objects.delete(key);
    else objects.set(key, object);
    if (!silent) {
      const event: HistoryEvent = { resourceVersion: this.resourceVersion, resource, type, object: structuredClone(object), previous };
      this.history.push(event);
      for (const watcher of this.watchers) {
        const wire = project(event, watcher);
        if (wire !== undefined) this.send(watcher.res, wire);
      }
    }
    return structuredClone(object);
  }

  // --- HTTP ---

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    if (this.down) {
      req.socket.destroy();
      return;
    }
    // A request target is a path; prefixing the origin keeps `//x` a path rather than a host.
    const url = new URL(`http://fake${req.url ?? '/'}`);
    const query = Object.fromEntries(url.searchParams);
    const watch = query.watch === 'true' || query.watch === '1';
    const token = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const method = req.method ?? 'GET';
    this.requests.push({ method, path: url.pathname, query, token, watch });
    const route = parseRoute(url.pathname);
    const fault = this.takeFault(route?.resource, watch);
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () =>
      this.later(() => {
        if (res.destroyed || req.socket.destroyed) return;
        const body = Buffer.concat(chunks).toString('utf8');
        const contentType = (req.headers['content-type'] ?? '').split(';')[0]?.trim() ?? '';
        try {
          if (fault !== undefined) throw new StatusError(fault, `injected by FakeKubeApi.failNext (HTTP ${fault})`);
          if (route === undefined) throw new StatusError(404, 'the server could not find the requested resource');
          this.dispatch({ method, route, query, watch, token, contentType, body, res });
        } catch (err) {
          const status = err instanceof StatusError ? err : new StatusError(500, `FakeKubeApi failed: ${String(err)}`);
          if (!res.headersSent) sendJson(res, status.code, status.toStatus());
        }
      }),
    );
  }

  private takeFault(resource: FakeResource | undefined, watch: boolean): number | undefined {
    const fault = this.faults.find(({ filter }) => (filter.watch === undefined || filter.watch === watch) && (filter.resource === undefined || filter.resource === resource));
    if (fault === undefined) return undefined;
    fault.remaining -= 1;
    if (fault.remaining <= 0) this.faults = this.faults.filter((f) => f !== fault);
    return fault.status;
  }

  /** Runs `fn` after the configured latency, with a timer that `close()` cancels. */
  private later(fn: () => void): void {
    if (this.latencyMs <= 0) {
      fn();
      return;
    }
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, this.latencyMs);
    this.timers.add(timer);
  }

  private dispatch(call: Call): void {
    const { method, route } = call;
    if (route.name === undefined) {
      if (method === 'GET') return call.watch ? this.startWatch(call) : this.answerList(call);
      if (method === 'POST' && route.namespace !== undefined) return this.create(call);
    } else if (route.subresource === undefined) {
      if (method === 'GET') return sendJson(call.res, 200, this.existing(route));
      if (method === 'PUT') return this.replace(call);
    } else if (route.subresource === 'status' && route.type.hasStatus) {
      if (method === 'GET') return sendJson(call.res, 200, this.existing(route));
      if (method === 'PUT' || method === 'PATCH') return this.writeStatus(call);
    } else {
      throw new StatusError(404, 'the server could not find the requested resource');
    }
    throw new StatusError(405, 'the server does not allow this method on the requested resource');
  }

  private existing(route: Route): StoredObject {
    const found = route.namespace === undefined || route.name === undefined ? undefined : this.find(route.resource, route.namespace, route.name);
    if (found === undefined) throw new StatusError(404, `${route.resource}.${route.type.group} "${route.name ?? ''}" not found`, { details: detailsOf(route, route.name) });
    return found;
  }

  private answerList({ route, query, res }: Call): void {
    const items = this.matching(route.resource, route.namespace, parseSelector(query.labelSelector));
    sendJson(res, 200, { apiVersion: apiVersionOf(route.resource), kind: `${route.type.kind}List`, metadata: { resourceVersion: String(this.resourceVersion) }, items });
  }

  private create({ route, body, res }: Call): void {
    const obj = parseObject(body);
    const namespace = route.namespace ?? 'default';
    if (obj.metadata.namespace !== undefined && obj.metadata.namespace !== namespace)
      throw new StatusError(400, 'the namespace of the provided object does not match the namespace sent on the request');
    if (this.find(route.resource, namespace, obj.metadata.name) !== undefined) {
      throw new StatusError(409, `${route.resource}.${route.type.group} "${obj.metadata.name}" already exists`, { reason: 'AlreadyExists', details: detailsOf(route, obj.metadata.name) });
    }
    // A status subresource makes the server drop `status` on create, as for CRDs.
    if (route.type.hasStatus) delete obj.status;
    sendJson(res, 201, this.commit(route.resource, 'ADDED', this.stamp(route.resource, obj, namespace, undefined), undefined));
  }

  private replace(call: Call): void {
    const { route, res } = call;
    const obj = parseObject(call.body);
    if (obj.metadata.name !== route.name) throw new StatusError(400, 'the name of the object does not match the name on the URL');
    const previous = this.existing(route);
    checkVersion(route, previous, obj.metadata.resourceVersion);
    const next = this.stamp(route.resource, obj, previous.metadata.namespace, previous);
    if (route.type.hasStatus) next.status = structuredClone(previous.status);
    sendJson(res, 200, this.commit(route.resource, 'MODIFIED', next, previous));
  }

  /** PUT or merge-PATCH of `/status`: only `status` changes, generation stays. */
  private writeStatus(call: Call): void {
    const { route, res } = call;
    const previous = this.existing(route);
    let expected: string | undefined;
    let status: unknown;
    if (call.method === 'PATCH') {
      if (call.contentType !== 'application/merge-patch+json') {
        throw new StatusError(415, `the body of the request was in an unknown format (${call.contentType || 'none'}) - accepted media types include: application/merge-patch+json`);
      }
      const patch = parseJson(call.body);
      if (!isRecord(patch)) throw new StatusError(400, 'a merge patch must be a JSON object');
      expected = isRecord(patch.metadata) && typeof patch.metadata.resourceVersion === 'string' ? patch.metadata.resourceVersion : undefined;
      const merged = mergePatch(previous, patch);
      status = isRecord(merged) ? merged.status : undefined;
    } else {
      const obj = parseObject(call.body);
      expected = obj.metadata.resourceVersion;
      status = obj.status;
    }
    checkVersion(route, previous, expected);
    const next: StoredObject = { ...structuredClone(previous), status: structuredClone(status) };
    if (next.status === undefined) delete next.status;
    const stored = this.commit(route.resource, 'MODIFIED', next, previous);
    this.statusWrites.push({ resource: route.resource, namespace: stored.metadata.namespace, name: stored.metadata.name, token: call.token, status: structuredClone(stored.status) });
    sendJson(res, 200, stored);
  }

  private startWatch({ route, query, res }: Call): void {
    const selector = parseSelector(query.labelSelector);
    const from = query.resourceVersion ?? '';
    let backlog: WireEvent[];
    if (from === '' || from === '0') {
      backlog = this.matching(route.resource, route.namespace, selector).map((object) => ({ type: 'ADDED', object }));
    } else {
      if (!/^\d+$/.test(from)) throw new StatusError(400, `invalid resource version: ${from}`);
      if (Number(from) < this.compactedAt) return this.answerGone(from, res);
      const probe = { resource: route.resource, namespace: route.namespace, selector };
      backlog = this.history.filter((event) => event.resourceVersion > Number(from)).flatMap((event) => project(event, probe) ?? []);
    }
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const watcher: Watcher = { resource: route.resource, namespace: route.namespace, selector, bookmarks: query.allowWatchBookmarks === 'true', res, timer: undefined };
    for (const event of backlog) this.send(res, event);
    this.watchers.add(watcher);
    res.on('close', () => this.endWatch(watcher));
    const timeoutSeconds = Number(query.timeoutSeconds ?? '0');
    if (timeoutSeconds > 0) watcher.timer = setTimeout(() => this.endWatch(watcher), timeoutSeconds * 1000);
  }

  private answerGone(from: string, res: ServerResponse): void {
    const gone = new StatusError(410, `too old resource version: ${from} (${this.compactedAt})`);
    if (this.goneAs === 'status') {
      sendJson(res, 410, gone.toStatus());
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-cache' });
    this.send(res, { type: 'ERROR', object: gone.toStatus() });
    res.end();
  }

  private endWatch(watcher: Watcher): void {
    if (!this.watchers.delete(watcher)) return;
    clearTimeout(watcher.timer);
    watcher.res.end();
  }

  /** One event per line, each written as its own chunk. */
  private send(res: ServerResponse, event: WireEvent): void {
    if (!res.writableEnded && !res.destroyed) res.write(`${JSON.stringify(event)}\n`);
  }
}

function apiVersionOf(resource: FakeResource): string {
  const { group, version } = RESOURCES[resource];
  return `${group}/${version}`;
}

function detailsOf(route: Route, name: string | undefined): Record<string, string> {
  return { name: name ?? '', group: route.type.group, kind: route.resource };
}

function isResource(plural: string): plural is FakeResource {
  return Object.hasOwn(RESOURCES, plural);
}

/** `/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]`; all-namespaces paths only for collections. */
function parseRoute(pathname: string): Route | undefined {
  let parts: string[];
  try {
    parts = pathname.split('/').slice(1).map(decodeURIComponent);
  } catch {
    return undefined;
  }
  if (parts[0] !== 'apis' || parts.length < 4) return undefined;
  const [, group, version, ...rest] = parts;
  const namespaced = rest[0] === 'namespaces';
  const [plural, name, subresource, ...extra] = namespaced ? rest.slice(2) : rest;
  if (plural === undefined || !isResource(plural) || extra.length > 0 || (!namespaced && name !== undefined)) return undefined;
  const type = RESOURCES[plural];
  if (type.group !== group || type.version !== version || (namespaced && !rest[1])) return undefined;
  return { resource: plural, type, namespace: namespaced ? rest[1] : undefined, name, subresource };
}

/** Equality-based selectors: `key`, `!key`, `key=value`, `key==value`, `key!=value`, comma-separated. */
function parseSelector(selector: string | undefined): Requirement[] {
  if (selector === undefined || selector.trim() === '') return [];
  return selector.split(',').map((raw) => {
    const term = raw.trim();
    const match = /^(!?)([A-Za-z0-9._/-]+)(?:(==|!=|=)([A-Za-z0-9._-]*))?$/.exec(term);
    if (match === null || (match[1] === '!' && match[3] !== undefined))
      throw new StatusError(400, `unable to parse requirement: ${JSON.stringify(term)} (the fake supports key, !key, key=value, key==value, key!=value)`);
    const [, not, key = '', op, value = ''] = match;
    if (not === '!') return { key, op: 'absent', value };
    if (op === undefined) return { key, op: 'exists', value };
    return { key, op: op === '!=' ? 'differs' : 'equals', value };
  });
}

function isVisible(obj: StoredObject, namespace: string | undefined, selector: Requirement[]): boolean {
  if (namespace !== undefined && obj.metadata.namespace !== namespace) return false;
  const labels = obj.metadata.labels ?? {};
  return selector.every(({ key, op, value }) => {
    const has = Object.hasOwn(labels, key);
    switch (op) {
      case 'exists':
        return has;
      case 'absent':
        return !has;
      case 'equals':
        return has && labels[key] === value;
      case 'differs':
        return !has || labels[key] !== value;
    }
  });
}

/** What a watch with this namespace and selector sees of an event; objects moving across the selector become ADDED or DELETED. */
function project(event: HistoryEvent, watch: Pick<Watcher, 'resource' | 'namespace' | 'selector'>): WireEvent | undefined {
  if (event.resource !== watch.resource) return undefined;
  const now = isVisible(event.object, watch.namespace, watch.selector);
  const before = event.previous !== undefined && isVisible(event.previous, watch.namespace, watch.selector);
  if (event.type !== 'MODIFIED') return now ? { type: event.type, object: event.object } : undefined;
  if (now) return { type: before ? 'MODIFIED' : 'ADDED', object: event.object };
  if (!before || event.previous === undefined) return undefined;
  const gone = structuredClone(event.previous);
  gone.metadata.resourceVersion = event.object.metadata.resourceVersion;
  return { type: 'DELETED', object: gone };
}

function checkVersion(route: Route, stored: StoredObject, expected: string | undefined): void {
  if (expected === undefined || expected === '' || expected === stored.metadata.resourceVersion) return;
  throw new StatusError(
    409,
    `Operation cannot be fulfilled on ${route.resource}.${route.type.group} "${stored.metadata.name}": the object has been modified; please apply your changes to the latest version and try again`,
    { details: detailsOf(route, stored.metadata.name) },
  );
}

/** Spec = every field but apiVersion, kind, metadata and status (EndpointSlices keep theirs at the top level). */
function sameSpec(a: FakeObject, b: FakeObject): boolean {
  const spec = ({ apiVersion: _a, kind: _k, metadata: _m, status: _s, ...rest }: FakeObject): string => canonical(rest);
  return spec(a) === spec(b);
}

/** JSON with sorted keys, so equal values compare equal whatever their key order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isRecord(value)) {
    const entries = Object.keys(value)
      .filter((key) => value[key] !== undefined)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return structuredClone(patch);
  const out: Record<string, unknown> = isRecord(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function parseJson(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    throw new StatusError(400, 'the request body is not valid JSON');
  }
}

function parseObject(body: string): FakeObject {
  const value = parseJson(body);
  if (!isRecord(value) || !isRecord(value.metadata) || typeof value.metadata.name !== 'string' || value.metadata.name === '') {
    throw new StatusError(422, 'the object needs metadata.name', { reason: 'Invalid' });
  }
  return value as FakeObject;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
