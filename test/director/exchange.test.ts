/**
 * ExchangeRunner's attempts loop with scripted fakes: a forwarder that plays back a queue of results
 * per endpoint, a picker over fixed endpoint lists that honours `tried`, and FakeTime for the clock
 * and the backoff sleeps. Nothing touches a socket or a real timer.
 */
import { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { describe, expect, it } from '@jest/globals';
import { isAbortError } from '../../src/core/clock.js';
import { noReadyReplica, RouterError, type ErrorEnvelope } from '../../src/core/errors.js';
import { type Endpoint, type PoolSpec } from '../../src/core/types.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { ExchangeRunner, namesMissingModel, type ExchangePlan, type ExchangeReport, type RouteStep } from '../../src/director/exchange.js';
import { retryDelay } from '../../src/director/retry-policy.js';
import { type AttemptResult, type AttemptSpec, type FailureReason, type Forwarder, type ResponseObserver, type StreamEnd } from '../../src/proxy/forwarder.js';
import { normaliseUpstreamError } from '../../src/proxy/upstream-errors.js';
import { type AttemptOutcome, type FailureSource } from '../../src/resilience/breaker.js';
import { type EndpointPicker, type Picked, type PickRequest } from '../../src/resilience/picker.js';
import { mergeResilience, RESILIENCE_DEFAULTS, type ResilienceOverrides } from '../../src/resilience/settings.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

// ---------------------------------------------------------------------------------------------------
// fakes

/** One scripted attempt: its result, how long it takes on the fake clock, what it shows the meter. */
interface Scripted {
  result: AttemptResult;
  takesMs?: number;
  observe?: (observer: ResponseObserver, time: FakeTime) => Promise<void>;
}

class FakeForwarder implements Pick<Forwarder, 'attempt'> {
  readonly specs: AttemptSpec[] = [];
  /** Fake-clock time at which each attempt started. */
  readonly startedAt: number[] = [];

  constructor(
    private readonly time: FakeTime,
    private readonly script: Map<string, Array<Scripted | AttemptResult>>,
  ) {}

  async attempt(_req: IncomingMessage, _res: ServerResponse, spec: AttemptSpec): Promise<AttemptResult> {
    this.specs.push(spec);
    this.startedAt.push(this.time.now());
    const next = this.script.get(spec.endpoint.id)?.shift();
    if (next === undefined) throw new Error(`no scripted attempt left for ${spec.endpoint.id}`);
    const step: Scripted = 'kind' in next ? { result: next } : next;
    if (step.takesMs !== undefined) await this.time.sleep(step.takesMs); // a pending timer: the test moves time to it
    if (step.observe && spec.observe) await step.observe(spec.observe, this.time);
    return step.result;
  }

  get endpoints(): string[] {
    return this.specs.map((s) => s.endpoint.id);
  }
}

interface Ticketed {
  endpoint: string;
  outcomes: AttemptOutcome[];
  released: number;
}

class FakePicker implements Pick<EndpointPicker, 'pick' | 'hasUntried' | 'recordAnswerEnd' | 'adapterMissing'> {
  /** Replicas that answered they lack their pool's adapter: `pool/endpoint`. */
  readonly adapterMissed: string[] = [];
  /** One entry per pick that returned an endpoint: its breaker outcomes and release count. */
  readonly picks: Ticketed[] = [];
  readonly requests: Array<{ pool: string; tried: string[]; request: PickRequest | undefined }> = [];
  /** How each answer that reached the client ended, as its breaker heard it: `pool/endpoint outcome`. */
  readonly answerEnds: string[] = [];
  /** Whose each failure was, and whether the engine answered it, as the breakers heard it. */
  readonly sources: Array<FailureSource | undefined> = [];
  /** Pools whose picks wait until the client leaves (a queue that never moves). */
  readonly stuck = new Set<string>();
  /** Pools whose picks fail with this error (instead of NO_READY_REPLICA for an empty pool). */
  readonly errors = new Map<string, RouterError>();

  constructor(private readonly pools: Record<string, Endpoint[]>) {}

  pick(pool: PoolSpec, tried: ReadonlySet<string>, signal?: AbortSignal, request?: PickRequest): Promise<Picked> {
    this.requests.push({ pool: pool.name, tried: [...tried], request });
    const error = this.errors.get(pool.name);
    if (error) return Promise.reject(error);
    if (this.stuck.has(pool.name)) {
      return new Promise((_resolve, reject) => {
        signal?.addEventListener('abort', () => reject(Object.assign(new Error('aborted while queued'), { name: 'AbortError' })), { once: true });
      });
    }
    const all = this.pools[pool.name] ?? [];
    const endpoint = all.find((e) => !tried.has(e.id)) ?? all[0];
    if (!endpoint) return Promise.reject(noReadyReplica());
    const record: Ticketed = { endpoint: endpoint.id, outcomes: [], released: 0 };
    this.picks.push(record);
    return Promise.resolve({
      endpoint,
      ticket: {
        settle: (outcome, source) => {
          record.outcomes.push(outcome);
          if (outcome === 'failure') this.sources.push(source);
        },
      },
      release: () => (record.released += 1),
    });
  }

  hasUntried(pool: PoolSpec, tried: ReadonlySet<string>): boolean {
    return (this.pools[pool.name] ?? []).some((e) => !tried.has(e.id));
  }

  adapterMissing(pool: PoolSpec, endpointId: string): void {
    this.adapterMissed.push(`${pool.name}/${endpointId}`);
  }

  recordAnswerEnd(pool: PoolSpec, endpointId: string, outcome: 'success' | 'failure', _requestId?: string, source?: FailureSource): void {
    this.answerEnds.push(`${pool.name}/${endpointId} ${outcome}`);
    if (outcome === 'failure') this.sources.push(source);
  }

  /** The answers whose end counted against their breaker. */
  get streamFailures(): string[] {
    return this.answerEnds.filter((e) => e.endsWith(' failure')).map((e) => e.slice(0, -' failure'.length));
  }
}

/** The part of ServerResponse the exchange uses: JSON errors via writeHead/end, and the listener cap. */
class FakeResponse {
  status: number | undefined;
  headers: OutgoingHttpHeaders = {};
  body = '';
  headersSent = false;
  destroyed = false;
  writes = 0;
  private maxListeners = 10;

  writeHead(status: number, headers: OutgoingHttpHeaders): this {
    this.status = status;
    this.headers = headers;
    this.headersSent = true;
    return this;
  }

  end(text?: string): this {
    this.writes += 1;
    this.body += text ?? '';
    return this;
  }

  setMaxListeners(n: number): this {
    this.maxListeners = n;
    return this;
  }

  getMaxListeners(): number {
    return this.maxListeners;
  }

  json(): ErrorEnvelope {
    return JSON.parse(this.body) as ErrorEnvelope;
  }
}

// ---------------------------------------------------------------------------------------------------
// results and routes

const failed = (reason: FailureReason, detail = `${reason} detail`): AttemptResult => ({ kind: 'failed', reason, detail });

function upstream(status: number, opts: { retryAfterMs?: number; headers?: Record<string, string>; code?: string; message?: string } = {}): AttemptResult {
  const body = Buffer.from(JSON.stringify({ error: { message: opts.message ?? `engine says ${status}`, ...(opts.code ? { code: opts.code } : {}) } }));
  return { kind: 'upstream_error', status, error: normaliseUpstreamError(status, body), headers: opts.headers ?? {}, retryAfterMs: opts.retryAfterMs };
}

/** What a scripted attempt shows its observer when its request went out to the engine. */
const sent = (observer: ResponseObserver): Promise<void> => Promise.resolve(observer.requestSent?.());

const committed = (end: StreamEnd = 'complete', bytes = 42): AttemptResult => ({ kind: 'committed', status: 200, done: Promise.resolve({ end, bytes }) });

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const RETRIES = { maxRetries: 2, initialBackoffMs: 100, maxBackoffMs: 1_000, maxRetryAfterMs: 5_000 };

function pool(name: string, resilience: ResilienceOverrides = {}): PoolSpec {
  const merged = mergeResilience(RESILIENCE_DEFAULTS, { ...resilience, retries: { ...RETRIES, ...resilience.retries } });
  return { name, engine: 'vllm', servedModelName: `${name}-served`, capabilities: ['chat'], resilience: merged, routing: ROUTING_DEFAULTS };
}

function step(spec: PoolSpec, deployment = 'dep'): RouteStep {
  return { pool: spec, deployment, body: Buffer.from(`{"model":"${spec.servedModelName}"}`), headers: { 'x-pool': spec.name } };
}

const endpoint = (id: string, poolName: string): Endpoint => ({ id, pool: poolName, url: new URL(`http://${id}.local:8000`), weight: 1 });

/** The random draw the runner gets (it uses it only for backoff jitter). */
const DRAW = 0.3;

interface Setup {
  route: RouteStep[];
  /** Endpoint ids per pool name. */
  endpoints: Record<string, string[]>;
  script: Record<string, Array<Scripted | AttemptResult>>;
}

function setup({ route, endpoints, script }: Setup) {
  const time = new FakeTime();
  const forwarder = new FakeForwarder(time, new Map(Object.entries(script).map(([id, results]) => [id, [...results]])));
  const picker = new FakePicker(Object.fromEntries(Object.entries(endpoints).map(([name, ids]) => [name, ids.map((id) => endpoint(id, name))])));
  const events: string[] = [];
  const sleeps: number[] = [];
  const interTokens: string[] = [];
  const runner = new ExchangeRunner({
    forwarder: forwarder,
    picker: picker,
    clock: time,
    sleep: (ms, signal) => {
      sleeps.push(ms);
      return time.sleep(ms, signal);
    },
    random: () => DRAW,
    events: {
      onAttempt: (p, ep, outcome, adapter) => events.push(`attempt ${p}/${ep} ${outcome}${adapter ? ' (adapter)' : ''}`),
      onRetry: (p, reason) => events.push(`retry ${p} ${reason}`),
      onFallback: (from, to) => events.push(`fallback ${from.pool.name}@${from.deployment} → ${to.pool.name}@${to.deployment}`),
    },
  });
  const res = new FakeResponse();
  const controller = new AbortController();
  const plan: ExchangePlan = {
    route,
    request: { priority: 'standard' },
    requestId: 'req-1',
    path: '/v1/chat/completions',
    clientStallMs: 7_000,
    signal: controller.signal,
    onInterToken: (p, ms) => interTokens.push(`${p}:${ms}`),
  };
  const req = {} as IncomingMessage;
  const start = (): Promise<ExchangeReport> => runner.run(req, res as unknown as ServerResponse, plan);
  /** Runs the exchange to its end, moving fake time to each pending timer (the backoff sleeps). */
  const run = async (): Promise<ExchangeReport> => {
    let done = false;
    const report = start().finally(() => (done = true));
    for (let turns = 0; turns < 50; turns++) {
      await flush();
      if (done) return report;
      const next = time.nextDueIn;
      if (next === undefined) throw new Error('the exchange is stuck: not done and no timer pending');
      await time.advance(next);
    }
    throw new Error('the exchange did not end in 50 turns');
  };
  return { time, forwarder, picker, events, sleeps, interTokens, res, controller, plan, start, run };
}

// ---------------------------------------------------------------------------------------------------

describe('ExchangeRunner: success and retries within a pool', () => {
  it('success on the first try: one attempt, ticket settled as answered, the whole answer counted a success, released after the response ended', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [{ result: committed('complete', 99), takesMs: 40 }] } });
    const report = await t.run();
    expect(report).toEqual({ attempts: [{ endpoint: 'a1', outcome: 'committed', ms: 40 }], endpoint: 'a1', upstreamStatus: 200, end: 'complete', bytes: 99 });
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['answered'], released: 1 }]);
    expect(t.picker.answerEnds).toEqual(['A/a1 success']);
    expect(t.events).toEqual(['attempt A/a1 committed']);
    expect(t.sleeps).toEqual([]);
    expect(t.res.writes).toBe(0);
  });

  it('hands the forwarder the step’s body, headers and path, the pool’s timeouts with the client stall, and the whole exchange’s deadline', async () => {
    const A = pool('A', { timeouts: { connectMs: 11, firstByteMs: 22, idleMs: 33, totalMs: 44_000 } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [committed()] } });
    await t.run();
    const spec = t.forwarder.specs[0];
    expect(spec?.endpoint.id).toBe('a1');
    expect(spec?.body.toString()).toBe('{"model":"A-served"}');
    expect(spec?.headers).toEqual({ 'x-pool': 'A' });
    expect(spec?.path).toBe('/v1/chat/completions');
    expect(spec?.requestId).toBe('req-1');
    expect(spec?.timeouts).toMatchObject({ connectMs: 11, firstByteMs: 22, idleMs: 33, clientStallMs: 7_000 });
    expect(spec?.deadline).toBe(44_000);
    expect(spec?.stripUsageChunk).toBe(false);
    expect(t.picker.requests[0]?.request).toEqual({ priority: 'standard' });
  });

  it('a connection failure is retried on another replica of the pool after the jittered backoff', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [failed('connect')], a2: [committed()] } });
    const backoff = retryDelay(0, A.resilience.retries, () => DRAW);
    expect(backoff).toBe(65); // 100 ms ceiling: 50 + 0.3 × 50
    const done = t.start();
    await flush();
    // the runner now sleeps on the fake clock: nothing has gone to a2 yet
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.time.nextDueIn).toBe(backoff);
    await t.time.advance(backoff - 1);
    expect(t.forwarder.endpoints).toEqual(['a1']);
    await t.time.advance(1);
    const report = await done;
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2']);
    expect(t.forwarder.startedAt).toEqual([0, backoff]);
    expect(t.sleeps).toEqual([backoff]);
    expect(t.picker.requests.map((r) => r.tried)).toEqual([[], ['a1']]);
    expect(t.events).toEqual(['attempt A/a1 connect', 'retry A connect', 'attempt A/a2 committed']);
    expect(report.attempts.map((a) => `${a.endpoint}:${a.outcome}`)).toEqual(['a1:connect', 'a2:committed']);
    expect(report.failure).toBeUndefined();
    expect(report.pool).toBeUndefined();
    expect(t.picker.picks).toEqual([
      { endpoint: 'a1', outcomes: ['failure'], released: 1 },
      { endpoint: 'a2', outcomes: ['answered'], released: 1 },
    ]);
  });

  it('the second retry in a pool waits the doubled backoff', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2', 'a3'] }, script: { a1: [failed('reset')], a2: [upstream(502)], a3: [committed()] } });
    const report = await t.run();
    const retries = A.resilience.retries;
    expect(t.sleeps).toEqual([retryDelay(0, retries, () => DRAW), retryDelay(1, retries, () => DRAW)]);
    expect(t.sleeps).toEqual([65, 130]);
    expect(t.events.filter((e) => e.startsWith('retry'))).toEqual(['retry A reset', 'retry A upstream_502']);
    expect(report.upstreamStatus).toBe(200);
  });

  it('an engine’s Retry-After within maxRetryAfterMs is waited out before the retry', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [upstream(503, { retryAfterMs: 1_500 })], a2: [committed()] } });
    const report = await t.run();
    expect(t.sleeps).toEqual([1_500]);
    expect(t.forwarder.startedAt).toEqual([0, 1_500]);
    expect(report.attempts.map((a) => a.outcome)).toEqual(['upstream_503', 'committed']);
  });

  describe('a LoRA pool whose replica answers 404 (it does not have the adapter)', () => {
    // vLLM's answer for a model it does not serve
    const lacks = upstream(404, { message: 'The model `ad1` does not exist.' });
    const lora = (loadOnDemand: boolean): PoolSpec => ({
      ...pool('A'),
      adapter: { name: 'ad1', baseModel: 'A-served' },
      routing: { ...ROUTING_DEFAULTS, lora: { ...ROUTING_DEFAULTS.lora, loadOnDemand } },
    });

    it('forgets that the replica holds it and tries one that may', async () => {
      const t = setup({ route: [step(lora(false))], endpoints: { A: ['a1', 'a2'] }, script: { a1: [lacks], a2: [committed()] } });
      const report = await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1', 'a2']);
      // each attempt says it asked for the adapter (its answer says nothing of the pool's servedModelName)
      expect(t.events.filter((e) => e.startsWith('attempt'))).toEqual(['attempt A/a1 upstream_404 (adapter)', 'attempt A/a2 committed (adapter)']);
      expect(t.picker.adapterMissed).toEqual(['A/a1']);
      expect(report.failure).toBeUndefined();
    });

    it('with none left to try, answers 503 no_ready_replica (not the engine’s 404, which names the adapter), without retrying the same replica', async () => {
      const t = setup({ route: [step(lora(false))], endpoints: { A: ['a1'] }, script: { a1: [lacks, committed()] } });
      const report = await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1']);
      expect(t.res.status).toBe(503);
      expect(JSON.parse(t.res.body)).toMatchObject({ error: { code: 'no_ready_replica', message: expect.stringContaining('adapter') } });
      expect(t.res.body).not.toContain('ad1');
      expect(report.failure).toBe('no_ready_replica');
    });

    it('with loadOnDemand, tries the same replica once more (its pick loads the adapter again)', async () => {
      const t = setup({ route: [step(lora(true))], endpoints: { A: ['a1'] }, script: { a1: [lacks, lacks, committed()] } });
      const report = await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1', 'a1']); // once more, not until the retries run out
      expect(t.picker.requests.map((r) => r.tried)).toEqual([[], []]);
      expect(t.res.status).toBe(503);
      expect(report.attempts.map((a) => a.outcome)).toEqual(['upstream_404', 'upstream_404']);
    });

    it('a pool without an adapter passes the engine’s 404 on, unretried', async () => {
      const t = setup({ route: [step(pool('A'))], endpoints: { A: ['a1', 'a2'] }, script: { a1: [lacks], a2: [committed()] } });
      await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1']);
      expect(t.res.status).toBe(404);
      expect(t.picker.adapterMissed).toEqual([]);
    });

    it('a 404 that is not about the adapter (a Responses API id the replica does not hold) is passed on, unretried, the placement kept', async () => {
      const other = upstream(404, { message: "Response with id 'resp_123' not found." });
      const t = setup({ route: [step(lora(true))], endpoints: { A: ['a1', 'a2'] }, script: { a1: [other], a2: [committed()] } });
      await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1']);
      expect(t.res.status).toBe(404);
      expect(JSON.parse(t.res.body)).toMatchObject({ error: { message: "Response with id 'resp_123' not found." } });
      expect(t.picker.adapterMissed).toEqual([]);
    });

    it('names the adapter as a missing model only when the message does', () => {
      expect(namesMissingModel('The model `ad1` does not exist.', 'ad1')).toBe(true);
      expect(namesMissingModel('No adapter ad1 found', 'ad1')).toBe(true);
      expect(namesMissingModel("Response with id 'resp_123' not found.", 'ad1')).toBe(false);
      expect(namesMissingModel('The model `other` does not exist.', 'ad1')).toBe(false);
      // the id the client named, quoted back in the engine's "not found", is not the engine naming the adapter
      expect(namesMissingModel("Response with id 'The model `ad1` does not exist.' not found.", 'ad1', 'The model `ad1` does not exist.')).toBe(false);
      expect(namesMissingModel("Response with id 'x-ad1' not found.", 'ad1', 'x-ad1')).toBe(false);
    });

    it('a fallback pool gets its own once-more (with loadOnDemand) after the first pool used it', async () => {
      const B: PoolSpec = { ...lora(true), name: 'B' };
      const t = setup({ route: [step(lora(true)), step(B, 'dep-b')], endpoints: { A: ['a1'], B: ['b1'] }, script: { a1: [lacks, lacks], b1: [lacks, committed()] } });
      const report = await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1', 'a1', 'b1', 'b1']);
      expect(report.failure).toBeUndefined();
    });
  });

  describe("a pool whose engines do not serve its servedModelName (llama.cpp's router mode: 400 'model not found', naming no model)", () => {
    const notFound = upstream(400, { message: 'model not found' });
    const llamacpp = (): PoolSpec => ({ ...pool('A'), engine: 'llamacpp' });

    it('tries the next replica, the attempt named served_model_mismatch, its breaker not moved', async () => {
      const t = setup({ route: [step(llamacpp())], endpoints: { A: ['a1', 'a2'] }, script: { a1: [notFound], a2: [committed()] } });
      const report = await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1', 'a2']);
      expect(report.attempts.map((a) => a.outcome)).toEqual(['served_model_mismatch', 'committed']);
      expect(t.picker.picks[0]?.outcomes).toEqual(['backpressure']);
      expect(report.failure).toBeUndefined();
    });

    it('given up, answers 502 served_model_mismatch, not the engine’s 400', async () => {
      const t = setup({ route: [step(llamacpp())], endpoints: { A: ['a1', 'a2'] }, script: { a1: [notFound], a2: [notFound] } });
      const report = await t.run();
      expect(t.res.status).toBe(502);
      expect(t.res.json().error.code).toBe('served_model_mismatch');
      expect(report.failure).toBe('served_model_mismatch');
    });

    it('a vLLM pool’s 400 in those words is the request’s: passed on, unretried', async () => {
      const t = setup({ route: [step(pool('A'))], endpoints: { A: ['a1', 'a2'] }, script: { a1: [notFound], a2: [committed()] } });
      await t.run();
      expect(t.forwarder.endpoints).toEqual(['a1']);
      expect(t.res.status).toBe(400);
    });
  });

  it('with every replica tried and budget left, the same replica is tried again (the picker’s choice) when no pool follows', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [upstream(503), committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a1']);
    expect(t.events).toContain('retry A upstream_503');
    expect(report.failure).toBeUndefined();
  });

  it('gives up with the router’s error when the retry budget is spent (maxRetries 2: three attempts)', async () => {
    const A = pool('A');
    const t = setup({
      route: [step(A)],
      endpoints: { A: ['a1', 'a2', 'a3', 'a4'] },
      script: { a1: [failed('connect')], a2: [failed('reset')], a3: [failed('connect_timeout', 'no connection within 5 ms')] },
    });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2', 'a3']);
    expect(t.sleeps).toHaveLength(2);
    expect(report.failure).toBe('upstream_timeout');
    expect(t.res.status).toBe(504);
    expect(t.res.json().error.code).toBe('upstream_timeout');
    expect(t.res.json().error.message).toContain('no connection within 5 ms');
    expect(t.picker.picks.map((p) => p.released)).toEqual([1, 1, 1]);
  });

  it('the router’s 502 names the connection failure', async () => {
    const A = pool('A', { retries: { maxRetries: 0 } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [failed('connect', 'ECONNREFUSED')] } });
    const report = await t.run();
    expect(report.failure).toBe('upstream_connection_failed');
    expect(t.res.status).toBe(502);
    expect(t.res.headers['content-type']).toBe('application/json');
    expect(t.res.headers['content-length']).toBe(Buffer.byteLength(t.res.body));
    expect(t.res.json().error).toMatchObject({ type: 'server_error', code: 'upstream_connection_failed' });
    expect(t.res.json().error.message).toContain('ECONNREFUSED');
  });

  it('sizes the response’s listener cap to the attempts the route may make', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1'], B: [] }, script: { a1: [committed()] } });
    await t.run();
    expect(t.res.getMaxListeners()).toBe(8 + 4 * (2 + 1) * 2);
  });
});

describe('ExchangeRunner: moving on to the next pool', () => {
  it('when the first pool’s only replica fails: the second pool, no retry counted, no backoff', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B, 'backup')], endpoints: { A: ['a1'], B: ['b1'] }, script: { a1: [failed('connect')], b1: [committed()] } });
    const report = await t.run();
    expect(t.events).toEqual(['attempt A/a1 connect', 'fallback A@dep → B@backup', 'attempt B/b1 committed']);
    expect(t.sleeps).toEqual([]);
    expect(t.time.now()).toBe(0);
    expect(report.pool).toBe(B);
    expect(report.fallback).toBe('backup');
    expect(report.endpoint).toBe('b1');
    expect(report.failure).toBeUndefined();
    expect(t.picker.requests.map((r) => `${r.pool}:${r.tried.join(',')}`)).toEqual(['A:', 'B:']); // the tried set starts over
  });

  it('after every replica of the first pool failed (one retry there), with a fresh retry budget in the second', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({
      route: [step(A), step(B)],
      endpoints: { A: ['a1', 'a2'], B: ['b1', 'b2'] },
      script: { a1: [failed('connect')], a2: [upstream(503)], b1: [failed('reset')], b2: [committed()] },
    });
    const report = await t.run();
    expect(t.events).toEqual(['attempt A/a1 connect', 'retry A connect', 'attempt A/a2 upstream_503', 'fallback A@dep → B@dep', 'attempt B/b1 reset', 'retry B reset', 'attempt B/b2 committed']);
    expect(t.sleeps).toEqual([65, 65]); // each pool's first retry
    expect(report.pool).toBe(B);
    expect(report.fallback).toBeUndefined(); // same deployment, another pool
    expect(report.upstreamStatus).toBe(200);
  });

  it('when the pool’s retry budget is spent while replicas are left (maxRetries 1)', async () => {
    const A = pool('A', { retries: { maxRetries: 1 } });
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1', 'a2', 'a3'], B: ['b1'] }, script: { a1: [failed('connect')], a2: [failed('connect')], b1: [committed()] } });
    await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2', 'b1']);
    expect(t.events.filter((e) => e.startsWith('retry'))).toEqual(['retry A connect']);
  });

  it('maxRetries 0 never retries but still moves on', async () => {
    const A = pool('A', { retries: { maxRetries: 0 } });
    const B = pool('B', { retries: { maxRetries: 0 } });
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1', 'a2'], B: ['b1'] }, script: { a1: [upstream(429)], b1: [committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'b1']);
    expect(t.sleeps).toEqual([]);
    expect(t.events.filter((e) => e.startsWith('retry'))).toEqual([]);
    expect(t.events).toContain('fallback A@dep → B@dep');
    expect(report.upstreamStatus).toBe(200);
  });

  it('NO_READY_REPLICA from the picker moves on to the next pool', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B, 'backup')], endpoints: { A: [], B: ['b1'] }, script: { b1: [committed()] } });
    const report = await t.run();
    expect(t.events).toEqual(['fallback A@dep → B@backup', 'attempt B/b1 committed']);
    expect(report.attempts).toHaveLength(1);
    expect(report).toMatchObject({ pool: B, fallback: 'backup', endpoint: 'b1' });
  });

  it('NO_READY_REPLICA with no next pool is the answer: 503 with Retry-After 2', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: [], B: [] }, script: {} });
    const report = await t.run();
    expect(t.events).toEqual(['fallback A@dep → B@dep']);
    expect(report.failure).toBe('no_ready_replica');
    expect(report.attempts).toEqual([]);
    expect(t.res.status).toBe(503);
    expect(t.res.headers['retry-after']).toBe('2');
    expect(t.res.json().error.code).toBe('no_ready_replica');
  });

  it('an admission rejection (QUEUE_TIMEOUT) is answered as is, without moving on', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1'], B: ['b1'] }, script: {} });
    t.picker.errors.set('A', new RouterError('QUEUE_TIMEOUT', 'waited too long', { retryAfterSeconds: 1 }));
    const report = await t.run();
    expect(report.failure).toBe('queue_timeout');
    expect(t.res.status).toBe(429);
    expect(t.res.headers['retry-after']).toBe('1');
    expect(t.picker.requests.map((r) => r.pool)).toEqual(['A']);
  });

  it('moves on when no retry fits before the deadline but time is left', async () => {
    const A = pool('A', { timeouts: { totalMs: 1_000 } });
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1', 'a2'], B: ['b1'] }, script: { a1: [{ result: failed('first_byte_timeout'), takesMs: 960 }], b1: [committed()] } });
    const report = await t.run();
    // 960 + 65 ms of backoff would end past the deadline: no retry in A, but B is tried at once
    expect(t.forwarder.endpoints).toEqual(['a1', 'b1']);
    expect(t.sleeps).toEqual([]);
    expect(t.forwarder.startedAt).toEqual([0, 960]);
    expect(report.pool).toBe(B);
  });

  it('a timeout that used up the deadline ends the exchange: 504, no move on', async () => {
    const A = pool('A', { timeouts: { totalMs: 1_000 } });
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1'], B: ['b1'] }, script: { a1: [{ result: failed('first_byte_timeout'), takesMs: 1_000 }], b1: [committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(report.failure).toBe('upstream_timeout');
    expect(t.res.status).toBe(504);
  });
});

describe('ExchangeRunner: what a timeout says of the replica, and of the request', () => {
  it('a first byte late at a second replica for the same request is the request’s own: only the first counts against a breaker; retries go on', async () => {
    const A = pool('A');
    const t = setup({
      route: [step(A)],
      endpoints: { A: ['a1', 'a2', 'a3'] },
      script: { a1: [{ result: failed('first_byte_timeout'), takesMs: 500 }], a2: [{ result: failed('first_byte_timeout'), takesMs: 500 }], a3: [committed()] },
    });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2', 'a3']);
    expect(t.picker.picks.map((p) => p.outcomes)).toEqual([['failure'], ['unknown'], ['answered']]);
    expect(report.end).toBe('complete');
  });

  it('a slow replica: its late first byte counts, and another replica answers the request', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [{ result: failed('first_byte_timeout'), takesMs: 500 }], a2: [committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2']);
    expect(t.picker.picks.map((p) => p.outcomes)).toEqual([['failure'], ['answered']]);
    expect(report.end).toBe('complete');
  });

  it.each([
    ['names a long stop string (its text may be held back)', true, []],
    ['names none', undefined, ['A/a1']],
  ])('a stream silent past the idle timeout whose request %s: breaker failure %j', async (_case, holdsBackText, failures) => {
    const A = pool('A');
    const silent: AttemptResult = { kind: 'committed', status: 200, done: Promise.resolve({ end: 'idle_timeout', bytes: 10 }) };
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [silent] } });
    if (holdsBackText) t.plan.holdsBackText = true;
    const report = await t.run();
    expect(t.picker.streamFailures).toEqual(failures);
    expect(report.failure).toBe('upstream_timeout');
  });

  it.each([
    ['sent, and the client left before an answer', [{ result: { kind: 'client_gone' }, observe: sent }], true],
    [
      'sent, and no first byte in time',
      [
        { result: failed('first_byte_timeout'), observe: sent },
        { result: failed('first_byte_timeout'), observe: sent },
        { result: failed('first_byte_timeout'), observe: sent },
      ],
      true,
    ],
    ['never sent (no connection)', [failed('connect'), failed('connect'), failed('connect')], undefined],
    ['sent, and refused by the engine', [{ result: upstream(400), observe: sent }], undefined],
  ] as Array<[string, Array<Scripted | AttemptResult>, true | undefined]>)('an engine had the request (it is charged its prompt): %s → %s', async (_case, script, had) => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: script } });
    const report = await t.run();
    expect(report.engineHad).toBe(had);
  });
});

describe('ExchangeRunner: passing an engine’s answer on', () => {
  it('a 400 is passed on at once: no retry, no moving on, the breaker hears success', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1', 'a2'], B: ['b1'] }, script: { a1: [upstream(400, { code: 'context_length_exceeded' })] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.events).toEqual(['attempt A/a1 upstream_400']);
    expect(report.failure).toBe('context_length_exceeded');
    expect(report.upstreamStatus).toBe(400);
    expect(t.res.status).toBe(400);
    expect(t.res.json().error).toMatchObject({ message: 'engine says 400', code: 'context_length_exceeded' });
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['success'], released: 1 }]);
  });

  it('an engine error without a code is reported as upstream_<status>', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [upstream(500)] } });
    const report = await t.run();
    expect(report.failure).toBe('upstream_500');
    expect(t.res.status).toBe(500);
    expect(t.picker.picks[0]?.outcomes).toEqual(['failure']);
  });

  it('a Retry-After longer than maxRetryAfterMs is not retried: the answer goes on with its headers', async () => {
    const A = pool('A');
    const t = setup({
      route: [step(A)],
      endpoints: { A: ['a1', 'a2'] },
      script: { a1: [upstream(429, { retryAfterMs: 10_000, headers: { 'retry-after': '10' } })] },
    });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.sleeps).toEqual([]);
    expect(report.failure).toBe('upstream_429');
    expect(t.res.status).toBe(429);
    expect(t.res.headers['retry-after']).toBe('10');
    expect(t.res.json().error.type).toBe('rate_limit_error');
    expect(t.picker.picks[0]?.outcomes).toEqual(['backpressure']);
  });

  it('the last pool’s engine error is passed on once retries run out', async () => {
    const A = pool('A', { retries: { maxRetries: 1 } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [upstream(503)], a2: [upstream(503, { headers: { 'retry-after-ms': '20' }, retryAfterMs: 20 })] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1', 'a2']);
    expect(report.failure).toBe('upstream_503');
    expect(t.res.status).toBe(503);
    expect(t.res.headers['retry-after-ms']).toBe('20');
  });

  it('a deadline failure is not retried: the router answers 504', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [failed('deadline', 'total timeout')] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(report.failure).toBe('upstream_timeout');
    expect(t.res.status).toBe(504);
  });

  it('writes nothing when the response is already gone', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [upstream(400)] } });
    t.res.destroyed = true;
    const report = await t.run();
    expect(report.failure).toBe('upstream_400');
    expect(t.res.status).toBeUndefined();
    expect(t.res.writes).toBe(0);
  });
});

describe('ExchangeRunner: the client leaves', () => {
  it('during the backoff: the sleep is cut short, no further attempt, failure client_gone, nothing written', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [failed('connect')], a2: [committed()] } });
    const done = t.start();
    await flush();
    expect(t.time.pendingTimers).toBe(1);
    t.controller.abort();
    const report = await done;
    expect(report.failure).toBe('client_gone');
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.time.pendingTimers).toBe(0);
    expect(t.time.now()).toBe(0);
    expect(t.res.writes).toBe(0);
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['failure'], released: 1 }]);
  });

  it('while queued for a replica: failure client_gone, nothing written', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: {} });
    t.picker.stuck.add('A');
    const done = t.start();
    await flush();
    t.controller.abort();
    const report = await done;
    expect(report).toEqual({ attempts: [], failure: 'client_gone' });
    expect(t.res.writes).toBe(0);
  });

  it('during an attempt (the forwarder reports client_gone): no retry, the breaker is not moved', async () => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [{ result: { kind: 'client_gone' }, takesMs: 30 }] } });
    const report = await t.run();
    expect(report.failure).toBe('client_gone');
    expect(report.attempts).toEqual([{ endpoint: 'a1', outcome: 'client_gone', ms: 30 }]);
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['unknown'], released: 1 }]);
    expect(t.res.writes).toBe(0);
  });

  it('after a retryable failure when the signal has already aborted: no retry, no move on', async () => {
    const A = pool('A');
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1', 'a2'], B: ['b1'] }, script: { a1: [failed('reset')] } });
    const done = t.start();
    t.controller.abort(); // before the attempt's result is looked at
    const report = await done;
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.events).toEqual(['attempt A/a1 reset']);
    expect(report.failure).toBe('upstream_connection_failed');
  });
});

describe('ExchangeRunner: a committed response', () => {
  it.each<{ end: StreamEnd; failure: string | undefined; counted: 'success' | 'failure' | undefined }>([
    { end: 'complete', failure: undefined, counted: 'success' },
    { end: 'upstream_broken', failure: 'upstream_stream_broken', counted: 'failure' },
    { end: 'idle_timeout', failure: 'upstream_timeout', counted: 'failure' },
    { end: 'deadline', failure: 'upstream_timeout', counted: undefined },
    { end: 'client_stalled', failure: 'client_stalled', counted: undefined },
    { end: 'client_gone', failure: 'client_gone', counted: undefined },
  ])('ending $end: failure $failure; its breaker counts the answer’s end as $counted (nothing at its first byte)', async ({ end, failure, counted }) => {
    const A = pool('A');
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [committed(end, 7)] } });
    const report = await t.run();
    expect(report.end).toBe(end);
    expect(report.bytes).toBe(7);
    expect(report.failure).toBe(failure);
    expect(t.picker.answerEnds).toEqual(counted ? [`A/a1 ${counted}`] : []);
    expect(t.forwarder.endpoints).toEqual(['a1']); // committed: never retried
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['answered'], released: 1 }]);
    expect(t.res.writes).toBe(0);
  });

  it.each([
    [500, 'engine_error', 'server_error', 'failure'],
    // a 4xx event (a tool call the engine could not parse) is the request's: no end of its own, no alert
    [400, 'complete', 'invalid_request_error', 'success'],
  ])('a stream the engine ended with its own error event (status %i): end %s, failure %s; its breaker counts a server error a failure, else a success: %s', async (status, end, code, counted) => {
    const A = pool('A');
    const errored: AttemptResult = { kind: 'committed', status: 200, done: Promise.resolve({ end: 'complete', bytes: 7, engineError: { status, code } }) };
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [errored] } });
    const report = await t.run();
    // a server error's own end (modelgate_response_ends_total{end="engine_error"})
    expect(report.end).toBe(end);
    expect(report.failure).toBe(code);
    expect(report.engineError).toBe(code);
    expect(t.picker.answerEnds).toEqual([`A/a1 ${counted}`]);
  });

  it('keeps the replica’s slot until the response has ended', async () => {
    const A = pool('A');
    const ended = deferred<{ end: StreamEnd; bytes: number }>();
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [{ kind: 'committed', status: 200, done: ended.promise }] } });
    let finished = false;
    const done = t.start().finally(() => (finished = true));
    await flush();
    expect(t.picker.picks).toEqual([{ endpoint: 'a1', outcomes: ['answered'], released: 0 }]);
    expect(finished).toBe(false);
    ended.resolve({ end: 'complete', bytes: 5 });
    const report = await done;
    expect(report.bytes).toBe(5);
    expect(t.picker.picks[0]?.released).toBe(1);
  });

  it("frees the replica's slot when the answer is whole (the engine's work is done), before the response has ended", async () => {
    const A = pool('A');
    const ended = deferred<{ end: StreamEnd; bytes: number }>();
    let observer: ResponseObserver | undefined;
    const whole: Scripted = {
      result: { kind: 'committed', status: 200, done: ended.promise },
      observe: (o) => {
        observer = o;
        return Promise.resolve();
      },
    };
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [whole] } });
    const done = t.start();
    await flush();
    expect(t.picker.picks[0]?.released).toBe(0);
    void observer?.answered?.(); // the last event came; its bytes may still wait (a Responses record's write)
    expect(t.picker.picks[0]?.released).toBe(1);
    ended.resolve({ end: 'complete', bytes: 5 });
    await done;
    expect(t.picker.picks[0]?.released).toBe(2); // and again at the end (a pick's release is idempotent; this fake counts calls)
  });

  it('reports time to first token, inter-token gaps and the engine’s usage from the stream it saw', async () => {
    const A = pool('A');
    const stream: Scripted = {
      result: committed('complete', 300),
      observe: async (observer, time) => {
        await time.sleep(120);
        observer.event({ data: '{"choices":[{"delta":{"content":"Hel"}}]}' });
        await time.sleep(30);
        observer.event({ data: '{"choices":[{"delta":{"content":"lo"}}]}' });
        observer.event({ data: '{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2}}' });
        observer.event({ data: '[DONE]' });
      },
    };
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [stream] } });
    const report = await t.run();
    expect(report.ttftMs).toBe(120);
    expect(t.interTokens).toEqual(['A:30']);
    expect(report.usage).toEqual({ promptTokens: 12, completionTokens: 2 });
  });

  it('counts the tokens of the committed attempt only, timed from its own start', async () => {
    const A = pool('A');
    const second: Scripted = {
      result: committed(),
      observe: async (observer, time) => {
        await time.sleep(10);
        observer.event({ data: '{"choices":[{"delta":{"content":"x"}}]}' });
      },
    };
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [{ result: failed('reset'), takesMs: 500 }], a2: [second] } });
    const report = await t.run();
    expect(report.ttftMs).toBe(10);
    expect(report.usage).toEqual({ promptTokens: 0, completionTokens: 1, estimated: true });
    expect(report.attempts.map((a) => a.ms)).toEqual([500, 10]);
  });
});

describe('ExchangeRunner: whose failure it was, for the breakers', () => {
  it.each<[string, AttemptResult, FailureSource]>([
    ['a 500 the engine answered (a request may cause it)', upstream(500), { key: 'team-a', answered: true }],
    ['a 502 (a gateway’s: no answer of the engine’s)', upstream(502), { key: 'team-a', answered: false }],
    ['a connection reset', failed('reset'), { key: 'team-a', answered: false }],
    [
      'the engine’s own server-error event in a stream',
      { kind: 'committed', status: 200, done: Promise.resolve({ end: 'complete', bytes: 7, engineError: { status: 500, code: 'server_error' } }) },
      { key: 'team-a', answered: true },
    ],
    ['a stream the engine broke', committed('upstream_broken', 7), { key: 'team-a', answered: false }],
  ])('%s: its key, and whether the engine answered it', async (_case, result, source) => {
    const A = pool('A', { retries: { maxRetries: 0 } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1'] }, script: { a1: [result] } });
    t.plan.request.tenant = 'team-a';
    await t.run();
    expect(t.picker.sources).toEqual([source]);
  });
});

describe('ExchangeRunner: breaker tickets', () => {
  it('settles each attempt’s ticket once, with the outcome of its result, and releases each pick', async () => {
    const A = pool('A', { retries: { maxRetries: 4 } });
    const t = setup({
      route: [step(A)],
      endpoints: { A: ['a1', 'a2', 'a3', 'a4', 'a5'] },
      script: { a1: [failed('reset')], a2: [upstream(429)], a3: [upstream(502)], a4: [failed('first_byte_timeout')], a5: [committed()] },
    });
    const report = await t.run();
    expect(t.picker.picks).toEqual([
      { endpoint: 'a1', outcomes: ['failure'], released: 1 },
      { endpoint: 'a2', outcomes: ['backpressure'], released: 1 },
      { endpoint: 'a3', outcomes: ['failure'], released: 1 },
      { endpoint: 'a4', outcomes: ['failure'], released: 1 },
      { endpoint: 'a5', outcomes: ['answered'], released: 1 },
    ]);
    expect(report.attempts.map((a) => a.outcome)).toEqual(['reset', 'upstream_429', 'upstream_502', 'first_byte_timeout', 'committed']);
  });
});

describe('ExchangeRunner: the total deadline', () => {
  it.each([
    // the first attempt takes 900 ms; the retry's backoff is 65 ms
    { totalMs: 966, retried: true }, // 965 < 966
    { totalMs: 965, retried: false }, // 965 is not before the deadline
    { totalMs: 900, retried: false },
  ])('totalMs $totalMs: a retry is scheduled only when it starts before the deadline (retried $retried)', async ({ totalMs, retried }) => {
    const A = pool('A', { timeouts: { totalMs } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [{ result: failed('connect'), takesMs: 900 }], a2: [committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(retried ? ['a1', 'a2'] : ['a1']);
    expect(t.sleeps).toEqual(retried ? [65] : []);
    expect(report.failure).toBe(retried ? undefined : 'upstream_connection_failed');
    for (const spec of t.forwarder.specs) expect(spec.deadline).toBe(totalMs);
  });

  it('a Retry-After that would end past the deadline is not waited for', async () => {
    const A = pool('A', { timeouts: { totalMs: 2_000 } });
    const t = setup({ route: [step(A)], endpoints: { A: ['a1', 'a2'] }, script: { a1: [upstream(503, { retryAfterMs: 2_000 })] } });
    const report = await t.run();
    expect(t.sleeps).toEqual([]);
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(report.failure).toBe('upstream_503');
    expect(t.res.status).toBe(503);
  });

  it('the deadline is the first pool’s total timeout, kept across pools', async () => {
    const A = pool('A', { timeouts: { totalMs: 3_000 } });
    const B = pool('B', { timeouts: { totalMs: 60_000 } });
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1'], B: ['b1'] }, script: { a1: [{ result: failed('connect'), takesMs: 1_000 }], b1: [committed()] } });
    await t.run();
    expect(t.forwarder.specs.map((s) => [s.endpoint.id, s.deadline])).toEqual([
      ['a1', 3_000],
      ['b1', 3_000],
    ]);
  });

  it('no move on once the deadline has passed', async () => {
    const A = pool('A', { timeouts: { totalMs: 1_000 } });
    const B = pool('B');
    const t = setup({ route: [step(A), step(B)], endpoints: { A: ['a1'], B: ['b1'] }, script: { a1: [{ result: upstream(503), takesMs: 1_000 }], b1: [committed()] } });
    const report = await t.run();
    expect(t.forwarder.endpoints).toEqual(['a1']);
    expect(t.events.some((e) => e.startsWith('fallback'))).toBe(false);
    expect(report.failure).toBe('upstream_503');
  });
});

describe('fake sanity', () => {
  it('the stuck picker rejects with an AbortError when the client leaves', async () => {
    const picker = new FakePicker({});
    picker.stuck.add('A');
    const controller = new AbortController();
    const pending = picker.pick(pool('A'), new Set(), controller.signal);
    controller.abort();
    await expect(pending.catch((err: unknown) => isAbortError(err))).resolves.toBe(true);
  });
});
