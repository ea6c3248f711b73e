/**
 * The shared store of the per-key limits: a Redis client and the store over it, and the Responses API
 * records the routers share through the same client. Loaded only when `limits.redis` is set, so a
 * router without Redis never loads the client.
 */
import { type Logger } from 'pino';
import { type RedisLimitsConfig } from '../config/schema.js';
import { RedisResponseRecords } from '../limits/redis-response-records.js';
import { type SharedResponseRecords } from '../core/types.js';
import { type SharedLimitStore } from '../limits/limiter.js';

/** How long start-up waits for Redis before serving with local counts (it keeps trying after). */
const CONNECT_WAIT_MS = 2_000;

export interface SharedLimits {
  store: SharedLimitStore;
  flushIntervalMs: number;
  expectedRouters: number;
  strict: boolean;
  /** Whether Redis answered at start. */
  answering: boolean;
  /** Which replica holds each Responses API answer and whose it is, for every router. */
  responses: SharedResponseRecords;
  close(): Promise<void>;
}

/** `onRecordError`: a Responses API record's write (`record`) or read (`lookup`) failed or timed out. */
export async function sharedLimits(config: RedisLimitsConfig, logger: Logger, onRecordError?: (op: 'record' | 'lookup') => void): Promise<SharedLimits> {
  const { RedisLimitStore, redisClient } = await import('../limits/redis-store.js');
  const client = redisClient({
    url: config.url,
    ...(config.username ? { username: config.username } : {}),
    ...(config.password ? { password: config.password } : {}),
    tls: config.tls,
    ...(config.ca ? { ca: config.ca } : {}),
    timeoutMs: config.timeoutMs,
  });
  // the last connection error, for the start-up line: a wrong password, ACL user or TLS setting reads
  // differently from a Redis that is not there (the client retries meanwhile, so none is the end)
  let lastError: Error | undefined;
  // after start, a connection that fails says why, once per reason until it is ready again: the
  // limiter's own line names only the command that failed ("Stream isn't writeable…"), which reads the
  // same for a Redis that is gone, one that now asks for a password, and one whose TLS changed
  let started = false;
  let logged: string | undefined;
  client.on('error', (err: Error) => {
    lastError = err;
    if (!started || err.message === logged) return;
    logged = err.message;
    logger.warn({ component: 'limits', error: err.message }, 'Redis connection failed: retrying (every 2 s at most); the limits are counted locally until it is ready');
  });
  client.on('ready', () => {
    logged = undefined;
  });
  // 'ready', or the bound: a refused connection is retried by the client meanwhile, so errors are not the end
  const answering = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => {
      client.off('ready', ready);
      resolve(false);
    }, CONNECT_WAIT_MS);
    const ready = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    client.once('ready', ready);
  });
  started = true;
  logged = answering ? undefined : lastError?.message; // the start-up line below says it
  if (!answering) {
    logger.error(
      { component: 'limits', waitedMs: CONNECT_WAIT_MS, ...(lastError ? { error: lastError.message } : {}) },
      'Redis is not answering at start: counting limits locally, each router taking its share, until it is back',
    );
  }
  return {
    store: new RedisLimitStore(client, { prefix: config.keyPrefix, timeoutMs: config.timeoutMs }),
    flushIntervalMs: config.flushIntervalMs,
    expectedRouters: config.expectedRouters,
    strict: config.strict,
    answering,
    responses: new RedisResponseRecords(client, {
      prefix: config.keyPrefix,
      ttlSeconds: config.responsesTtlHours * 3600,
      timeoutMs: config.timeoutMs,
      ...(onRecordError ? { onError: onRecordError } : {}),
    }),
    async close() {
      client.disconnect();
      await Promise.resolve();
    },
  };
}
