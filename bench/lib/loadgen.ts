/**
 * The load generator, run as its own process (forked) so that it never shares an event loop with
 * what it measures. Closed loop (N requests always in flight: max throughput) or open loop (arrivals
 * at a fixed rate or a Poisson process, independent of how fast answers come: latency at an offered
 * load). Records per request: time to first body byte (for an engine stream, the first SSE event,
 * i.e. time to first token), time to last byte, status, SSE events and the `x-sim-replica` header.
 * Latencies are measured from the moment the request was scheduled, so a slow target cannot hide
 * its queueing (no coordinated omission). One job can alternate between several URLs (several router
 * processes in front of one fleet): request n goes to `url[n % url.length]`.
 */
import http from 'node:http';
import { mulberry32 } from './random.js';
import { inWorker, serveWorker } from './worker.js';

export interface LoadJob {
  /** Where requests go; several URLs are taken in turn (request n to `url[n % url.length]`). */
  url: string | string[];
  headers: Record<string, string>;
  /** Request bodies, used in order (round and round). */
  bodies: string[];
  /** Extra headers per body (same index as `bodies`), e.g. a session key. */
  bodyHeaders?: Array<Record<string, string>>;
  mode: 'closed' | 'open';
  /** Closed loop: requests in flight. */
  concurrency?: number;
  /** Open loop: requests per second. */
  rate?: number;
  arrivals?: 'fixed' | 'poisson';
  seed?: number;
  warmupMs: number;
  durationMs: number;
  /** Longest time to wait for stragglers after the last arrival. */
  drainMs?: number;
}

export interface Sample {
  /** When it was scheduled, ms after the measured window opened. */
  at: number;
  status: number;
  ttfbMs: number;
  ttlbMs: number;
  events: number;
  replica: string;
  /** Which request of the job (n-th sent, from 0): its body is `bodies[seq % bodies.length]`. */
  seq: number;
  /** Index of the URL it went to (always 0 with one URL). */
  target: number;
  error?: string;
}

export interface LoadResult {
  samples: Sample[];
  /** Length of the measured window (ms). */
  windowMs: number;
  /** Largest delay between an arrival's schedule and its send (open loop): the generator's own lag. */
  maxSendLagMs: number;
  /** Requests finished in all, warm-up included (for CPU per request). */
  finished: number;
}

function countEvents(tail: string, chunk: string): number {
  const text = tail + chunk;
  let n = 0;
  for (let i = text.indexOf('data:'); i !== -1; i = text.indexOf('data:', i + 5)) if (i >= tail.length - 4) n++;
  return n;
}

async function run(job: LoadJob): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 100_000 });
  const targets = (Array.isArray(job.url) ? job.url : [job.url]).map((u) => new URL(u));
  if (targets.length === 0) throw new Error('load job without a URL');
  const samples: Sample[] = [];
  const t0 = performance.now();
  const windowStart = t0 + job.warmupMs;
  const windowEnd = windowStart + job.durationMs;
  let next = 0;
  let maxSendLagMs = 0;
  let finished = 0;

  const once = (scheduledAt: number): Promise<void> =>
    new Promise((resolve) => {
      const seq = next++;
      const body = job.bodies[seq % job.bodies.length]!;
      const extra = job.bodyHeaders?.[seq % job.bodies.length];
      const targetIndex = seq % targets.length;
      const target = targets[targetIndex]!;
      maxSendLagMs = Math.max(maxSendLagMs, performance.now() - scheduledAt);
      const record = (s: Omit<Sample, 'at' | 'seq' | 'target'>): void => {
        finished++;
        if (scheduledAt >= windowStart && scheduledAt < windowEnd) samples.push({ at: scheduledAt - windowStart, seq, target: targetIndex, ...s });
        resolve();
      };
      const req = http.request(
        {
          agent,
          host: target.hostname,
          port: target.port,
          path: target.pathname,
          method: 'POST',
          headers: { ...job.headers, ...extra, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let ttfb = -1;
          let events = 0;
          let tail = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            if (ttfb < 0) ttfb = performance.now() - scheduledAt;
            events += countEvents(tail, chunk);
            tail = chunk.slice(-4);
          });
          res.on('end', () => record({ status: res.statusCode ?? 0, ttfbMs: ttfb, ttlbMs: performance.now() - scheduledAt, events, replica: String(res.headers['x-sim-replica'] ?? '') }));
          res.on('error', (err) => record({ status: res.statusCode ?? 0, ttfbMs: ttfb, ttlbMs: performance.now() - scheduledAt, events, replica: '', error: err.message }));
        },
      );
      req.on('error', (err) => record({ status: 0, ttfbMs: -1, ttlbMs: performance.now() - scheduledAt, events: 0, replica: '', error: err.message }));
      req.end(body);
    });

  if (job.mode === 'closed') {
    const loop = async (): Promise<void> => {
      while (performance.now() < windowEnd) await once(performance.now());
    };
    await Promise.all(Array.from({ length: job.concurrency ?? 1 }, loop));
  } else {
    const rate = job.rate ?? 1;
    const random = mulberry32(job.seed ?? 1);
    const gap = (): number => (job.arrivals === 'poisson' ? -Math.log(1 - random()) : 1) * (1000 / rate);
    await openLoop(t0, windowEnd, gap, once, job.drainMs ?? 60_000);
  }
  agent.destroy();
  return { samples, windowMs: job.durationMs, maxSendLagMs, finished };
}

/**
 * Open-loop arrivals: `once(at)` for each scheduled send time from `t0` until `windowEnd` (`gap()` ms
 * apart), whether or not earlier requests have finished; then waits up to `drainMs` for those in flight.
 */
export async function openLoop(t0: number, windowEnd: number, gap: () => number, once: (at: number) => Promise<void>, drainMs: number): Promise<void> {
  const inflight = new Set<Promise<void>>();
  let at = t0;
  while (at < windowEnd) {
    const now = performance.now();
    while (at <= now && at < windowEnd) {
      const p = once(at);
      inflight.add(p);
      void p.then(() => inflight.delete(p));
      at += gap();
    }
    // a timer is 1 ms at best; sleep only when the next arrival is that far away
    await new Promise((r) => (at - performance.now() > 1.5 ? setTimeout(r, Math.max(0, at - performance.now() - 1)) : setImmediate(r)));
  }
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([Promise.all(inflight), new Promise((r) => (timer = setTimeout(r, drainMs)))]);
  clearTimeout(timer);
}

/** Runs a job in a fresh load-generator process. */
export function load(job: LoadJob): Promise<LoadResult> {
  return inWorker(import.meta.url, '--loadgen-worker', job);
}

serveWorker('--loadgen-worker', run);
