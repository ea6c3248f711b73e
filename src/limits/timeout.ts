/**
 * The time limit on a call to Redis (`limits.redis.timeoutMs`), for the limit store and the Responses
 * records alike. A module of its own: it loads no Redis client.
 */
import { StoreTimeout } from './store.js';

/** A timer that fired this much past its time (ms, at least) was held by the router's own busy event loop. */
const LATE_MS = 5;

/**
 * `reply`, or a {@link StoreTimeout} once `ms` have passed without it (none without `ms`). The clock
 * is the router's own time, not Redis's: a timer that fires late was held by this router's event loop
 * (a burst of requests handled in one turn), during which Redis's answers waited unread in the socket
 * and the commands queued for that turn's write were not even sent. Such a timer is set once more for
 * `ms`, and a timer that expires lets the loop read its socket first (one `setImmediate`): a healthy
 * Redis is never declared down for the router's own delay. (ioredis's `commandTimeout` rejected those
 * calls, and under a burst the router counted locally for every key, blaming Redis in its log.)
 */
export function withTimeout<T>(reply: Promise<T>, ms: number | undefined): Promise<T> {
  if (ms === undefined) return reply;
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let extended = false;
    let due = performance.now() + ms;
    const expire = (): void => {
      const now = performance.now();
      if (!extended && now - due > Math.max(LATE_MS, ms / 5)) {
        extended = true;
        due = now + ms;
        timer = setTimeout(expire, ms);
        return;
      }
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new StoreTimeout('Redis answered later than limits.redis.timeoutMs'));
      });
    };
    let timer = setTimeout(expire, ms);
    reply.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
