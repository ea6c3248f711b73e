/**
 * The limit store every router shares: {@link LimitStore}'s algorithm run inside Redis by Lua scripts,
 * so a check and its take are one atomic step however many routers call at once.
 *
 * - One round trip per call: `admit`/`peek` and `release` are one EVALSHA each; `heartbeat` sends its
 *   two (the routers, the epoch) in one pipeline; `settle`, `renew` and `carry` send one script call
 *   per item, all in one pipeline. The scripts are
 *   registered with ioredis's `defineCommand`, which sends EVAL the first time on each connection
 *   (so a restarted Redis, whose script cache is empty, needs no extra step) and EVALSHA afterwards.
 * - All or nothing: the admit script reads and checks everything before its first write, so even a
 *   bad stored value fails it before anything is taken (Redis does not roll back a script's writes).
 * - Keys: every key of one API key carries the hash tag `{key}`, so one script only touches one
 *   Redis Cluster slot; every key name is passed in KEYS. `${prefix}{${key}}:r:${rateId}` is a
 *   bucket (hash: `level`, `at`), `${prefix}{${key}}:b:${period}` a budget (integer counter),
 *   `${prefix}{${key}}:c:${concurrencyId}` a lease set (sorted set: lease → expiry ms),
 *   `${prefix}{${key}}:carried:${router}` the last outage batch a router added (see CARRY). Every write
 *   sets a PEXPIRE, so idle state disappears by itself.
 * - Time: by default the scripts read Redis's clock (`TIME`), one clock for every router. `now`
 *   (tests only) passes the caller's ms to the scripts instead. That clock is a wall clock: a bucket
 *   measured later than the script's now (Redis's clock stepped back, or a failover moved to a host
 *   whose clock is behind) is taken as measured now, so it refills from then on instead of holding a
 *   key at its limit until the clock is back where it was.
 * - Numbers: bucket levels are doubles, stored and returned as `%.17g` strings (exact; a Lua number
 *   in a reply would be truncated to an integer). Budgets are integer counters (INCRBY): tokens must
 *   be integers wherever a budget is involved.
 * - Answers: the script decides admit or refuse (any check refusing takes nothing) and returns the
 *   states; which check is named in the refusal is then chosen here, exactly as LocalLimitStore does,
 *   with the same {@link waitForOne} and {@link rateState}.
 *
 * A budget counter outlives its period by {@link TTL_MARGIN_MS}.budget (a router whose clock lags, or
 * stepped back, still names the old period and must see its count, not a fresh one), as LocalLimitStore
 * keeps it. `renew` extends only leases that have not expired yet.
 */
import { Redis, type Result } from 'ioredis';
import { type Heartbeat } from './limiter.js';
import { type CarriedKey } from './outage-carry.js';
import { withTimeout } from './timeout.js';
import { ENDED_PERIOD_KEPT_MS, rateState, refusalOf, type AdmitRequest, type Checks, type ConcurrencySpec, type LimitStore, type BudgetSpec, type Settlement, type Verdict } from './store.js';

/** How long idle state outlives the moment it stops mattering (ms). */
export const TTL_MARGIN_MS = {
  /** A bucket after it would be full again: absent means full, so any margin is safe; a minute keeps a busy key's hash from churning. */
  bucket: 60_000,
  /** A budget counter after its period's end: routers' clocks differ, and a late one still names the ended period (as LocalLimitStore keeps it). */
  budget: ENDED_PERIOD_KEPT_MS,
} as const;

/** ioredis command names of the scripts (one set per client; `defineCommand` of the same script again is harmless). */
const COMMANDS = {
  admit: 'modelgateLimitsAdmit',
  settle: 'modelgateLimitsSettle',
  release: 'modelgateLimitsRelease',
  renew: 'modelgateLimitsRenew',
  heartbeat: 'modelgateLimitsHeartbeat',
  epoch: 'modelgateLimitsEpoch',
  restore: 'modelgateLimitsRestore',
  carry: 'modelgateLimitsCarry',
} as const;

declare module 'ioredis' {
  // ioredis's documented way to type commands added by defineCommand (examples/typescript/scripts.ts).
  interface RedisCommander<Context> {
    modelgateLimitsAdmit(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsSettle(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsRelease(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsRenew(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsHeartbeat(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsEpoch(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsRestore(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
    modelgateLimitsCarry(numKeys: number, ...keysAndArgs: string[]): Result<unknown, Context>;
  }
}

/** Helpers every script starts with. ARGV[1] is the caller's ms, or '' for Redis's clock. */
const PRELUDE = `
local function clock(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(x) return string.format('%.17g', x) end
local function refill(key, perMinute, now)
  local b = redis.call('HMGET', key, 'level', 'at')
  if not b[1] then return perMinute end
  local level, at = tonumber(b[1]), tonumber(b[2])
  if at > now then
    -- the clock went back (a step, a failover to a host whose clock is behind): the bucket refills from
    -- now on at its level, rather than not at all until the clock is back at 'at'
    redis.call('HSET', key, 'at', num(now))
    return math.min(perMinute, level)
  end
  return math.min(perMinute, level + ((now - at) * perMinute) / 60000)
end
local function setBucket(key, level, perMinute, now)
  redis.call('HSET', key, 'level', num(level), 'at', num(now))
  redis.call('PEXPIRE', key, math.max(1, math.ceil(((perMinute - level) * 60000) / perMinute)) + ${TTL_MARGIN_MS.bucket})
end
local function expireBudget(key, endsInMs)
  redis.call('PEXPIRE', key, math.max(0, math.ceil(endsInMs)) + ${TTL_MARGIN_MS.budget})
end
local function expireLeases(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIRE', key, math.max(1, math.ceil(tonumber(last[2]) - now))) end
end
`;

/**
 * KEYS: nr buckets, nb budget counters, then lease sets. ARGV: now, take ('1' admit, '2' admit even if a
 * check refuses, '0' peek), tokens,
 * lease, leaseMs, nr, nb, then nr × (perMinute, cost), nb × (limit, endsInMs), one limit per lease set.
 * Returns {admitted by the checks (1|0), nr levels (strings), nb used, one held count per lease set}:
 * after the take when taken, as they stand otherwise.
 */
const ADMIT = `${PRELUDE}
local now = clock(ARGV[1])
local take = ARGV[2] ~= '0'
local force = ARGV[2] == '2'
local nr, nb = tonumber(ARGV[6]), tonumber(ARGV[7])
local nc = #KEYS - nr - nb
local rateAt, budgetAt, leaseAt = 8, 8 + 2 * nr, 8 + 2 * nr + 2 * nb
local levels, used, held = {}, {}, {}
local ok = true
for i = 1, nr do
  levels[i] = refill(KEYS[i], tonumber(ARGV[rateAt + 2 * (i - 1)]), now)
  if levels[i] < 1 then ok = false end
end
for j = 1, nb do
  used[j] = tonumber(redis.call('GET', KEYS[nr + j]) or '0')
  if used[j] >= tonumber(ARGV[budgetAt + 2 * (j - 1)]) then ok = false end
end
for k = 1, nc do
  held[k] = redis.call('ZCOUNT', KEYS[nr + nb + k], '(' .. num(now), '+inf')
  if held[k] >= tonumber(ARGV[leaseAt + k - 1]) then ok = false end
end
if take and (ok or force) then
  for i = 1, nr do
    local perMinute = tonumber(ARGV[rateAt + 2 * (i - 1)])
    levels[i] = levels[i] - tonumber(ARGV[rateAt + 2 * (i - 1) + 1])
    setBucket(KEYS[i], levels[i], perMinute, now)
  end
  for j = 1, nb do
    used[j] = redis.call('INCRBY', KEYS[nr + j], ARGV[3])
    expireBudget(KEYS[nr + j], tonumber(ARGV[budgetAt + 2 * (j - 1) + 1]))
  end
  for k = 1, nc do
    local key = KEYS[nr + nb + k]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
    redis.call('ZADD', key, num(now + tonumber(ARGV[5])), ARGV[4])
    expireLeases(key, now)
    held[k] = redis.call('ZCOUNT', key, '(' .. num(now), '+inf')
  end
end
local reply = {(ok and take) and 1 or 0}
for i = 1, nr do reply[#reply + 1] = num(levels[i]) end
for j = 1, nb do reply[#reply + 1] = used[j] end
for k = 1, nc do reply[#reply + 1] = held[k] end
return reply
`;

/** KEYS: nr tokens buckets, then budget counters. ARGV: now, tokens, nr, nr × perMinute, one endsInMs per budget. */
const SETTLE = `${PRELUDE}
local now = clock(ARGV[1])
local tokens = tonumber(ARGV[2])
local nr = tonumber(ARGV[3])
for i = 1, nr do
  local perMinute = tonumber(ARGV[3 + i])
  setBucket(KEYS[i], math.min(perMinute, refill(KEYS[i], perMinute, now) - tokens), perMinute, now)
end
for j = nr + 1, #KEYS do
  if redis.call('INCRBY', KEYS[j], ARGV[2]) < 0 then redis.call('SET', KEYS[j], '0') end
  expireBudget(KEYS[j], tonumber(ARGV[3 + j]))
end
return 0
`;

/** KEYS: lease sets. ARGV: lease. */
const RELEASE = `
for i = 1, #KEYS do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 0
`;

/**
 * KEYS: lease sets. ARGV: now, lease, leaseMs, retake ('1': Redis lost its data, see EPOCH). Extends the
 * lease where it is held and unexpired; with retake, adds it where it is not (the request is in flight).
 */
const RENEW = `${PRELUDE}
local now = clock(ARGV[1])
for i = 1, #KEYS do
  local expires = redis.call('ZSCORE', KEYS[i], ARGV[2])
  if (expires and tonumber(expires) > now) or ARGV[4] == '1' then
    redis.call('ZADD', KEYS[i], num(now + tonumber(ARGV[3])), ARGV[2])
    expireLeases(KEYS[i], now)
  end
end
return 0
`;

/** KEYS: the routers set. ARGV: now, router, ttlMs. A router is alive while its last beat is younger than ttlMs. */
const HEARTBEAT = `${PRELUDE}
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], num(now), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now - ttl))
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(ttl)))
return redis.call('ZCARD', KEYS[1])
`;

/**
 * KEYS: the epoch key. ARGV: a new epoch. Returns the epoch Redis holds, setting the new one when it
 * holds none: a key with no expiry that changes only when Redis lost its data (restarted empty, a
 * failover to an empty replica, FLUSHALL, or evicted under an `allkeys-*` policy).
 */
const EPOCH = `
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`;

/** KEYS: a budget counter. ARGV: used, endsInMs. Raises the counter to `used` (never lowers it). */
const RESTORE = `${PRELUDE}
local used = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[1]) or '0') < used then
  redis.call('SET', KEYS[1], ARGV[1])
  expireBudget(KEYS[1], tonumber(ARGV[2]))
end
return 0
`;

/**
 * KEYS: the key's carry mark (this router's), nr buckets, then budget counters. ARGV: now, seq, keepMs,
 * nr, nr × (perMinute, taken), then (tokens, endsInMs) per budget. Adds what a router counted while
 * Redis did not (limits/outage-carry.ts): takes `taken` from each bucket (as a settlement does) and adds
 * `tokens` to each budget, once: the mark holds the last batch number applied, and a batch numbered at
 * or below it was applied already (a call that timed out after Redis ran it, sent again). Returns 1
 * when applied, 0 when skipped.
 */
const CARRY = `${PRELUDE}
local now = clock(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if last >= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', math.max(1, math.ceil(tonumber(ARGV[3]))))
local nr = tonumber(ARGV[4])
for i = 1, nr do
  local perMinute, taken = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  setBucket(KEYS[1 + i], math.min(perMinute, refill(KEYS[1 + i], perMinute, now) - taken), perMinute, now)
end
for j = 2 + nr, #KEYS do
  local at = 5 + 2 * nr + 2 * (j - 2 - nr)
  if redis.call('INCRBY', KEYS[j], ARGV[at]) < 0 then redis.call('SET', KEYS[j], '0') end
  expireBudget(KEYS[j], tonumber(ARGV[at + 1]))
end
return 1
`;

export interface RedisLimitStoreOptions {
  /** Put before every key name (e.g. `modelgate:limits:`); must not contain `{` or `}` (the hash tag is the API key's). */
  prefix: string;
  /** Tests only: the ms the scripts use instead of Redis's clock. */
  now?: () => number;
  /** A call not answered in this long counts as Redis not answering (`limits.redis.timeoutMs`); see {@link withTimeout}. */
  timeoutMs?: number;
}

/** {@link LimitStore} shared by every router through Redis; also records the routers' heartbeats. */
export class RedisLimitStore implements LimitStore {
  private readonly prefix: string;
  private readonly now: (() => number) | undefined;
  private readonly timeoutMs: number | undefined;

  constructor(
    private readonly client: Redis,
    options: RedisLimitStoreOptions,
  ) {
    if (/[{}]/.test(options.prefix)) throw new RangeError(`Redis key prefix "${options.prefix}" contains a brace: remove it (the API key's name is the Redis Cluster hash tag)`);
    this.prefix = options.prefix;
    this.now = options.now;
    this.timeoutMs = options.timeoutMs;
    client.defineCommand(COMMANDS.admit, { lua: ADMIT });
    client.defineCommand(COMMANDS.settle, { lua: SETTLE });
    client.defineCommand(COMMANDS.release, { lua: RELEASE });
    client.defineCommand(COMMANDS.renew, { lua: RENEW });
    client.defineCommand(COMMANDS.heartbeat, { lua: HEARTBEAT });
    client.defineCommand(COMMANDS.epoch, { lua: EPOCH });
    client.defineCommand(COMMANDS.restore, { lua: RESTORE });
    client.defineCommand(COMMANDS.carry, { lua: CARRY });
  }

  /** The scripts' time argument: the test clock's ms, or '' for Redis's own clock. */
  private clock(): string {
    return this.now ? String(this.now()) : '';
  }

  private keyOf(key: string, kind: 'r' | 'b' | 'c', id: string): string {
    return `${this.prefix}{${key}}:${kind}:${id}`;
  }

  admit(request: AdmitRequest): Promise<Verdict> {
    return this.verdict(request, request);
  }

  peek(checks: Checks): Promise<Verdict> {
    return this.verdict(checks, undefined);
  }

  private async verdict(checks: Checks, take: AdmitRequest | undefined): Promise<Verdict> {
    const { key, rates, budgets, concurrency } = checks;
    if (take) requireWholeTokens(take.tokens, budgets);
    const keys = [...rates.map((s) => this.keyOf(key, 'r', s.id)), ...budgets.map((s) => this.keyOf(key, 'b', s.period)), ...concurrency.map((s) => this.keyOf(key, 'c', s.id))];
    const tokens = String(take?.tokens ?? 0);
    const args = [
      this.clock(),
      take ? (take.force ? '2' : '1') : '0',
      tokens,
      take?.lease ?? '',
      String(take?.leaseMs ?? 0),
      String(rates.length),
      String(budgets.length),
      ...rates.flatMap((s) => [String(s.perMinute), s.kind === 'requests' ? '1' : tokens]),
      ...budgets.flatMap((s) => [String(s.limit), String(s.endsInMs)]),
      ...concurrency.map((s) => String(s.limit)),
    ];
    const reply = await withTimeout(this.client.modelgateLimitsAdmit(keys.length, ...keys, ...args), this.timeoutMs);
    const values = numbers(reply, 1 + keys.length);
    const levels = values.slice(1, 1 + rates.length);
    const used = values.slice(1 + rates.length, 1 + rates.length + budgets.length);
    const held = values.slice(1 + rates.length + budgets.length);
    const admitted = values[0] === 1;
    // a forced take is in the counts the script returned: the refusal is judged on the counts before it
    const before = take?.force && !admitted;
    const refused = admitted
      ? undefined
      : before
        ? refusalOf(
            checks,
            levels.map((level, i) => level + (rates[i]?.kind === 'requests' ? 1 : take.tokens)),
            used.map((u) => u - take.tokens),
            held.map((h) => h - 1),
          )
        : refusalOf(checks, levels, used, held);
    if (take && !admitted && !refused) throw new Error('RedisLimitStore: the admit script refused a request that every check admits (script and store.ts disagree)');
    return {
      ok: refused === undefined,
      ...(refused ? { refused } : {}),
      rates: rates.map((spec, i) => rateState(spec, levels[i] as number)),
      budgets: budgets.map((spec, i) => ({ window: spec.window, period: spec.period, limit: spec.limit, used: used[i] as number, endsInMs: spec.endsInMs })),
      concurrency: concurrency.map((spec, i) => ({ id: spec.id, limit: spec.limit, held: held[i] as number })),
    };
  }

  async settle(settlements: readonly Settlement[]): Promise<void> {
    const now = this.clock();
    const pipeline = this.client.pipeline();
    for (const { key, rates, budgets, tokens } of settlements) {
      const buckets = rates.filter((s) => s.kind === 'tokens');
      if (buckets.length + budgets.length === 0) continue;
      requireWholeTokens(tokens, budgets);
      const keys = [...buckets.map((s) => this.keyOf(key, 'r', s.id)), ...budgets.map((s) => this.keyOf(key, 'b', s.period))];
      pipeline.modelgateLimitsSettle(keys.length, ...keys, now, String(tokens), String(buckets.length), ...buckets.map((s) => String(s.perMinute)), ...budgets.map((s) => String(s.endsInMs)));
    }
    await withTimeout(run(pipeline), this.timeoutMs);
  }

  async release(key: string, concurrency: readonly ConcurrencySpec[], lease: string): Promise<void> {
    if (concurrency.length === 0) return;
    const keys = concurrency.map((s) => this.keyOf(key, 'c', s.id));
    await withTimeout(this.client.modelgateLimitsRelease(keys.length, ...keys, lease), this.timeoutMs);
  }

  /** `retake`: add the leases Redis does not hold (it lost its data: they are in flight all the same). */
  async renew(leases: ReadonlyArray<{ key: string; concurrency: readonly ConcurrencySpec[]; lease: string }>, leaseMs: number, retake = false): Promise<void> {
    const now = this.clock();
    const pipeline = this.client.pipeline();
    for (const { key, concurrency, lease } of leases) {
      if (concurrency.length === 0) continue;
      const keys = concurrency.map((s) => this.keyOf(key, 'c', s.id));
      pipeline.modelgateLimitsRenew(keys.length, ...keys, now, lease, String(leaseMs), retake ? '1' : '0');
    }
    await withTimeout(run(pipeline), this.timeoutMs);
  }

  /** Raises budget counters to what they were last seen at (after Redis lost its data), never lowering one. */
  async restore(budgets: ReadonlyArray<{ key: string; period: string; used: number; endsInMs: number }>): Promise<void> {
    const pipeline = this.client.pipeline();
    for (const { key, period, used, endsInMs } of budgets) pipeline.modelgateLimitsRestore(1, this.keyOf(key, 'b', period), String(Math.round(used)), String(endsInMs));
    await withTimeout(run(pipeline), this.timeoutMs);
  }

  /** Adds what `router` counted while Redis did not answer, each key's batch once however often it is sent (see CARRY); one pipeline. */
  async carry(router: string, batches: readonly CarriedKey[]): Promise<void> {
    const now = this.clock();
    const pipeline = this.client.pipeline();
    for (const { key, seq, keepMs, rates, budgets } of batches) {
      const keys = [`${this.prefix}{${key}}:carried:${router}`, ...rates.map((r) => this.keyOf(key, 'r', r.id)), ...budgets.map((b) => this.keyOf(key, 'b', b.period))];
      pipeline.modelgateLimitsCarry(
        keys.length,
        ...keys,
        now,
        String(seq),
        String(keepMs),
        String(rates.length),
        ...rates.flatMap((r) => [String(r.perMinute), String(r.taken)]),
        ...budgets.flatMap((b) => [String(b.tokens), String(b.endsInMs)]),
      );
    }
    await withTimeout(run(pipeline), this.timeoutMs);
  }

  /**
   * Records that `router` is alive now; resolves with how many routers beat within the last `ttlMs`
   * and, given a candidate, the installation's epoch (`epochCandidate` when Redis holds none: new, or it
   * lost its data). Both scripts go in one pipeline: one round trip each heartbeat.
   */
  async heartbeat(router: string, ttlMs: number, epochCandidate?: string): Promise<Heartbeat> {
    const pipeline = this.client.pipeline();
    pipeline.modelgateLimitsHeartbeat(1, `${this.prefix}routers`, this.clock(), router, String(ttlMs));
    if (epochCandidate !== undefined) pipeline.modelgateLimitsEpoch(1, `${this.prefix}epoch`, epochCandidate);
    const [beat, epoch] = await withTimeout(replies(pipeline), this.timeoutMs);
    const routers = numbers([beat], 1)[0] as number;
    return epochCandidate === undefined ? { routers } : { routers, epoch: String(epoch) };
  }
}

/** Budgets are integer counters in Redis (INCRBY); refuses before any write rather than fail half-way through a script. */
function requireWholeTokens(tokens: number, budgets: readonly BudgetSpec[]): void {
  if (budgets.length > 0 && !Number.isSafeInteger(tokens)) throw new RangeError(`tokens must be a whole number where a budget is counted, got ${tokens}: round the estimate or the usage`);
}

/** The check a refused request names, chosen exactly as LocalLimitStore chooses it. */
/** A script's array reply as numbers (integers come as numbers, levels as exact decimal strings). */
function numbers(reply: unknown, length: number): number[] {
  if (!Array.isArray(reply) || reply.length !== length) throw new Error(`RedisLimitStore: unexpected script reply ${JSON.stringify(reply)}`);
  return reply.map((value: unknown) => {
    const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : NaN;
    if (Number.isNaN(n)) throw new Error(`RedisLimitStore: unexpected script reply ${JSON.stringify(reply)}`);
    return n;
  });
}

/** Sends a pipeline (one round trip) and rejects with its first failed command's error. */
async function run(pipeline: ReturnType<Redis['pipeline']>): Promise<void> {
  if (pipeline.length === 0) return;
  await replies(pipeline);
}

/** Sends a pipeline (one round trip): its commands' replies, or its first failed command's error. */
async function replies(pipeline: ReturnType<Redis['pipeline']>): Promise<unknown[]> {
  const results = (await pipeline.exec()) ?? [];
  const failed = results.find(([err]) => err);
  if (failed?.[0]) throw failed[0];
  return results.map(([, reply]) => reply);
}

/** How to reach Redis (from `limits.redis` in the config). */
export interface RedisClientOptions {
  /** `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS. */
  url: string;
  username?: string;
  password?: string;
  /** TLS even with a `redis://` URL. */
  tls: boolean;
  /** PEM CA bundle to verify the server with (else the system's). */
  ca?: string;
  /** A command slower than this fails (the limiter then counts locally for that request). */
  timeoutMs: number;
}

/** Reconnect backoff: 100 ms doubling up to 2 s, then every 2 s forever, with ±25 % jitter so routers don't reconnect in step. */
export function reconnectDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(2_000, 100 * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.75 + random() / 2));
}

/**
 * The ioredis client the router uses for limits. Redis is on the request path, so every option
 * chooses "fail now, count locally" over "wait":
 * - `enableOfflineQueue: false`: while disconnected a command fails at once instead of queueing
 *   until Redis is back (which would hold the request). Commands also fail until the first 'ready'.
 * - `maxRetriesPerRequest: 0`, `autoResendUnfulfilledCommands: false`: a command in flight when the
 *   connection drops fails; it is never sent again, since an admit or settle may already have been
 *   applied and a resend would count it twice.
 * - No `commandTimeout`: the stores time their calls themselves ({@link withTimeout}), counting only
 *   the time Redis had, not the router's own busy event loop.
 * - `retryStrategy`: reconnect forever, backing off to ~2 s ({@link reconnectDelay}), so the router
 *   notices within seconds that Redis is back.
 * - `connectTimeout`: at least 2 s (a TLS handshake may need more than one command's time), so a
 *   black-holed address is retried every few seconds rather than every 10 s (ioredis's default).
 * - TLS when asked or for `rediss://`, verified with `ca` when given.
 * - `lazyConnect: false`: connect at start-up, so the first request finds the connection ready.
 * - An 'error' listener that does nothing: without one, Node's EventEmitter throws on every failed
 *   reconnect; the caller attaches its own logging.
 */
export function redisClient(options: RedisClientOptions): Redis {
  const tls = options.tls || /^rediss:/i.test(options.url);
  const client = new Redis(options.url, {
    ...(options.username !== undefined ? { username: options.username } : {}),
    ...(options.password !== undefined ? { password: options.password } : {}),
    ...(tls ? { tls: options.ca !== undefined ? { ca: options.ca } : {} } : {}),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: Math.max(2_000, options.timeoutMs),
    retryStrategy: (attempt: number) => reconnectDelay(attempt),
    lazyConnect: false,
    // commands issued in the same tick (the admissions of concurrent requests, releases) go out in one
    // write: fewer syscalls per request under load (ioredis's documented auto-pipelining)
    enableAutoPipelining: true,
    // a release goes out at once, not at the end of the loop's turn: it is sent before the answer's
    // last bytes go to the client, and must reach Redis before that client's next request can
    autoPipeliningIgnoredCommands: [COMMANDS.release],
  });
  client.on('error', () => undefined);
  return client;
}
