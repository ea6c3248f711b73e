/**
 * One circuit breaker per endpoint. opossum runs the state machine: an open breaker rejects until its
 * cool-down has passed, then lets exactly one probe through (half-open); the probe's success closes it,
 * its failure opens it again. opossum's own trigger is an error rate over a rolling window; ours is
 * consecutive failures, so a counter opens it explicitly (and an attempt through a closed breaker is
 * only counted, never fired through opossum). After closing, the endpoint stays on
 * probation for `closeAfterSuccesses` successes: one failure in that time re-opens it at once.
 *
 * The cool-down runs on the injected {@link Scheduler}, not on opossum's own timer (a real `setTimeout`
 * that tests could only wait out): opossum's `resetTimeout` is the longest a Node timer waits, so its
 * timer never fires in practice, and when our cool-down has passed the open circuit is replaced by one
 * created half-open (see {@link halfOpenCircuit}). Only the probe decides a half-open breaker: an
 * attempt begun before the cool-down that ends during it moves the failure count, not the breaker.
 *
 * Outcomes: `failure` — connection errors, timeouts, 5xx (but 503); `success` — a response the engine
 * produced normally, including 4xx the request caused; `answered` — the engine's answer began and is
 * being relayed: it counts when it ends ({@link EndpointBreaker.answerEnded}: whole, a success; cut by
 * the engine, a failure), so a replica whose every stream breaks after its first tokens is taken out
 * (counted a success at each stream's start, its failure count never reached the threshold); to a
 * half-open probe it is the engine answering, which closes the breaker (an answer that then breaks is
 * the failure that re-opens it during probation); `backpressure` — 429 or 503, the engine is alive
 * but busy, which counts as neither (the request is routed elsewhere, the breaker is not moved) — except
 * on a half-open probe, where opossum takes it for the success it filters it as: the engine answered;
 * `unknown` — the engine did not answer, for a reason not its own (the client left before the first
 * byte, the total timeout ran out): a closed breaker does not count it, and a half-open probe that ends
 * so proves nothing, so the breaker opens again for another cool-down (had it closed, a replica that
 * hangs would be back in rotation whenever a client gave up on its probe).
 */
import CircuitBreaker from 'opossum';
import { type Scheduler, systemScheduler } from '../core/clock.js';

export type BreakerState = 'closed' | 'open' | 'half-open';
export type AttemptOutcome = 'success' | 'failure' | 'answered' | 'backpressure' | 'unknown';

/** The keys of a run of failures a breaker keeps, for the log. */
export const MAX_RUN_KEYS = 5;

export interface BreakerSettings {
  failureThreshold: number;
  cooldownMs: number;
  closeAfterSuccesses: number;
}

export interface BreakerEvents {
  onStateChange?: (state: BreakerState, cause?: string) => void;
  /** What {@link EndpointBreaker.available} answers may have changed (a transition, or the half-open probe taken). */
  onAvailabilityChange?: () => void;
  /** Server errors the engine answered reached the threshold, and the replica passed its health check: the breaker stays closed. `keys`: whose (at most {@link MAX_RUN_KEYS}). */
  onKeptClosed?: (keys: string[], failures: number) => void;
}

/**
 * Whose failure it was, and of what kind. `answered`: the engine answered with a server error (an
 * error status, or its own error event in a stream), which a request can cause; a connection error, a
 * timeout or a broken stream is not `answered`.
 */
export interface FailureSource {
  key?: string;
  answered?: boolean;
}

/**
 * Asks the replica's health check (`true`: it passes), when a run of server errors the engine answered
 * would open its breaker; undefined when the pool has no health path to ask.
 */
export type HealthConfirm = () => Promise<boolean> | undefined;

/** The token of one attempt through a breaker: report its outcome exactly once. */
export interface BreakerTicket {
  settle(outcome: AttemptOutcome, source?: FailureSource): void;
}

class Backpressure extends Error {
  constructor() {
    super('backpressure');
    this.name = 'Backpressure';
  }
}

type Attempt = (run: () => Promise<void>) => Promise<void>;
type Circuit = CircuitBreaker<Parameters<Attempt>, void>;

/** What every circuit runs: the attempt whose ticket settles it. */
const attempt: Attempt = (run) => run();

/** opossum's options plus `state`, which its README documents ("Breaker State Initialization") but its types omit. */
type CircuitOptions = CircuitBreaker.Options<Parameters<Attempt>> & { state?: Partial<CircuitBreaker.State> };

/** The longest delay a Node timer takes (about 24.8 days); opossum's own reset timer is set to it so it never fires. */
const NEVER_MS = 2 ** 31 - 1;

/** The options of every circuit; copy them for each (opossum writes its defaults into the object it gets). */
const OPTIONS: CircuitOptions = {
  timeout: false, // timeouts are the proxy's, per phase
  resetTimeout: NEVER_MS, // the cool-down is ours, on the injected scheduler
  // opossum's rate-based trigger never fires on its own: consecutive failures open it (below)
  volumeThreshold: Number.MAX_SAFE_INTEGER,
  errorThresholdPercentage: 100,
  errorFilter: (err: unknown) => err instanceof Backpressure,
  rollingCountTimeout: 60_000,
  rollingCountBuckets: 6,
  rollingPercentilesEnabled: false,
  enableSnapshots: false,
};

/**
 * A new circuit, already half-open: one probe may go, its success closes the circuit, its failure opens it.
 * opossum has no method that moves a circuit to half-open (only its own reset timer does), but its
 * documented state initialization (README, "Breaker State Initialization") starts one there. The
 * opossum behaviour this relies on is pinned in test/resilience/opossum-contract.test.ts.
 */
function halfOpenCircuit(): Circuit {
  const options: CircuitOptions = { ...OPTIONS, state: { closed: false, open: false, halfOpen: true } };
  return new CircuitBreaker(attempt, options);
}

/** The ticket of an attempt begun while the circuit was closed: its outcome moves the count, once. */
class ClosedTicket implements BreakerTicket {
  private settled = false;

  constructor(
    private readonly breaker: EndpointBreaker,
    private readonly cause: string | undefined,
  ) {}

  settle(outcome: AttemptOutcome, source?: FailureSource): void {
    if (this.settled) return;
    this.settled = true;
    this.breaker.settleClosed(outcome, this.cause, source);
  }
}

export class EndpointBreaker {
  private circuit: Circuit;
  private cooldown: unknown;
  private consecutiveFailures = 0;
  private probation = 0;
  /** The request whose outcome was counted last: the cause of a transition it triggers. */
  private cause: string | undefined;
  /**
   * The keys whose answered server errors make up the current run of failures (the first
   * {@link MAX_RUN_KEYS}, for the log), or `mixed` once it holds a failure of any other kind (or one of
   * no key): only a run of answered server errors asks the health check before it opens the breaker.
   */
  private runKeys: Set<string> | 'mixed' = new Set();
  /** The half-open probe was answered (`answered`): its answer's end is the first success of its probation. */
  private probeAnswered = false;
  /** A health check asked and not yet answered. */
  private confirming = false;
  private stopped = false;
  /** When the current cool-down ends (on {@link now}'s clock): the breaker turns half-open then. */
  private cooldownEndsAt = 0;

  constructor(
    private readonly settings: BreakerSettings,
    private readonly events: BreakerEvents = {},
    private readonly scheduler: Scheduler = systemScheduler,
    private readonly confirm?: HealthConfirm,
    /** Monotonic ms, the clock of {@link cooldownLeftMs} (the scheduler's, in tests). */
    private readonly now: () => number = () => performance.now(),
  ) {
    this.circuit = this.watch(new CircuitBreaker(attempt, { ...OPTIONS }));
  }

  get state(): BreakerState {
    if (this.circuit.opened) return 'open';
    return this.circuit.halfOpen ? 'half-open' : 'closed';
  }

  /**
   * How long until an open breaker turns half-open and lets its probe through (ms, at least 0);
   * undefined when it is not open (closed, or half-open: its probe decides it, at no known time).
   */
  cooldownLeftMs(): number | undefined {
    return this.circuit.opened ? Math.max(0, this.cooldownEndsAt - this.now()) : undefined;
  }

  /** Whether a request may go now: closed, or half-open with its probe slot free. */
  available(): boolean {
    return this.circuit.closed || this.circuit.pendingClose;
  }

  /**
   * Starts an attempt; undefined when the breaker rejects it (open, or its probe already taken).
   * `cause` (the request id) is reported with any transition this attempt's outcome triggers.
   */
  begin(cause?: string): BreakerTicket | undefined {
    if (!this.available()) return undefined;
    // A closed circuit has nothing to decide per attempt (its own rate trigger never fires, the
    // consecutive-failure count below opens it), so only the half-open probe goes through opossum:
    // firing every attempt cost a promise chain, events and rolling-window counts no one reads.
    if (this.circuit.closed) return new ClosedTicket(this, cause);
    let settle!: (outcome: AttemptOutcome) => void;
    const result = new Promise<void>((resolve, reject) => {
      settle = (outcome) => {
        if (outcome === 'failure') reject(new Error('attempt failed'));
        else if (outcome === 'unknown') reject(new Error('the probe got no answer'));
        else if (outcome === 'backpressure') reject(new Backpressure());
        else resolve();
      };
    });
    this.circuit.fire(() => result).catch(() => undefined);
    this.events.onAvailabilityChange?.(); // the probe slot is taken
    let settled = false;
    return {
      settle: (outcome, source) => {
        if (settled) return;
        settled = true;
        this.cause = cause;
        this.probeAnswered = outcome === 'answered';
        this.count(outcome, source);
        settle(outcome);
      },
    };
  }

  /** An attempt begun while the circuit was closed ended (see {@link ClosedTicket}). */
  settleClosed(outcome: AttemptOutcome, cause: string | undefined, source?: FailureSource): void {
    this.cause = cause;
    this.count(outcome, source);
  }

  /**
   * How an answer that began (its attempt settled `answered`) ended: `success` whole, `failure` when
   * the engine broke it (or its stream went silent, or ended in the engine's own server error).
   */
  answerEnded(outcome: 'success' | 'failure', cause?: string, source?: FailureSource): void {
    this.cause = cause;
    this.count(outcome, source);
  }

  shutdown(): void {
    this.stopped = true;
    this.scheduler.clearTimeout(this.cooldown);
    this.cooldown = undefined;
    this.circuit.shutdown();
  }

  /** Reports the circuit's transitions and starts the cool-down whenever it opens. */
  private watch(circuit: Circuit): Circuit {
    circuit.on('open', () => {
      this.scheduler.clearTimeout(this.cooldown);
      this.cooldownEndsAt = this.now() + this.settings.cooldownMs;
      this.cooldown = this.scheduler.setTimeout(() => this.endCooldown(circuit), this.settings.cooldownMs);
      this.events.onAvailabilityChange?.();
      this.events.onStateChange?.('open', this.cause);
    });
    circuit.on('close', () => {
      // the probe's success was counted already; an answered probe's end is yet to come, and counts as the first
      this.probation = Math.max(0, this.settings.closeAfterSuccesses - (this.probeAnswered ? 0 : 1));
      this.probeAnswered = false;
      this.consecutiveFailures = 0;
      this.runKeys = new Set();
      this.events.onAvailabilityChange?.();
      this.events.onStateChange?.('closed', this.cause);
    });
    return circuit;
  }

  /** The cool-down has passed: the open circuit gives way to a half-open one (and its unfired reset timer goes with it). */
  private endCooldown(opened: Circuit): void {
    this.cooldown = undefined;
    if (opened !== this.circuit || !opened.opened) return;
    this.circuit = this.watch(halfOpenCircuit());
    opened.shutdown();
    this.events.onAvailabilityChange?.();
    this.events.onStateChange?.('half-open');
  }

  private count(outcome: AttemptOutcome, source?: FailureSource): void {
    if (outcome === 'success') {
      this.consecutiveFailures = 0;
      if (this.runKeys === 'mixed') this.runKeys = new Set();
      else this.runKeys.clear(); // every request's success comes here: nothing allocated
      if (this.probation > 0) this.probation -= 1;
    } else if (outcome === 'failure') {
      this.consecutiveFailures += 1;
      if (this.runKeys !== 'mixed') {
        if (!source?.answered || source.key === undefined) this.runKeys = 'mixed';
        else if (this.runKeys.size < MAX_RUN_KEYS) this.runKeys.add(source.key);
      }
      // opossum settles a half-open probe itself; a closed breaker we open from the count
      if (this.circuit.closed && this.shouldOpen()) this.openOrAsk();
    }
  }

  /**
   * Opens the closed circuit, unless the run is all server errors the engine answered (outside
   * probation): requests can make an engine fail, and tenants who do it on purpose (with one key or
   * several) would open it for everyone. Then the replica's health check decides: failing (or not
   * answering), the circuit opens; passing, the run is forgotten and the circuit stays closed (an
   * engine that died fails its health path too: vLLM's answers 500 once its engine core is dead).
   */
  private openOrAsk(): void {
    if (this.probation > 0 || this.runKeys === 'mixed') return void this.circuit.open();
    if (this.confirming) return;
    const asked = this.confirm?.();
    if (!asked) return void this.circuit.open();
    this.confirming = true;
    const circuit = this.circuit;
    void asked
      .catch(() => false)
      .then((healthy) => {
        this.confirming = false;
        if (this.stopped || circuit !== this.circuit || !circuit.closed) return; // moved on meanwhile (shut down, opened by another failure)
        if (!healthy) return void circuit.open();
        const keys = this.runKeys;
        if (keys === 'mixed') return void (this.shouldOpen() && circuit.open()); // a failure of another kind came meanwhile
        if (keys.size === 0) return; // a success came meanwhile: the run is over
        const failures = this.consecutiveFailures;
        this.consecutiveFailures = 0;
        this.runKeys = new Set();
        this.events.onKeptClosed?.([...keys], failures);
      });
  }

  private shouldOpen(): boolean {
    return this.consecutiveFailures >= this.settings.failureThreshold || this.probation > 0;
  }
}

/** Breakers by endpoint id, created on first use with the pool's settings. */
export class BreakerRegistry {
  private readonly breakers = new Map<string, { breaker: EndpointBreaker; pool: string }>();
  private changes = 0;
  private readonly changed = (): void => {
    this.changes += 1;
  };

  constructor(
    /** `cause`: the id of the request whose outcome triggered the transition (none for the cool-down's end). */
    private readonly onStateChange?: (pool: string, endpoint: string, state: BreakerState, cause?: string) => void,
    /** Runs the cool-downs; tests pass fake time. */
    private readonly scheduler: Scheduler = systemScheduler,
    /** Asks an endpoint's health check before server errors its engine answered open its breaker (see {@link HealthConfirm}). */
    private readonly confirm?: (pool: string, endpoint: string) => Promise<boolean> | undefined,
    /** Server errors its engine answered did not open a breaker: its replica passed the health check. `keys`: whose. */
    private readonly onKeptClosed?: (pool: string, endpoint: string, keys: string[], failures: number) => void,
    /** Monotonic ms, for how long a cool-down has left (the scheduler's clock in tests). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  get(endpoint: string, pool: string, settings: BreakerSettings): EndpointBreaker {
    let entry = this.breakers.get(endpoint);
    if (!entry) {
      const events: BreakerEvents = {
        onStateChange: (state, cause) => this.onStateChange?.(pool, endpoint, state, cause),
        onAvailabilityChange: this.changed,
        onKeptClosed: (keys, failures) => this.onKeptClosed?.(pool, endpoint, keys, failures),
      };
      const confirm = this.confirm;
      entry = { pool, breaker: new EndpointBreaker(settings, events, this.scheduler, confirm && (() => confirm(pool, endpoint)), this.now) };
      this.breakers.set(endpoint, entry);
    }
    return entry.breaker;
  }

  /** The endpoint's breaker, if it has one (none is made). */
  find(endpoint: string): EndpointBreaker | undefined {
    return this.breakers.get(endpoint)?.breaker;
  }

  /**
   * Grows whenever what some breaker's `available()` answers may have changed — a transition, a
   * half-open probe taken, a breaker dropped — so a reader can keep the answers until it moves.
   */
  get version(): number {
    return this.changes;
  }

  /** Current state of every breaker, for metrics. */
  *states(): IterableIterator<{ pool: string; endpoint: string; state: BreakerState }> {
    for (const [endpoint, { pool, breaker }] of this.breakers) yield { pool, endpoint, state: breaker.state };
  }

  /** Drops breakers of endpoints no longer listed (and their timers). */
  retain(live: ReadonlySet<string>): void {
    for (const [endpoint, { breaker }] of this.breakers) {
      if (live.has(endpoint)) continue;
      breaker.shutdown();
      this.breakers.delete(endpoint);
      this.changes += 1;
    }
  }

  shutdown(): void {
    this.retain(new Set());
  }
}
