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
import { StoreTimeout } from './store.js';
import { withTimeout } from './timeout.js';

/** Most records kept for Redis while their writes fail (about 200 bytes each); beyond it, new ones are not kept. */
export const MAX_UNSAVED = 10_000;

export class RedisResponseRecords implements SharedResponseRecords {
  /**
   * The last call that ended timed out: a save answers false at once (its write still goes out), so
   * answers are not held, each for the time limit, while Redis hangs; the first call Redis answers ends
   * it. A call that fails at once (no connection: the client queues nothing offline) costs no wait and
   * leaves it as it was.
   */
  private hung = false;
  /**
   * Records whose write failed (Redis away or slow), by Redis key: written again once Redis answers a
   * call. Without it a response made while Redis was down was never shared: a follow-up through another
   * router went to any replica, and the engine's 404 reached the client.
   */
  private readonly unsaved = new Map<string, string>();

  constructor(
    private readonly client: Pick<Redis, 'get' | 'set'>,
    private readonly options: { prefix: string; ttlSeconds: number; timeoutMs?: number; onError?: (op: 'record' | 'lookup') => void },
  ) {}

  key(id: string): string {
    return `${this.options.prefix}resp:${createHash('sha256').update(id).digest('base64url')}`;
  }

  save(id: string, location: ResponseLocation): Promise<boolean> {
    const hung = this.hung;
    const key = this.key(id);
    const value = JSON.stringify([location.pool, location.endpoint, location.owner]);
    const set = this.client.set(key, value, 'EX', this.options.ttlSeconds);
    const written = withTimeout(set, this.options.timeoutMs).then(
      () => this.answered(),
      (err: unknown) => {
        // a timed-out write may have been applied all the same: writing it again changes nothing
        if (this.unsaved.size < MAX_UNSAVED) this.unsaved.set(key, value);
        return this.failed('record', err);
      },
    );
    return hung ? Promise.resolve(false) : written;
  }

  async load(id: string): Promise<ResponseLocation | undefined> {
    let stored: string | null;
    try {
      stored = await withTimeout(this.client.get(this.key(id)), this.options.timeoutMs);
    } catch (err) {
      this.failed('lookup', err);
      throw err;
    }
    this.answered();
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

  private answered(): true {
    this.hung = false;
    if (this.unsaved.size > 0) this.saveAgain();
    return true;
  }

  /** Redis answered a call: the records it missed are written now (each kept again if this write fails too). */
  private saveAgain(): void {
    const records = [...this.unsaved];
    this.unsaved.clear();
    for (const [key, value] of records) {
      this.client.set(key, value, 'EX', this.options.ttlSeconds).catch(() => {
        if (this.unsaved.size < MAX_UNSAVED) this.unsaved.set(key, value);
      });
    }
  }

  /** Records waiting for Redis (tests). */
  get unsavedCount(): number {
    return this.unsaved.size;
  }

  private failed(op: 'record' | 'lookup', err: unknown): false {
    if (err instanceof StoreTimeout) this.hung = true;
    this.options.onError?.(op);
    return false;
  }
}
