/**
 * The simulator's LoRA adapters, as a vLLM replica with `--enable-lora` serves them: adapters are
 * registered by name (`--lora-adapters`, or `POST /v1/load_lora_adapter` at run time) and served
 * when a request's `model` names one; at most `--max-lora` distinct adapters are resident (in the GPU
 * batch) at once. A request for a resident adapter runs at once; one for another adapter waits until a
 * slot is free or an idle adapter can be evicted (least recently used first), then its adapter loads
 * for `--lora-load-ms` while it waits. So that a queue of other adapters' requests cannot starve, a
 * resident adapter that a waiting request needs the slot of is drained: new requests for it wait too,
 * and it is evicted when its last request ends.
 *
 * It reports what vLLM's `vllm:lora_requests_info` reports — the adapters of running requests and of
 * waiting requests, and the slots — and counts, for tests and benchmarks, how many requests found their
 * adapter resident (`hits`) and how many loads happened.
 */
import { type Clock, type Sleep } from '../core/clock.js';
import { abortError } from './sequence.js';

export interface LoraDeps {
  clock: Clock;
  sleep: Sleep;
}

type SlotState = 'loading' | 'ready' | 'draining';

interface Slot {
  state: SlotState;
  /** Requests that passed the gate with this adapter and have not ended. */
  active: number;
  lastUsed: number;
}

interface Waiter {
  adapter: string;
  resolve: () => void;
  reject: (err: Error) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

/** What `GET /sim/lora` shows. */
export interface LoraStats {
  maxLora: number;
  loadMs: number;
  registered: string[];
  resident: Array<{ name: string; state: SlotState; active: number }>;
  waiting: number;
  /** Requests whose adapter was resident and ready when they arrived. */
  hits: number;
  /** Requests that had to wait for their adapter (a load, a free slot, or both). */
  misses: number;
  /** Adapter loads into a slot. */
  loads: number;
}

/** A `/v1/load_lora_adapter` or `/v1/unload_lora_adapter` refusal, in vLLM's words. */
export class LoraAdapterError extends Error {
  constructor(
    readonly status: 400 | 404,
    readonly type: 'InvalidUserInput' | 'NotFoundError',
    message: string,
  ) {
    super(message);
  }
}

export class SimLora {
  /** Registered adapters: name → path. */
  private readonly registered = new Map<string, string>();
  private readonly resident = new Map<string, Slot>();
  private readonly queue: Waiter[] = [];
  private hits = 0;
  private misses = 0;
  private loads = 0;
  private everRegistered = false;
  /** Names of the base models and the registered adapters, in that order: what requests may name (kept in place). */
  readonly servedNames: string[];

  constructor(
    private readonly baseModels: readonly string[],
    adapters: readonly string[],
    readonly maxLora: number,
    private loadMs: number,
    private readonly deps: LoraDeps,
  ) {
    this.servedNames = [...baseModels];
    for (const name of adapters) this.register(name, name);
    // The first `maxLora` adapters start resident, as vLLM pre-loads its --lora-modules.
    for (const name of adapters.slice(0, maxLora)) this.resident.set(name, { state: 'ready', active: 0, lastUsed: deps.clock.now() });
  }

  /** Whether LoRA is in use: some adapter was ever registered (the metric is exported from then on). */
  get enabled(): boolean {
    return this.everRegistered;
  }

  isAdapter(model: string): boolean {
    return this.registered.has(model);
  }

  setLoadMs(ms: number): void {
    this.loadMs = ms;
  }

  /** Registers an adapter (`POST /v1/load_lora_adapter`), taking the load time, and makes it resident if a slot is free or idle. */
  async load(body: unknown): Promise<string> {
    const { lora_name: name, lora_path: path } = (typeof body === 'object' && body !== null ? body : {}) as { lora_name?: unknown; lora_path?: unknown };
    if (typeof name !== 'string' || name === '' || typeof path !== 'string' || path === '') throw new LoraAdapterError(400, 'InvalidUserInput', "Both 'lora_name' and 'lora_path' must be provided.");
    if (this.registered.has(name) || this.baseModels.includes(name)) throw new LoraAdapterError(400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
    await this.deps.sleep(this.loadMs);
    if (this.registered.has(name)) throw new LoraAdapterError(400, 'InvalidUserInput', `The lora adapter '${name}' has already been loaded.`);
    this.register(name, path);
    if (this.freeSlot()) {
      this.resident.set(name, { state: 'ready', active: 0, lastUsed: this.deps.clock.now() });
      this.loads++;
      this.pump();
    }
    return `Success: LoRA adapter '${name}' added successfully.`;
  }

  /** Unregisters an adapter (`POST /v1/unload_lora_adapter`); requests already running finish. */
  unload(body: unknown): string {
    const { lora_name: name } = (typeof body === 'object' && body !== null ? body : {}) as { lora_name?: unknown };
    if (typeof name !== 'string' || name === '') throw new LoraAdapterError(400, 'InvalidUserInput', "either 'lora_name' and 'lora_int_id' needs to be provided.");
    if (!this.registered.has(name)) throw new LoraAdapterError(404, 'NotFoundError', `The lora adapter '${name}' cannot be found.`);
    this.registered.delete(name);
    this.servedNames.splice(this.servedNames.indexOf(name), 1);
    const slot = this.resident.get(name);
    if (slot && slot.active === 0) this.resident.delete(name);
    else if (slot) slot.state = 'draining';
    this.pump();
    return `Success: LoRA adapter '${name}' removed successfully.`;
  }

  /**
   * Waits until `adapter` is resident and ready, then counts the request on it: call {@link release}
   * once the request ends. Rejects with an AbortError when `signal` aborts first.
   */
  acquire(adapter: string, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(abortError());
    const slot = this.resident.get(adapter);
    if (slot?.state === 'ready') {
      this.hits++;
      this.grant(slot);
      return Promise.resolve();
    }
    this.misses++;
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        adapter,
        resolve,
        reject,
        signal,
        onAbort: () => {
          const at = this.queue.indexOf(waiter);
          if (at >= 0) this.queue.splice(at, 1);
          reject(abortError());
          this.pump();
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.queue.push(waiter);
      this.pump();
    });
  }

  release(adapter: string): void {
    const slot = this.resident.get(adapter);
    if (!slot) return;
    slot.active = Math.max(0, slot.active - 1);
    slot.lastUsed = this.deps.clock.now();
    if (slot.active === 0 && (slot.state === 'draining' || !this.registered.has(adapter))) this.resident.delete(adapter);
    this.pump();
  }

  /** Requests waiting for their adapter. */
  get numWaiting(): number {
    return this.queue.length;
  }

  /** What `vllm:lora_requests_info` labels: adapters of running requests, of waiting ones, and the slots. */
  info(): { running: string[]; waiting: string[]; maxLora: number } {
    const running = [...this.resident].filter(([, slot]) => slot.active > 0).map(([name]) => name);
    const waiting = [...new Set(this.queue.map((w) => w.adapter))];
    return { running, waiting, maxLora: this.maxLora };
  }

  stats(): LoraStats {
    return {
      maxLora: this.maxLora,
      loadMs: this.loadMs,
      registered: [...this.registered.keys()],
      resident: [...this.resident].map(([name, slot]) => ({ name, state: slot.state, active: slot.active })),
      waiting: this.queue.length,
      hits: this.hits,
      misses: this.misses,
      loads: this.loads,
    };
  }

  private register(name: string, path: string): void {
    this.registered.set(name, path);
    this.servedNames.push(name);
    this.everRegistered = true;
  }

  private grant(slot: Slot): void {
    slot.active++;
    slot.lastUsed = this.deps.clock.now();
  }

  /** Whether a slot can be had now: one is free, or an idle ready adapter is evicted for it. */
  private freeSlot(): boolean {
    if (this.resident.size < this.maxLora) return true;
    let victim: string | undefined;
    let oldest = Infinity;
    for (const [name, slot] of this.resident) {
      if (slot.active === 0 && slot.state !== 'loading' && slot.lastUsed < oldest) {
        oldest = slot.lastUsed;
        victim = name;
      }
    }
    if (victim === undefined) return false;
    this.resident.delete(victim);
    return true;
  }

  /** Serves the queue in order: grants ready adapters, starts loads into free slots, drains slots for the rest. */
  private pump(): void {
    const needing = new Set<string>();
    for (let i = 0; i < this.queue.length;) {
      const waiter = this.queue[i] as Waiter;
      if (!this.registered.has(waiter.adapter)) {
        // unloaded while it waited: vLLM no longer knows the model
        this.queue.splice(i, 1);
        waiter.signal?.removeEventListener('abort', waiter.onAbort);
        waiter.reject(new LoraAdapterError(404, 'NotFoundError', `The model \`${waiter.adapter}\` does not exist.`));
        continue;
      }
      const slot = this.resident.get(waiter.adapter);
      if (slot?.state === 'ready') {
        this.queue.splice(i, 1);
        waiter.signal?.removeEventListener('abort', waiter.onAbort);
        this.grant(slot);
        waiter.resolve();
        continue;
      }
      if (slot === undefined) {
        if (this.freeSlot()) this.startLoad(waiter.adapter);
        else needing.add(waiter.adapter);
      }
      i++;
    }
    this.drainFor(needing.size);
  }

  private startLoad(adapter: string): void {
    const slot: Slot = { state: 'loading', active: 0, lastUsed: this.deps.clock.now() };
    this.resident.set(adapter, slot);
    this.loads++;
    void this.deps.sleep(this.loadMs).then(() => {
      if (this.resident.get(adapter) !== slot) return;
      slot.state = 'ready';
      this.pump();
    });
  }

  /** Marks busy adapters draining until `wanted` slots are draining (the least used first). */
  private drainFor(wanted: number): void {
    let draining = 0;
    for (const slot of this.resident.values()) if (slot.state === 'draining') draining++;
    while (draining < wanted) {
      let victim: Slot | undefined;
      for (const slot of this.resident.values()) {
        if (slot.state !== 'ready') continue;
        if (victim === undefined || slot.active < victim.active || (slot.active === victim.active && slot.lastUsed < victim.lastUsed)) victim = slot;
      }
      if (victim === undefined) return;
      victim.state = 'draining';
      draining++;
    }
  }
}
