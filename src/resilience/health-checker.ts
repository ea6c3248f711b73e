/**
 * Optional active health checks: every endpoint of a pool with `healthCheck.enabled` is probed with a
 * GET on the engine's health path. `unhealthyThreshold` failures in a row eject it from balancing;
 * `healthyThreshold` successes bring it back. This catches a replica that Kubernetes calls Ready but
 * that cannot serve (the breaker, passive, catches the ones failing real requests).
 */
import { nodeClientFor } from '../core/node-https.js';
import { type Scheduler } from '../core/clock.js';
import { type EndpointSource, type PoolSpec } from '../core/types.js';
import { HEALTH_PATHS } from './settings.js';

export type Probe = (url: URL, timeoutMs: number) => Promise<boolean>;

/**
 * 2xx within the timeout is healthy; anything else, including no answer, is not. An `https` engine is
 * probed over TLS (`node:https` loads with the first one, src/core/node-https.ts).
 */
export const httpProbe: Probe = (url, timeoutMs) =>
  new Promise((resolve) => {
    const req = nodeClientFor(url).get(url, { agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      resolve((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 300);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
  });

interface State {
  healthy: boolean;
  /** It has been healthy once: from then on `healthyThreshold` passes bring it back. Before, one pass will do (a replica that finished loading its model). */
  proven: boolean;
  failures: number;
  successes: number;
}

export interface HealthCheckerDeps {
  endpoints: EndpointSource;
  pools: () => readonly PoolSpec[];
  scheduler: Scheduler;
  now: () => number;
  probe?: Probe;
  onChange?: (pool: string, endpoint: string, healthy: boolean) => void;
}

/** Probes at most this many endpoints at once, so one slow replica never holds the others up. */
const CONCURRENCY = 8;

export class HealthChecker {
  private readonly states = new Map<string, State>();
  private readonly lastRun = new Map<string, number>();
  /** When {@link confirm}'s probe of an endpoint last passed. */
  private readonly passedAt = new Map<string, number>();
  private timer: unknown;
  private running = false;
  private stopped = true;
  private changes = 0;

  constructor(private readonly deps: HealthCheckerDeps) {}

  /**
   * Whether the endpoint passes its checks. `unknown`: the answer for an endpoint not probed yet —
   * healthy until proven otherwise, except in a pool that scales from zero, where a replica is ready
   * only once a probe has passed (a replica still loading its model must not get the held requests).
   */
  isHealthy(endpointId: string, unknown = true): boolean {
    return this.states.get(endpointId)?.healthy ?? unknown;
  }

  /**
   * One probe of an endpoint of a pool, now, on the pool's health path (whether or not the pool runs
   * checks): what a breaker asks before server errors its engine answered open it (breaker.ts). Undefined when
   * the pool or endpoint is not known, or its engine has no health path. Its verdict is not the
   * checks' ({@link isHealthy} does not change); a pass is remembered for the pool's check interval.
   */
  confirm(poolName: string, endpointId: string): Promise<boolean> | undefined {
    const pool = this.deps.pools().find((p) => p.name === poolName);
    const path = pool && (pool.resilience.healthCheck.path ?? HEALTH_PATHS[pool.engine]);
    const endpoint = path === undefined ? undefined : this.deps.endpoints.snapshot(poolName).find((ep) => ep.id === endpointId);
    if (!pool || path === undefined || !endpoint) return undefined;
    // a pass stands for the pool's check interval: requests that keep failing ask no faster than its own checks would
    const passed = this.passedAt.get(endpointId);
    const now = this.deps.now();
    if (passed !== undefined && now - passed < pool.resilience.healthCheck.intervalMs) return Promise.resolve(true);
    return (this.deps.probe ?? httpProbe)(new URL(path, endpoint.url), pool.resilience.healthCheck.timeoutMs).then((healthy) => {
      if (this.passedAt.size > 10_000) this.passedAt.clear(); // endpoints come and go: bounded
      if (healthy) this.passedAt.set(endpointId, now);
      else this.passedAt.delete(endpointId);
      return healthy;
    });
  }

  /** Grows whenever what `isHealthy` answers for some endpoint may have changed. */
  get version(): number {
    return this.changes;
  }

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer);
  }

  /** One round: probes the endpoints of every enabled pool whose interval has passed. */
  async runOnce(): Promise<void> {
    const now = this.deps.now();
    const probed = this.deps.pools().filter((p) => p.resilience.healthCheck.enabled && (p.resilience.healthCheck.path ?? HEALTH_PATHS[p.engine]) !== undefined);
    const due = probed.filter((p) => now - (this.lastRun.get(p.name) ?? -Infinity) >= p.resilience.healthCheck.intervalMs);
    const jobs: Array<() => Promise<void>> = [];
    // a verdict stands only while some pool still probes its endpoint: one whose pool turned its checks
    // off, or left, is forgotten (it would keep the replica out of every pool that holds it for good)
    const live = new Set<string>();
    for (const pool of probed) for (const ep of this.deps.endpoints.snapshot(pool.name)) live.add(ep.id);
    for (const pool of due) {
      this.lastRun.set(pool.name, now);
      const check = pool.resilience.healthCheck;
      const path = check.path ?? HEALTH_PATHS[pool.engine] ?? '/health';
      for (const ep of this.deps.endpoints.snapshot(pool.name)) {
        // a probe that throws is a failed check of that endpoint alone, not the end of this round's others
        const probe = this.deps.probe ?? httpProbe;
        jobs.push(async () => {
          let ok = false;
          try {
            ok = await probe(new URL(path, ep.url), check.timeoutMs);
          } catch {
            // ok stays false
          }
          this.record(pool, ep.id, ok);
        });
      }
    }
    for (const [id, state] of this.states) {
      if (live.has(id)) continue;
      this.states.delete(id);
      if (!state.healthy) this.changes += 1;
    }
    let next = 0;
    await Promise.all(
      Array.from({ length: Math.min(CONCURRENCY, jobs.length) }, async () => {
        while (next < jobs.length) await (jobs[next++] as () => Promise<void>)();
      }),
    );
  }

  private record(pool: PoolSpec, endpoint: string, ok: boolean): void {
    const check = pool.resilience.healthCheck;
    let state = this.states.get(endpoint);
    if (!state) {
      // First probe. A pool that scales from zero trusts a replica from its first pass (and not before).
      const unproven = pool.resilience.scaleFromZero.enabled;
      state = { healthy: unproven ? ok : true, proven: !unproven || ok, failures: 0, successes: 0 };
      this.states.set(endpoint, state);
      this.changes += 1; // a reader asking with `unknown = false` gets another answer now
      if (unproven && ok) this.deps.onChange?.(pool.name, endpoint, true);
    }
    if (ok) {
      state.failures = 0;
      state.successes += 1;
      if (!state.healthy && (state.successes >= check.healthyThreshold || !state.proven)) {
        state.healthy = true;
        state.proven = true;
        this.changes += 1;
        this.deps.onChange?.(pool.name, endpoint, true);
      }
    } else {
      state.successes = 0;
      state.failures += 1;
      if (state.healthy && state.failures >= check.unhealthyThreshold) {
        state.healthy = false;
        this.changes += 1;
        this.deps.onChange?.(pool.name, endpoint, false);
      }
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.deps.scheduler.setTimeout(() => {
      if (this.running) return this.schedule(100);
      this.running = true;
      this.runOnce()
        .catch(() => undefined)
        .finally(() => {
          this.running = false;
          this.schedule(this.tickMs());
        });
    }, ms);
  }

  /** Ticks as often as the most frequent enabled pool needs (at least every 100 ms, at most every 5 s). */
  private tickMs(): number {
    const intervals = this.deps
      .pools()
      .filter((p) => p.resilience.healthCheck.enabled)
      .map((p) => p.resilience.healthCheck.intervalMs);
    return Math.max(100, Math.min(5_000, ...intervals));
  }
}
