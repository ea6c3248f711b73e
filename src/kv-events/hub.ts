/**
 * Keeps one KV-event feed per replica of every pool with `routing.kvEvents.enabled`, following
 * discovery (a tick compares each pool's endpoints with the feeds: new replicas are subscribed, gone
 * ones closed, a changed setting resubscribes), and answers the picker's {@link KvPrefixSource}
 * questions from them. `zeromq` and msgpack are loaded on the first enabled pool, never before: a
 * router without KV events pays nothing for them. A pool with `tokenizer: huggingface` is subscribed
 * once its model's tokenizer files are loaded (hf-tokenizer.ts, with the two Hugging Face libraries:
 * also loaded only then, once per directory; a directory that failed is tried again, one whose files
 * changed is read again); the hub then renders that pool's prompts too.
 */
import { type Scheduler } from '../core/clock.js';
import { type EndpointSource, type KvEventsSettings, type KvPrefixSource, type PoolSpec, type PromptSource } from '../core/types.js';
import type { FeedState } from './feed.js';
import type { HfModel } from './hf-tokenizer.js';
import type { SkipReason } from './wire.js';
import type { FeedTarget, ZmqFeed } from './zmq-transport.js';

export interface KvEventsEvents {
  onBatch?: (pool: string, stored: number, removed: number, cleared: number) => void;
  onGap?: (pool: string, recovered: boolean) => void;
  /** A batch skipped: not a KVEventBatch, or over the bounds (`malformed`). */
  onBadPayload?: (pool: string, endpoint: string, message: string, reason: SkipReason) => void;
  /** A replica's batch waited `ms` for its share of the event loop (feed.ts APPLY_BUDGET). */
  onThrottled?: (pool: string, endpoint: string, ms: number) => void;
  /** A replica's subscription failed for good (it stays on the estimate). */
  onError?: (pool: string, endpoint: string, err: Error) => void;
  /** A replica's engine cleared its whole cache (the estimate should forget the replica too). */
  onCleared?: (endpoint: string) => void;
  /**
   * Replicas of a pool whose `kvEvents.endpoint` names one publisher (engines on one host, whose
   * `{host}` is the same): none of them is subscribed, as no one of them can be told its own events.
   * Said once per pool and address, while it lasts.
   */
  onSharedFeed?: (pool: string, address: string, endpoints: readonly string[]) => void;
}

/** What the hub needs of the transport module (zmq-transport.ts). */
export interface FeedTransport {
  ZmqFeed: new (...args: ConstructorParameters<typeof ZmqFeed>) => Pick<ZmqFeed, 'feed' | 'close'>;
}

export interface KvEventsHubDeps {
  endpoints: EndpointSource;
  pools: () => readonly PoolSpec[];
  scheduler: Scheduler;
  now: () => number;
  events?: KvEventsEvents;
  /** Loads the transport (default: zmq-transport.ts, by a dynamic import). */
  transport?: () => Promise<FeedTransport>;
  /** Loads a model's tokenizer directory (default: hf-tokenizer.ts `loadHfModel`, by a dynamic import). */
  loadTokenizer?: (dir: string) => Promise<HfModel>;
  /** What the directory's files are now, as a string that changes when they do (default: hf-tokenizer.ts `tokenizerStamp`: their mtimes and sizes). */
  stampTokenizer?: (dir: string) => Promise<string>;
  /** How often subscriptions follow discovery (default 1 s). */
  syncIntervalMs?: number;
}

/** One pool's feeds as the metrics count them. */
export interface KvEventsPoolStats {
  pool: string;
  replicas: Record<FeedState, number>;
  /** Replicas whose publisher the router is connected to now. */
  connected: number;
  /** Engine blocks held, over the pool's replicas, as their events said. */
  blocks: number;
}

/**
 * A tokenizer directory: loading (its pools wait), loaded, or failed (its pools are read as opaque).
 * A failed one is tried again after a backoff; a loaded one's files are checked now and then, and
 * read again when they changed (a ModelPool's ConfigMap updated in place). One no pool names is dropped.
 */
interface TokenizerEntry {
  model?: HfModel;
  /** Models loaded so far: a pool's feeds are subscribed again with a new one (their index was read with the old). */
  generation: number;
  /** The files as they were when `model` was read. */
  stamp?: string;
  /** Failed loads in a row. */
  failures: number;
  /** A load or a check runs. */
  busy: boolean;
  /** When to try a failed directory again, or check a loaded one's files. */
  nextAt: number;
}

/** How often a loaded directory's files are checked for a change. */
const TOKENIZER_CHECK_MS = 10_000;
/** A failed directory is tried again after 1 s, then twice as long each time, up to a minute. */
const TOKENIZER_RETRY_MS = 1_000;
const TOKENIZER_RETRY_MAX_MS = 60_000;

interface Subscription {
  signature: string;
  /** The pool's tokenizer lets the router read the events' blocks (else only the estimate answers). */
  readable: boolean;
  live: Pick<ZmqFeed, 'feed' | 'close'>;
}

const STATE_CODE: Record<FeedState, 0 | 1 | 2> = { unknown: 0, partial: 1, complete: 2 };

/**
 * The replica's publisher (or replay socket) address: `{host}` replaced by the endpoint's host, `{port}`
 * by its port (engines on one host, on four-digit ports: `tcp://{host}:1{port}` gives the engine on 8000 the publisher on 18000).
 */
export function feedAddress(template: string, url: URL): string {
  const port = url.port !== '' ? url.port : url.protocol === 'https:' ? '443' : '80';
  return template.split('{host}').join(url.hostname).split('{port}').join(port);
}

function signature(k: KvEventsSettings, blockChars: number, reader: HfModel | undefined, generation: number): string {
  return [k.endpoint, k.replayEndpoint ?? '', k.topic ?? '', k.staleAfterMs, k.tokenizer, k.tokenizerDir ?? '', reader ? `read ${generation}` : '', k.maxBlocksPerReplica, blockChars].join('\n');
}

export class KvEventsHub implements KvPrefixSource {
  /** pool → endpoint id → subscription (nested, so a pick's lookups build no key). */
  private readonly byPool = new Map<string, Map<string, Subscription>>();
  /** `pool address` of publishers that several replicas map to, said already. */
  private readonly shared = new Set<string>();
  /** Tokenizer directory → its model (huggingface pools). */
  private readonly tokenizers = new Map<string, TokenizerEntry>();
  /** Pool → the model its prompts are rendered with (huggingface pools whose model is loaded), and the characters of them its prefix scorer uses. */
  private readonly renderers = new Map<string, { model: HfModel; usedChars: number }>();
  private transport: FeedTransport | undefined;
  private loading: Promise<void> | undefined;
  private timer: unknown;
  private stopped = false;

  constructor(private readonly deps: KvEventsHubDeps) {}

  start(): void {
    this.stopped = false;
    this.sync();
    const every = this.deps.syncIntervalMs ?? 1_000;
    const tick = (): void => {
      this.sync();
      this.timer = this.deps.scheduler.setTimeout(tick, every);
    };
    this.timer = this.deps.scheduler.setTimeout(tick, every);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.deps.scheduler.clearTimeout(this.timer);
    this.timer = undefined;
    for (const subs of this.byPool.values()) for (const sub of subs.values()) sub.live.close();
    this.byPool.clear();
  }

  state(pool: string, endpointId: string): 0 | 1 | 2 {
    const sub = this.byPool.get(pool)?.get(endpointId);
    return sub === undefined || !sub.readable ? 0 : STATE_CODE[sub.live.feed.state()];
  }

  promptText(pool: string, prompt: PromptSource): string | undefined {
    const renderer = this.renderers.get(pool);
    return renderer?.model.promptText(prompt, renderer.usedChars);
  }

  match(pool: string, endpointId: string, blocks: readonly number[]): number {
    return this.byPool.get(pool)?.get(endpointId)?.live.feed.index.match(blocks) ?? 0;
  }

  stats(): KvEventsPoolStats[] {
    const now = this.deps.now();
    const out: KvEventsPoolStats[] = [];
    for (const [pool, subs] of this.byPool) {
      const replicas: Record<FeedState, number> = { complete: 0, partial: 0, unknown: 0 };
      let blocks = 0;
      let connected = 0;
      for (const sub of subs.values()) {
        replicas[sub.live.feed.state(now)] += 1;
        if (sub.live.feed.isConnected) connected++;
        blocks += sub.live.feed.index.size;
      }
      out.push({ pool, replicas, connected, blocks });
    }
    return out;
  }

  /** Subscribes new replicas of enabled pools, closes the feeds of replicas or pools that are gone. */
  sync(): void {
    if (this.stopped) return;
    const enabled = this.deps.pools().filter((p) => p.routing.kvEvents.enabled);
    if (enabled.length > 0 && this.transport === undefined) {
      this.load();
      return;
    }
    const transport = this.transport;
    const keep = new Set(enabled.map((p) => p.name));
    for (const [pool, subs] of this.byPool) {
      if (keep.has(pool)) continue;
      for (const sub of subs.values()) sub.live.close();
      this.byPool.delete(pool);
    }
    for (const pool of this.renderers.keys()) if (!keep.has(pool)) this.renderers.delete(pool);
    if (transport === undefined) return;
    this.syncTokenizers(enabled);
    for (const pool of enabled) this.syncPool(pool, transport);
  }

  /** Starts the loads, retries and checks of the tokenizer directories huggingface pools name, and drops those none names. */
  private syncTokenizers(enabled: readonly PoolSpec[]): void {
    const users = new Map<string, string[]>();
    for (const pool of enabled) {
      const { tokenizer, tokenizerDir } = pool.routing.kvEvents;
      if (tokenizer !== 'huggingface' || tokenizerDir === undefined) continue;
      const names = users.get(tokenizerDir);
      if (names) names.push(pool.name);
      else users.set(tokenizerDir, [pool.name]);
    }
    for (const dir of this.tokenizers.keys()) if (!users.has(dir)) this.tokenizers.delete(dir);
    const now = this.deps.now();
    for (const [dir, pools] of users) {
      let entry = this.tokenizers.get(dir);
      if (!entry) this.tokenizers.set(dir, (entry = { generation: 0, failures: 0, busy: false, nextAt: now }));
      if (!entry.busy && now >= entry.nextAt) this.refresh(dir, entry, pools);
    }
  }

  /** Loads `dir`, unless its files are as they were when its model was read. */
  private refresh(dir: string, entry: TokenizerEntry, pools: readonly string[]): void {
    entry.busy = true;
    const load = this.deps.loadTokenizer ?? (async (d: string) => (await import('./hf-tokenizer.js')).loadHfModel(d));
    const stampOf = this.deps.stampTokenizer ?? (async (d: string) => (await import('./hf-tokenizer.js')).tokenizerStamp(d));
    const run = async (): Promise<void> => {
      const stamp = await stampOf(dir).catch(() => undefined);
      if (entry.model !== undefined && stamp !== undefined && stamp === entry.stamp) {
        entry.failures = 0; // the model read is the files' (a failure since was passing): checked at the usual pace again
        return;
      }
      try {
        const model = await load(dir);
        // a stamp taken before a change the load read is older than the files: the next check loads them again, no harm
        Object.assign(entry, { model, stamp, failures: 0, generation: entry.generation + 1 });
      } catch (err) {
        entry.failures += 1;
        // a loaded model stays until its files load again (a half-written update is not the model's end)
        for (const pool of pools) this.deps.events?.onError?.(pool, '*', err instanceof Error ? err : new Error(String(err)));
      }
    };
    void run().finally(() => {
      entry.busy = false;
      const wait = entry.failures === 0 ? TOKENIZER_CHECK_MS : Math.min(TOKENIZER_RETRY_MAX_MS, TOKENIZER_RETRY_MS * 2 ** (entry.failures - 1));
      entry.nextAt = this.deps.now() + wait;
      if (this.tokenizers.get(dir) === entry) this.sync();
    });
  }

  private load(): void {
    this.loading ??= (this.deps.transport ?? (() => import('./zmq-transport.js')))().then(
      (transport) => {
        this.transport = transport;
        this.sync();
      },
      (err: unknown) => {
        this.loading = undefined; // tried again on the next tick
        this.deps.events?.onError?.('*', '*', err instanceof Error ? err : new Error(String(err)));
      },
    );
  }

  /**
   * The model a huggingface pool's events are read with: undefined while its directory loads (the
   * pool waits, unsubscribed) — `null` for other pools and for a directory that failed (read as opaque).
   */
  private readerFor(pool: PoolSpec): HfModel | null | undefined {
    const settings = pool.routing.kvEvents;
    if (settings.tokenizer !== 'huggingface' || settings.tokenizerDir === undefined) {
      this.renderers.delete(pool.name);
      return null;
    }
    const entry = this.tokenizers.get(settings.tokenizerDir); // syncTokenizers made it
    if (!entry) return undefined;
    if (entry.model) this.renderers.set(pool.name, { model: entry.model, usedChars: pool.routing.prefix.maxBlocks * pool.routing.prefix.blockChars });
    else this.renderers.delete(pool.name);
    return entry.model ?? (entry.failures > 0 ? null : undefined);
  }

  private syncPool(pool: PoolSpec, transport: FeedTransport): void {
    const settings = pool.routing.kvEvents;
    const reader = this.readerFor(pool);
    if (reader === undefined) return;
    const generation = settings.tokenizerDir === undefined ? 0 : (this.tokenizers.get(settings.tokenizerDir)?.generation ?? 0);
    const sig = signature(settings, pool.routing.prefix.blockChars, reader ?? undefined, generation);
    const readable = settings.tokenizer === 'simulator' || reader !== null;
    let subs = this.byPool.get(pool.name);
    if (!subs) this.byPool.set(pool.name, (subs = new Map<string, Subscription>()));
    const live = new Set<string>();
    const endpoints = this.deps.endpoints.snapshot(pool.name);
    // A publisher several replicas map to feeds none of them: its events are one engine's, and which is unknown.
    const addresses = endpoints.map((ep) => feedAddress(settings.endpoint, ep.url));
    const byAddress = new Map<string, string[]>();
    for (const [i, ep] of endpoints.entries()) {
      const address = addresses[i] as string;
      const ids = byAddress.get(address);
      if (ids) ids.push(ep.id);
      else byAddress.set(address, [ep.id]);
    }
    const sharedNow = new Set<string>();
    for (const [address, ids] of byAddress) {
      if (ids.length < 2) continue;
      const key = `${pool.name} ${address}`;
      sharedNow.add(key);
      if (!this.shared.has(key)) {
        this.shared.add(key);
        this.deps.events?.onSharedFeed?.(pool.name, address, ids);
      }
    }
    for (const key of this.shared) if (key.startsWith(`${pool.name} `) && !sharedNow.has(key)) this.shared.delete(key);
    for (const [i, ep] of endpoints.entries()) {
      if ((byAddress.get(addresses[i] as string)?.length ?? 0) > 1) continue; // not live: closed below
      live.add(ep.id);
      const current = subs.get(ep.id);
      if (current?.signature === sig) continue;
      current?.live.close();
      subs.set(ep.id, { signature: sig, readable, live: this.subscribe(pool, ep.id, ep.url, transport, reader ?? undefined) });
    }
    for (const [id, sub] of subs) {
      if (live.has(id)) continue;
      sub.live.close();
      subs.delete(id);
    }
  }

  private subscribe(pool: PoolSpec, endpointId: string, url: URL, transport: FeedTransport, reader: HfModel | undefined): Pick<ZmqFeed, 'feed' | 'close'> {
    const settings = pool.routing.kvEvents;
    const events = this.deps.events;
    const name = pool.name;
    const target: FeedTarget = {
      endpoint: feedAddress(settings.endpoint, url),
      replayEndpoint: settings.replayEndpoint === undefined || settings.replayEndpoint === '' ? '' : feedAddress(settings.replayEndpoint, url),
      topic: settings.topic ?? '',
    };
    return new transport.ZmqFeed(
      target,
      {
        blockChars: pool.routing.prefix.blockChars,
        maxBlocks: settings.maxBlocksPerReplica,
        readable: settings.tokenizer === 'simulator' || reader !== undefined,
        ...(reader ? { reader } : {}),
        staleAfterMs: settings.staleAfterMs,
        now: this.deps.now,
        events: {
          onBatch: (stored, removed, cleared) => {
            events?.onBatch?.(name, stored, removed, cleared);
            if (cleared > 0) events?.onCleared?.(endpointId);
          },
          onGap: (recovered) => events?.onGap?.(name, recovered),
          onBadPayload: (err) => events?.onBadPayload?.(name, endpointId, err.message, err.reason),
          onThrottled: (ms) => events?.onThrottled?.(name, endpointId, ms),
        },
        sleep: (ms) => new Promise<void>((resolve) => this.deps.scheduler.setTimeout(resolve, ms)),
      },
      (err) => events?.onError?.(name, endpointId, err),
    );
  }
}
