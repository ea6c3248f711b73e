/**
 * One watched kind in one namespace, kept alive. client-node's informer relists on 410 Gone and
 * reconnects a watch that ended normally, but any other error (a 5xx, a refused connection, a failed
 * list) makes it fire `error` and stop for good. Around it:
 *
 * - restart after an error with capped, jittered, doubling backoff;
 * - a periodic full relist: a fresh informer lists and watches from scratch and replaces the running
 *   one once it has synced, so an object whose DELETE event was lost (a "ghost") cannot outlive one
 *   resync interval;
 * - while the API server is unreachable, the last synced cache keeps serving and the state says so.
 *
 * client-node quirks this relies on: `start()` resolves (never rejects) on these failures, after the
 * `error` event; `stop()` itself emits an `error`; and a stopped informer may still open one more watch
 * after a pending reconnect delay, so events count only from the informer that is active.
 */
import { type Scheduler } from '../../core/clock.js';

/** The part of a client-node informer this module uses. */
export interface InformerLike<T> {
  on(verb: 'add' | 'update' | 'delete', cb: (obj: T) => void): void;
  on(verb: 'error', cb: (err?: unknown) => void): void;
  start(): Promise<void>;
  stop(): Promise<void>;
  list(): readonly T[];
}

export interface WatchState {
  /** The running informer is healthy (false after an error until a restart syncs). */
  up: boolean;
  /** A list has completed at least once. */
  synced: boolean;
  /** Wall-clock ms of the last completed list. */
  lastSyncAt: number | undefined;
  restarts: number;
  lastError: string | undefined;
}

export interface WatchOptions {
  /** For logs and metrics, e.g. `endpointslices` in `models`. */
  kind: string;
  namespace: string;
  resyncIntervalMs: number;
  backoff: { initialMs: number; maxMs: number };
  scheduler: Scheduler;
  random: () => number;
  /** The cache changed (an event on the running informer, or a new informer took over). */
  onChange: () => void;
  onEvent?: (type: 'add' | 'update' | 'delete') => void;
  /** Called on every state change (sync, failure, restart). */
  onState?: (state: Readonly<WatchState>, error?: unknown) => void;
}

/** Doubling delay capped at `maxMs`, then "equal jitter": somewhere in its upper half. */
export function backoffDelay(attempt: number, backoff: { initialMs: number; maxMs: number }, random: () => number): number {
  const ceiling = Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(attempt, 30));
  return ceiling / 2 + random() * (ceiling / 2);
}

/**
 * An error of the Kubernetes client, said the way an operator reads it: for the API server's own
 * answer (client-node's `ApiException`: its `code` and the `Status` in its `body`), `HTTP 403
 * Forbidden: <the Status message>` — the verb, resource and namespace refused — rather than the
 * client's dump ("Unknown API Status Code!", escaped JSON, every header).
 */
export function describeKubeError(err: unknown): string {
  const api = err as { code?: unknown; body?: unknown } | null;
  if (typeof api === 'object' && api !== null && typeof api.code === 'number' && 'body' in api) {
    const code = api.code;
    let body = api.body;
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body) as unknown;
      } catch {
        // not JSON: said as it is, cut short
      }
    }
    if (typeof body === 'object' && body !== null) {
      const { reason, message } = body as { reason?: unknown; message?: unknown };
      const said = [typeof reason === 'string' ? reason : undefined, typeof message === 'string' ? message : undefined].filter(Boolean);
      if (said.length > 0) return `HTTP ${code} ${said.join(': ')}`.slice(0, 500);
    }
    if (typeof body === 'string' && body.trim() !== '') return `HTTP ${code}: ${body.trim().slice(0, 300)}`;
    return `HTTP ${code}`;
  }
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

const describe = describeKubeError;

export class ResilientWatch<T> {
  readonly state: WatchState = { up: false, synced: false, lastSyncAt: undefined, restarts: 0, lastError: undefined };
  private active: InformerLike<T> | undefined;
  private pending: InformerLike<T> | undefined;
  private timer: unknown;
  private failures = 0;
  private stopped = false;

  constructor(
    private readonly create: () => InformerLike<T>,
    private readonly options: WatchOptions,
  ) {}

  start(): void {
    this.stopped = false;
    this.launch();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.clearTimer();
    const informers = [this.active, this.pending].filter((i): i is InformerLike<T> => i !== undefined);
    this.pending = undefined;
    await Promise.all(informers.map((i) => i.stop()));
  }

  /** The objects of the last synced informer (still served when the API server is gone). */
  items(): readonly T[] {
    return this.active?.list() ?? [];
  }

  private launch(): void {
    if (this.stopped || this.pending) return;
    const informer = this.create();
    this.pending = informer;
    let startError: { err: unknown } | undefined;
    const onObject = (type: 'add' | 'update' | 'delete') => () => {
      if (this.active !== informer) return;
      this.options.onEvent?.(type);
      this.options.onChange();
    };
    informer.on('add', onObject('add'));
    informer.on('update', onObject('update'));
    informer.on('delete', onObject('delete'));
    informer.on('error', (err?: unknown) => {
      // client-node also reports its own stop() as an error: ignore whatever comes after we stop
      if (this.stopped) return;
      if (this.active === informer) this.runningFailed(err);
      else startError ??= { err };
    });
    informer.start().then(
      () => this.started(informer, startError),
      (err: unknown) => this.started(informer, { err }),
    );
  }

  private started(informer: InformerLike<T>, failure: { err: unknown } | undefined): void {
    if (this.pending !== informer) {
      void informer.stop(); // stopped meanwhile
      return;
    }
    this.pending = undefined;
    if (failure) {
      void informer.stop();
      this.state.lastError = describe(failure.err);
      this.retry(failure.err);
      return;
    }
    const previous = this.active;
    this.active = informer;
    if (previous) void previous.stop();
    this.failures = 0;
    Object.assign(this.state, { up: true, synced: true, lastSyncAt: Date.now(), lastError: undefined });
    this.options.onState?.(this.state);
    this.options.onChange();
    this.schedule(this.options.resyncIntervalMs);
  }

  /** The running informer died (client-node does not restart it): keep its cache, start over later. */
  private runningFailed(err: unknown): void {
    Object.assign(this.state, { up: false, lastError: describe(err) });
    this.retry(err);
  }

  private retry(err: unknown): void {
    if (this.stopped) return;
    this.state.restarts += 1;
    this.options.onState?.(this.state, err);
    this.schedule(backoffDelay(this.failures++, this.options.backoff, this.options.random));
  }

  private schedule(ms: number): void {
    this.clearTimer();
    if (this.stopped) return;
    this.timer = this.options.scheduler.setTimeout(() => {
      this.timer = undefined;
      this.launch();
    }, ms);
  }

  private clearTimer(): void {
    if (this.timer !== undefined) this.options.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
  }
}
