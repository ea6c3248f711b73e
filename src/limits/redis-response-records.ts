/**
 * The Responses API records every router shares, in the Redis of `limits.redis` (see
 * {@link SharedResponseRecords} and `balancer/response-locations.ts`). One string key per response: `${prefix}resp:${sha256(id)}`, whose
 * value is `[pool, endpoint, owner]` as JSON, expiring after `limits.redis.responsesTtlHours`. The id
 * is stored hashed: it is the secret that continues a conversation, and whoever reads Redis should
 * not be able to list them. ioredis is only a type here; the client comes from the limits' wiring.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ResponseLocation, SharedResponseRecords } from '../core/types.js';
import { withTimeout } from './timeout.js';

export class RedisResponseRecords implements SharedResponseRecords {
  constructor(
    private readonly client: Pick<Redis, 'get' | 'set'>,
    private readonly options: { prefix: string; ttlSeconds: number; timeoutMs?: number },
  ) {}

  key(id: string): string {
    return `${this.options.prefix}resp:${createHash('sha256').update(id).digest('base64url')}`;
  }

  save(id: string, location: ResponseLocation): Promise<void> {
    const written = this.client.set(this.key(id), JSON.stringify([location.pool, location.endpoint, location.owner]), 'EX', this.options.ttlSeconds);
    return withTimeout(written, this.options.timeoutMs).then(
      () => undefined,
      () => undefined,
    );
  }

  async load(id: string): Promise<ResponseLocation | undefined> {
    const stored = await withTimeout(this.client.get(this.key(id)), this.options.timeoutMs);
    if (stored === null) return undefined;
    let value: unknown;
    try {
      value = JSON.parse(stored);
    } catch {
      return undefined;
    }
    if (!Array.isArray(value) || value.length !== 3 || !value.every((v) => typeof v === 'string')) return undefined;
    const [pool, endpoint, owner] = value as [string, string, string];
    return { pool, endpoint, owner };
  }
}
