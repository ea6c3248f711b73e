/** Static discovery: the endpoints listed in the config file, always routable. */
import { type PoolConfig } from '../config/schema.js';
import { type Endpoint, type EndpointSource, type Syncable } from '../core/types.js';

const NONE: readonly Endpoint[] = Object.freeze([]);

export class StaticEndpoints implements EndpointSource, Syncable {
  private readonly byPool: ReadonlyMap<string, readonly Endpoint[]>;

  constructor(pools: readonly PoolConfig[]) {
    this.byPool = new Map(pools.map((pool) => [pool.name, Object.freeze(pool.endpoints.map((ep) => Object.freeze({ id: ep.url, pool: pool.name, url: new URL(ep.url), weight: ep.weight })))]));
  }

  snapshot(pool: string): readonly Endpoint[] {
    return this.byPool.get(pool) ?? NONE;
  }

  hasSynced(): boolean {
    return true;
  }
}
