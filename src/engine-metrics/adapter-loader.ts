/**
 * Loads a LoRA adapter onto a replica on demand, through vLLM's `POST /v1/load_lora_adapter`
 * (`{"lora_name", "lora_path"}`; 200 with a plain-text "Success" line). Used only by pools with
 * `routing.lora.loadOnDemand`, before a request for an adapter goes to a replica the router knows of
 * no copy on. Bounded: at most `maxConcurrentLoads` loads in flight per pool and `maxLoadsPerReplica`
 * per replica (the rest wait their turn), and one load per replica and adapter at a time — every
 * request that needs it waits for that one. A load and its wait together take at most `loadTimeoutMs`.
 *
 * An engine that already has the adapter answers 400 "has already been loaded": that is a success.
 * Every other answer, a connection error or the deadline fails the request with ADAPTER_LOAD_FAILED.
 */
import { nodeClientFor } from '../core/node-https.js';
import { type Scheduler } from '../core/clock.js';
import { RouterError } from '../core/errors.js';
import { type Endpoint, type PoolSpec } from '../core/types.js';

/** POSTs a JSON body; resolves with the status and (the first 64 KiB of the) text, rejects on a connection error or when `signal` aborts. */
export type PostJson = (url: URL, body: string, headers: Record<string, string>, signal: AbortSignal) => Promise<{ status: number; text: string }>;

export type AdapterLoadResult = 'loaded' | 'already_loaded' | 'failed' | 'timeout';

export interface AdapterLoaderDeps {
  scheduler: Scheduler;
  /** Default: `node:http`/`node:https`, one connection per load. */
  post?: PostJson;
  /** Called once per load call made to an engine (not per request waiting for it). */
  onLoad?: (pool: string, adapter: string, endpoint: string, result: AdapterLoadResult, message?: string) => void;
}

const MAX_ANSWER_BYTES = 64 * 1024;
const PATH = '/v1/load_lora_adapter';

interface Turn {
  pool: PoolSpec;
  endpoint: string;
  start: () => void;
}

export class AdapterLoader {
  /** Loads in flight (or waiting for a turn), by replica and adapter. */
  private readonly pending = new Map<string, Promise<void>>();
  private readonly perPool = new Map<string, number>();
  private readonly perReplica = new Map<string, number>();
  private readonly turns: Turn[] = [];

  constructor(private readonly deps: AdapterLoaderDeps) {}

  /**
   * Resolves once the pool's adapter can be served by `endpoint`: at once when the router knows it is
   * there (`held`) and no load of it is under way, else when the load (this call's, or the one under
   * way) succeeds. Rejects with ADAPTER_LOAD_FAILED, or an AbortError when `signal` aborts (the load
   * itself goes on for the requests still waiting for it).
   */
  ensure(pool: PoolSpec, endpoint: Endpoint, held: boolean, signal?: AbortSignal): Promise<void> {
    const adapter = pool.adapter;
    if (!adapter) return Promise.resolve();
    const key = `${endpoint.id}\n${adapter.name}`;
    let load = this.pending.get(key);
    if (load === undefined) {
      if (held) return Promise.resolve();
      load = this.load(pool, endpoint).finally(() => this.pending.delete(key));
      this.pending.set(key, load);
    }
    return untilAborted(load, signal);
  }

  /** Loads in flight or waiting for a turn. */
  get size(): number {
    return this.pending.size;
  }

  private load(pool: PoolSpec, endpoint: Endpoint): Promise<void> {
    const adapter = pool.adapter as NonNullable<PoolSpec['adapter']>;
    const { loadTimeoutMs } = pool.routing.lora;
    const controller = new AbortController();
    return new Promise<void>((resolve, reject) => {
      let started = false;
      const turn: Turn = { pool, endpoint: endpoint.id, start: () => run() };
      const fail = (result: AdapterLoadResult, why: string): void => {
        this.deps.onLoad?.(pool.name, adapter.name, endpoint.id, result, why);
        reject(new RouterError('ADAPTER_LOAD_FAILED', `Could not load the LoRA adapter \`${adapter.name}\` on a replica: ${why}`));
      };
      const deadline = this.deps.scheduler.setTimeout(() => {
        controller.abort();
        const waiting = this.turns.indexOf(turn);
        if (waiting >= 0) this.turns.splice(waiting, 1);
        fail('timeout', started ? `the engine did not answer within ${loadTimeoutMs} ms.` : `no turn to load within ${loadTimeoutMs} ms (too many loads under way).`);
      }, loadTimeoutMs);
      const run = (): void => {
        started = true;
        this.take(pool.name, endpoint.id, 1);
        const headers: Record<string, string> = { 'content-type': 'application/json' };
        if (pool.backendKey !== undefined) headers.authorization = `Bearer ${pool.backendKey}`;
        const body = JSON.stringify({ lora_name: adapter.name, lora_path: adapter.path ?? adapter.name });
        void (this.deps.post ?? postJson)(new URL(PATH, endpoint.url), body, headers, controller.signal)
          .then(
            ({ status, text }) => {
              if (controller.signal.aborted) return;
              const message = engineMessage(text);
              if (status >= 200 && status < 300) {
                this.deps.onLoad?.(pool.name, adapter.name, endpoint.id, 'loaded');
                resolve();
              } else if (status === 400 && /already been loaded/i.test(message)) {
                this.deps.onLoad?.(pool.name, adapter.name, endpoint.id, 'already_loaded');
                resolve();
              } else fail('failed', `the engine answered ${status}${message === '' ? '' : `: ${message}`}`);
            },
            (err: unknown) => {
              if (!controller.signal.aborted) fail('failed', `the engine could not be reached (${err instanceof Error ? err.message : String(err)}).`);
            },
          )
          .finally(() => {
            this.deps.scheduler.clearTimeout(deadline);
            this.take(pool.name, endpoint.id, -1);
            this.next();
          });
      };
      if (this.hasTurn(pool, endpoint.id)) run();
      else this.turns.push(turn);
    });
  }

  private hasTurn(pool: PoolSpec, endpoint: string): boolean {
    const { maxConcurrentLoads, maxLoadsPerReplica } = pool.routing.lora;
    return (this.perPool.get(pool.name) ?? 0) < maxConcurrentLoads && (this.perReplica.get(endpoint) ?? 0) < maxLoadsPerReplica;
  }

  private take(pool: string, endpoint: string, by: 1 | -1): void {
    for (const [map, key] of [
      [this.perPool, pool],
      [this.perReplica, endpoint],
    ] as const) {
      const count = (map.get(key) ?? 0) + by;
      if (count > 0) map.set(key, count);
      else map.delete(key);
    }
  }

  /** Starts the waiting loads that now have a turn, in order. */
  private next(): void {
    for (let i = 0; i < this.turns.length;) {
      const turn = this.turns[i] as Turn;
      if (!this.hasTurn(turn.pool, turn.endpoint)) {
        i++;
        continue;
      }
      this.turns.splice(i, 1);
      turn.start();
    }
  }
}

/** The engine's error message from its answer (vLLM's flat or nested envelope, or plain text), short and on one line. */
function engineMessage(text: string): string {
  let message = text;
  try {
    const body = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } };
    const found = body.error?.message ?? body.message;
    if (typeof found === 'string') message = found;
  } catch {
    // plain text
  }
  message = message.replace(/\s+/g, ' ').trim();
  return message.length > 300 ? message.slice(0, 300) + '…' : message;
}

/** `work`, or an AbortError as soon as `signal` aborts (the work goes on for whoever else waits for it). */
function untilAborted(work: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return work;
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason instanceof Error ? signal.reason : new DOMException('The client went away', 'AbortError'));
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    void work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** The default {@link PostJson}: a fresh connection per load (loads are rare). */
export const postJson: PostJson = (url, body, headers, signal) =>
  new Promise((resolve, reject) => {
    const req = nodeClientFor(url).request(url, { method: 'POST', agent: false, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) }, signal });
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        if (bytes < MAX_ANSWER_BYTES) chunks.push(chunk);
        bytes += chunk.length;
      });
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8').slice(0, MAX_ANSWER_BYTES) }));
    });
    req.end(body);
  });
