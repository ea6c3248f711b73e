/**
 * Which pools' replicas said they do not serve the pool's `servedModelName` (director/exchange.ts
 * `servesNotModel`), for the status page and the ModelPool's `ServedModelMismatch` condition: an operator
 * looking at either saw a healthy pool while every request was answered 502 `served_model_mismatch`.
 *
 * Per pool, the replicas that said so, each with when it last did. A replica is forgotten when it answers
 * the pool (an attempt committed: it serves the name now), when discovery no longer lists it or its pool,
 * and the pool's whole record when its `servedModelName` changes (the slip mended). Bounded by the pools and
 * their listed replicas, never by requests; a request that went well costs one size check while no pool
 * has a mismatch, and a map lookup while one has.
 */
import { type PoolSpec } from '../core/types.js';

/** What a pool's record says: the replicas that said they lack its model, and the latest of them. */
export interface ServedModelMismatch {
  /** Wall-clock ms of the latest such answer. */
  at: number;
  /** The replica that gave it. */
  replica: string;
  /** Every replica that said so and has not answered the pool since, sorted. */
  replicas: string[];
}

interface PoolRecord {
  servedModelName: string;
  /** Replica → wall-clock ms of its latest such answer; in the order of those answers (the latest last). */
  replicas: Map<string, number>;
}

export class ServedModelWatch {
  private readonly pools = new Map<string, PoolRecord>();

  /**
   * `changed`: the set of replicas a pool's record names changed (a first such answer from a replica, one
   * forgotten), for the ModelPool status writer; not called again for a replica that says it again.
   */
  constructor(
    private readonly wallNow: () => number,
    private readonly changed: () => void = () => undefined,
  ) {}

  /** A replica answered it does not serve the pool's `servedModelName` (the exchange's `onServedModelMismatch`). */
  seen(pool: Pick<PoolSpec, 'name' | 'servedModelName'>, endpoint: string): void {
    let record = this.pools.get(pool.name);
    if (!record || record.servedModelName !== pool.servedModelName) {
      record = { servedModelName: pool.servedModelName, replicas: new Map() };
      this.pools.set(pool.name, record);
    }
    const known = record.replicas.delete(endpoint); // set again: the latest answer last
    record.replicas.set(endpoint, this.wallNow());
    if (!known) this.changed();
  }

  /**
   * Each attempt's outcome (the exchange's `onAttempt`): a committed one means the replica serves the pool's
   * model; not one for a LoRA adapter on the pool (`adapter`), which an engine serves under its own name
   * whatever it calls its base model (a pool serving both would otherwise flap, a status write each time).
   */
  attempted(pool: string, endpoint: string, outcome: string, adapter = false): void {
    if (this.pools.size === 0 || outcome !== 'committed' || adapter) return;
    const record = this.pools.get(pool);
    if (!record?.replicas.delete(endpoint)) return;
    if (record.replicas.size === 0) this.pools.delete(pool);
    this.changed();
  }

  /** The pool's record; none when no replica said so since, or the pool's `servedModelName` is not the one they lacked. */
  of(pool: Pick<PoolSpec, 'name' | 'servedModelName'>): ServedModelMismatch | undefined {
    const record = this.pools.get(pool.name);
    if (!record || record.servedModelName !== pool.servedModelName) return undefined;
    let latest: [string, number] | undefined;
    for (const entry of record.replicas) latest = entry;
    if (!latest) return undefined;
    return { at: latest[1], replica: latest[0], replicas: [...record.replicas.keys()].sort() };
  }

  /**
   * Forgets the pools discovery no longer lists or whose `servedModelName` changed, and the replicas their
   * pools no longer list (called at every change of discovery).
   */
  retain(pools: readonly Pick<PoolSpec, 'name' | 'servedModelName'>[], listed: (pool: string) => readonly { id: string }[]): void {
    if (this.pools.size === 0) return;
    const now = new Map(pools.map((p) => [p.name, p]));
    let dropped = false;
    for (const [name, record] of this.pools) {
      const pool = now.get(name);
      if (!pool || pool.servedModelName !== record.servedModelName) {
        this.pools.delete(name);
        dropped = true;
        continue;
      }
      const ids = new Set(listed(name).map((e) => e.id));
      for (const replica of record.replicas.keys()) {
        if (ids.has(replica)) continue;
        record.replicas.delete(replica);
        dropped = true;
      }
      if (record.replicas.size === 0) this.pools.delete(name);
    }
    if (dropped) this.changed();
  }

  /** Pools with a record. */
  get size(): number {
    return this.pools.size;
  }
}
