/**
 * The simulated engine's model load (`--load-time-ms`): for a while after the server starts
 * listening, or after `POST /sim/config {"loadTimeMs": N}`, the replica is loading. Like vLLM, TGI
 * and SGLang warming up, it then answers `/health`, `/v1/models` and inference with 503 (the server
 * decides that; this class only keeps the state). Time comes from the injected clock and sleep, so
 * tests run a load on fake time.
 */
import { type Clock, type Sleep } from '../core/clock.js';

export class SimClosedError extends Error {
  readonly code = 'SIM_CLOSED';
  constructor() {
    super('The simulator closed before its model finished loading.');
  }
}

interface Pending {
  promise: Promise<void>;
  resolve: () => void;
  reject: (err: Error) => void;
  /** When this load began (a restart during the load keeps it). */
  startedAt: number;
}

export class ModelLoad {
  private pending: Pending | undefined;
  private timer: AbortController | undefined;
  private endsAt = 0;

  /** `onLoaded` hears of every load that ends, with how long it took in ms. */
  constructor(
    private readonly time: { clock: Clock; sleep: Sleep },
    private readonly onLoaded: (loadMs: number) => void,
  ) {}

  get loading(): boolean {
    return this.pending !== undefined;
  }

  /** Milliseconds until the load ends; 0 when loaded. */
  remainingMs(): number {
    return this.pending ? Math.max(0, this.endsAt - this.time.clock.now()) : 0;
  }

  /** Resolves when the load under way ends (at once when there is none); rejects with {@link SimClosedError} on {@link stop}. */
  get loaded(): Promise<void> {
    return this.pending?.promise ?? Promise.resolve();
  }

  /**
   * Loads for `ms` from now. During a load this restarts its countdown (the same `loaded` promise
   * then resolves at the new end); `ms` = 0 ends a load at once.
   */
  start(ms: number): void {
    this.timer?.abort();
    this.timer = undefined;
    if (ms <= 0) return this.finish();
    this.pending ??= this.newPending();
    this.endsAt = this.time.clock.now() + ms;
    const timer = new AbortController();
    this.timer = timer;
    // An aborted wait means a restart or stop took over; that one settles the promise.
    this.time.sleep(ms, timer.signal).then(
      () => {
        if (this.timer === timer) this.finish();
      },
      () => undefined,
    );
  }

  /** Abandons a load under way (the server is closing): its timer is cleared and `loaded` rejects. */
  stop(): void {
    this.timer?.abort();
    this.timer = undefined;
    const pending = this.pending;
    this.pending = undefined;
    pending?.reject(new SimClosedError());
  }

  private finish(): void {
    this.timer = undefined;
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    this.onLoaded(this.time.clock.now() - pending.startedAt);
    pending.resolve();
  }

  private newPending(): Pending {
    let resolve!: () => void;
    let reject!: (err: Error) => void;
    const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
    // Nobody need wait for a load: a rejection on close must not count as unhandled.
    promise.catch(() => undefined);
    return { promise, resolve, reject, startedAt: this.time.clock.now() };
  }
}
