/**
 * One circuit breaker per endpoint. opossum runs the state machine: an open breaker rejects until its
 * cool-down has passed, then lets exactly one probe through (half-open); the probe's success closes it,
 * its failure opens it again. opossum's own trigger is an error rate over a rolling window; ours is
 * consecutive failures, so a counter opens it explicitly. After closing, the endpoint stays on
 * probation for `closeAfterSuccesses` successes: one failure in that time re-opens it at once.
 *
 * Outcomes: `failure` — connection errors, timeouts, 5xx (but 503); `success` — a response the engine
 * produced normally, including 4xx the request caused; `backpressure` — 429 or 503, the engine is alive
 * but busy, which counts as neither (the request is routed elsewhere, the breaker is not moved).
 */
import CircuitBreaker from 'opossum';

export type BreakerState = 'closed' | 'open' | 'half-open';
export type AttemptOutcome = 'success' | 'failure' | 'backpressure';

export interface BreakerSettings {
  failureThreshold: number;
  cooldownMs: number;
  closeAfterSuccesses: number;
}

export interface BreakerEvents {
  onStateChange?: (state: BreakerState) => void;
}

/** The token of one attempt through a breaker: report its outcome exactly once. */
export interface BreakerTicket {
  settle(outcome: AttemptOutcome): void;
}

class Backpressure extends Error {
  constructor() {
    super('backpressure');
    this.name = 'Backpressure';
  }
}

export class EndpointBreaker {
  private readonly circuit: CircuitBreaker<[() => Promise<void>], void>;
  private consecutiveFailures = 0;
  private probation = 0;

  constructor(
    private readonly settings: BreakerSettings,
    events: BreakerEvents = {},
  ) {
    this.circuit = new CircuitBreaker((run: () => Promise<void>) => run(), {
      timeout: false, // timeouts are the proxy's, per phase
      resetTimeout: settings.cooldownMs,
      // opossum's rate-based trigger never fires on its own: consecutive failures open it (below)
      volumeThreshold: Number.MAX_SAFE_INTEGER,
      errorThresholdPercentage: 100,
      errorFilter: (err: unknown) => err instanceof Backpressure,
      rollingCountTimeout: 60_000,
      rollingCountBuckets: 6,
      rollingPercentilesEnabled: false,
      enableSnapshots: false,
    });
    this.circuit.on('open', () => events.onStateChange?.('open'));
    this.circuit.on('halfOpen', () => events.onStateChange?.('half-open'));
    this.circuit.on('close', () => {
      this.probation = Math.max(0, settings.closeAfterSuccesses - 1);
      this.consecutiveFailures = 0;
      events.onStateChange?.('closed');
    });
  }

  get state(): BreakerState {
    if (this.circuit.opened) return 'open';
    return this.circuit.halfOpen ? 'half-open' : 'closed';
  }

  /** Whether a request may go now: closed, or half-open with its probe slot free. */
  available(): boolean {
    return this.circuit.closed || this.circuit.pendingClose;
  }

  /** Starts an attempt; undefined when the breaker rejects it (open, or its probe already taken). */
  begin(): BreakerTicket | undefined {
    if (!this.available()) return undefined;
    let settle!: (outcome: AttemptOutcome) => void;
    const result = new Promise<void>((resolve, reject) => {
      settle = (outcome) => {
        if (outcome === 'failure') reject(new Error('attempt failed'));
        else if (outcome === 'backpressure') reject(new Backpressure());
        else resolve();
      };
    });
    this.circuit.fire(() => result).catch(() => undefined);
    let settled = false;
    return {
      settle: (outcome) => {
        if (settled) return;
        settled = true;
        this.count(outcome);
        settle(outcome);
      },
    };
  }

  /** A failure seen outside an attempt's outcome (a stream the engine broke after it started). */
  recordFailure(): void {
    this.count('failure');
  }

  shutdown(): void {
    this.circuit.shutdown();
  }

  private count(outcome: AttemptOutcome): void {
    if (outcome === 'success') {
      this.consecutiveFailures = 0;
      if (this.probation > 0) this.probation -= 1;
    } else if (outcome === 'failure') {
      this.consecutiveFailures += 1;
      // opossum settles a half-open probe itself; a closed breaker we open from the count
      if (this.circuit.closed && this.shouldOpen()) this.circuit.open();
    }
  }

  private shouldOpen(): boolean {
    return this.consecutiveFailures >= this.settings.failureThreshold || this.probation > 0;
  }
}

/** Breakers by endpoint id, created on first use with the pool's settings. */
export class BreakerRegistry {
  private readonly breakers = new Map<string, { breaker: EndpointBreaker; pool: string }>();

  constructor(private readonly onStateChange?: (pool: string, endpoint: string, state: BreakerState) => void) {}

  get(endpoint: string, pool: string, settings: BreakerSettings): EndpointBreaker {
    let entry = this.breakers.get(endpoint);
    if (!entry) {
      entry = { pool, breaker: new EndpointBreaker(settings, { onStateChange: (state) => this.onStateChange?.(pool, endpoint, state) }) };
      this.breakers.set(endpoint, entry);
    }
    return entry.breaker;
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
    }
  }

  shutdown(): void {
    this.retain(new Set());
  }
}
