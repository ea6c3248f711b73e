/**
 * Resilience over real sockets: simulator replicas with injected faults behind a router, and the
 * client's view of each failure. Timeouts are scaled down (hundreds of ms) to keep the suite fast.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimOptions } from '../../src/sim/options.js';
import { type SimServer } from '../../src/sim/server.js';
import { contentTimes, rawRequest, sseData, type RawRequest, type RawResponse } from '../helpers/http.js';
import { KEY, metricSum, adminMetrics as metrics, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function sims(count: number, overrides: Partial<SimOptions> = {}): Promise<SimServer[]> {
  const started = await Promise.all(Array.from({ length: count }, (_, i) => startTestSim({ model: ['served/llm'], name: `r${i}`, ...overrides })));
  cleanups.push(() => Promise.all(started.map((s) => s.close())));
  return started;
}

async function gateway(endpoints: string[], resilience: object): Promise<TestRouter<RunningRouter>> {
  const g = await startTestRouter({
    pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints, resilience }],
    deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
  });
  cleanups.push(() => g.close());
  return g;
}

const fast = { retries: { initialBackoffMs: 5, maxBackoffMs: 20 }, breaker: { failureThreshold: 2, cooldownMs: 60_000 } };

function chat(g: TestRouter<RunningRouter>, body: object = {}, extra: RawRequest = {}): Promise<RawResponse> {
  return rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
    ...extra,
    headers: { authorization: `Bearer ${KEY}`, ...extra.headers },
    body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...body },
  });
}

const breakerOf = (g: TestRouter<RunningRouter>, url: string): string | undefined => [...g.router.breakers.states()].find((b) => b.endpoint === url)?.state;

/**
 * Sends requests until `url`'s breaker opens. Which replica a request tries first is random on an
 * idle fleet, so the number of requests needed varies; every one must still be answered 200.
 */
async function untilOpen(g: TestRouter<RunningRouter>, url: string, send: (i: number) => Promise<RawResponse>): Promise<number> {
  let sent = 0;
  await waitFor(async () => {
    const res = await send(sent++);
    expect(res.status).toBe(200);
    return breakerOf(g, url) === 'open';
  }, 'the failing replica’s breaker to open');
  return sent;
}

describe('retries before the first byte', () => {
  it('retries a refused connection on another replica and opens the dead replica’s breaker', async () => {
    const [live] = await sims(1);
    const dead = await startTestSim({ model: ['served/llm'] });
    const deadUrl = dead.url;
    await dead.close();
    const g = await gateway([deadUrl, live!.url], fast);
    await untilOpen(g, deadUrl, () => chat(g));
    for (let i = 0; i < 5; i++) expect((await chat(g)).status).toBe(200);
    const m = await metrics(g);
    expect(metricSum(m, 'modelgate_upstream_attempts_total', { outcome: 'connect' })).toBe(2); // then the breaker keeps it out
    expect(metricSum(m, 'modelgate_retries_total', { reason: 'connect' })).toBe(2);
    expect(metricSum(m, 'modelgate_breaker_state', { endpoint: deadUrl })).toBe(2);
    // the operator can follow the opening back to the request whose failure tipped it
    const opened = g.logs.map((l) => JSON.parse(l) as { msg: string; requestId?: string; component?: string; endpoint?: string }).find((l) => l.msg === 'circuit breaker open');
    expect(opened).toMatchObject({ component: 'breaker', endpoint: deadUrl, requestId: expect.any(String) });
    expect(g.logs.some((l) => l.includes('"msg":"request"') && l.includes(`"requestId":"${opened?.requestId}"`))).toBe(true);
  });

  it('retries 503 and 429 from an engine elsewhere, honouring a short Retry-After', async () => {
    const [busy, ok] = await sims(2);
    busy!.configure({ fault: 'status=503,retry-after=0' });
    const g = await gateway([busy!.url, ok!.url], fast);
    for (let i = 0; i < 6; i++) {
      const res = await chat(g);
      expect(res.status).toBe(200);
      expect(res.headers['x-sim-replica']).toBe('r1');
    }
    expect(breakerOf(g, busy!.url)).toBe('closed'); // backpressure is not failure
    busy!.configure({ fault: 'status=429' });
    expect((await chat(g)).status).toBe(200);
  });

  it('passes on a 429 whose Retry-After is longer than retries.maxRetryAfterMs, with the header', async () => {
    const [a, b] = await sims(2, { fault: 'status=429,retry-after=30' });
    const g = await gateway([a!.url, b!.url], fast);
    const res = await chat(g);
    expect(res.status).toBe(429);
    expect(res.headers['retry-after']).toBe('30');
    expect(metricSum(await metrics(g), 'modelgate_upstream_attempts_total')).toBe(1);
  });

  it('stops after retries.maxRetries and answers with the engine’s last error', async () => {
    const replicas = await sims(4, { fault: 'status=502' });
    const g = await gateway(
      replicas.map((s) => s.url),
      { ...fast, retries: { maxRetries: 2, initialBackoffMs: 1, maxBackoffMs: 2 } },
    );
    const res = await chat(g);
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body)).toMatchObject({ error: { type: 'server_error', message: 'Injected failure (status 502).' } });
    expect(metricSum(await metrics(g), 'modelgate_upstream_attempts_total')).toBe(3);
  });

  it('never retries an error the request caused, and never counts it against the replica', async () => {
    const [a, b] = await sims(2);
    const g = await gateway([a!.url, b!.url], fast);
    for (let i = 0; i < 5; i++) expect((await chat(g, { max_tokens: 100_000 })).status).toBe(400);
    expect(metricSum(await metrics(g), 'modelgate_upstream_attempts_total')).toBe(5);
    expect([breakerOf(g, a!.url), breakerOf(g, b!.url)].every((s) => s === undefined || s === 'closed')).toBe(true);
  });

  it('does not retry a 500', async () => {
    const [a, b] = await sims(2, { fault: 'status=500' });
    const g = await gateway([a!.url, b!.url], fast);
    expect((await chat(g)).status).toBe(500);
    expect(metricSum(await metrics(g), 'modelgate_upstream_attempts_total')).toBe(1);
  });
});

describe('timeouts', () => {
  it('gives up on a hung replica after the first-byte timeout, retries elsewhere, and opens its breaker', async () => {
    const [hung] = await sims(1, { fault: 'hang' });
    const [ok] = await sims(1);
    const g = await gateway([hung!.url, ok!.url], { ...fast, timeouts: { firstByteMs: 150 } });
    await untilOpen(g, hung!.url, async (i) => {
      const res = await chat(g, { stream: i % 2 === 1 });
      expect(sseData(res.body).length > 0 || res.body.includes('chat.completion')).toBe(true);
      return res;
    });
    expect(metricSum(await metrics(g), 'modelgate_upstream_attempts_total', { outcome: 'first_byte_timeout' })).toBe(2);
  });

  it('a long generation past the first-byte timeout counts once against the replicas, not at every one it was retried on: no breaker opens, the next request is served', async () => {
    // a hostile tenant's requests: non-streamed, generating for 2 s against a first-byte timeout of 400 ms.
    // Each was retried on every replica and counted a failure at each: four of them opened every
    // breaker (5 failures in a row), and every other tenant got 503 for a cool-down.
    const replicas = await sims(2, { itlMs: 10 });
    const g = await gateway(
      replicas.map((r) => r.url),
      { retries: { initialBackoffMs: 5, maxBackoffMs: 20 }, timeouts: { firstByteMs: 400 } },
    );
    const long = await Promise.all(Array.from({ length: 4 }, () => chat(g, { max_tokens: 200, ignore_eos: true })));
    for (const res of long) {
      expect(res.status).toBe(504);
      expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'upstream_timeout' } });
    }
    const text = await metrics(g);
    expect(metricSum(text, 'modelgate_upstream_attempts_total', { outcome: 'first_byte_timeout' })).toBe(12); // each tried three times
    for (const r of replicas) expect(breakerOf(g, r.url) ?? 'closed').toBe('closed');
    expect((await chat(g)).status).toBe(200);
  });

  it('streams silent past the idle timeout because their long stop string holds their text back move no breaker; the next request is served', async () => {
    // a hostile tenant's streams: the whole answer is the start of the stop string, so the engine holds
    // back every token (as vLLM holds back text that may be a stop string's start) and the stream goes
    // silent. Counted as the replica's failures, two of them opened its breaker: every tenant got 503.
    const [replica] = await sims(1, { itlMs: 5 });
    const g = await gateway([replica!.url], { ...fast, timeouts: { idleMs: 300 } });
    const ask = { messages: [{ role: 'user', content: 'tell me a long story' }], max_tokens: 200, ignore_eos: true, seed: 7 };
    // the simulator's text for this seed, as its own client would see it
    const learned = await rawRequest(`${replica!.url}/v1/chat/completions`, { body: { model: 'served/llm', ...ask } });
    const text = (JSON.parse(learned.body) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content ?? '';
    expect(text.length).toBeGreaterThan(100);
    const silent = await Promise.all(Array.from({ length: 3 }, () => chat(g, { ...ask, stream: true, stop: [`${text} and then`] })));
    for (const res of silent) expect(res.body).toContain('upstream_timeout');
    expect(breakerOf(g, replica!.url) ?? 'closed').toBe('closed');
    expect((await chat(g)).status).toBe(200);
  });

  it('does not treat a stream’s early headers as its first byte: a stuck prefill is retried', async () => {
    const [stuck, ok] = await sims(2);
    stuck!.configure({ fault: 'slow-start=5000' }); // 200 and headers at once, no data
    const g = await gateway([stuck!.url, ok!.url], { ...fast, timeouts: { firstByteMs: 200 } });
    for (let i = 0; i < 3; i++) {
      const res = await chat(g, { stream: true });
      expect(res.status).toBe(200);
      expect(res.headers['x-sim-replica']).toBe('r1');
      expect(sseData(res.body).at(-1)).toBe('[DONE]');
    }
  });

  it('ends a stream that goes silent past the idle timeout with an SSE error event', async () => {
    const [a] = await sims(1, { fault: 'stall-after=2' });
    const g = await gateway([a!.url], { ...fast, timeouts: { idleMs: 200 } });
    const res = await chat(g, { stream: true, max_tokens: 50, ignore_eos: true });
    expect(res.status).toBe(200);
    const events = sseData(res.body);
    expect(events.at(-1)).toBe('[DONE]');
    expect(JSON.parse(events.at(-2)!)).toEqual({ error: { message: expect.stringContaining('idle timeout'), type: 'server_error', param: null, code: 'upstream_timeout' } });
    expect(contentTimes(res)).toHaveLength(2);
    await waitFor(() => a!.engine.numRunning === 0, 'the stalled generation to be aborted');
  });

  it('ends a stream at the total timeout, and answers 504 when nothing came before it', async () => {
    const [a] = await sims(1, { itlMs: 50 });
    const g = await gateway([a!.url], { ...fast, timeouts: { totalMs: 400 } });
    const stream = await chat(g, { stream: true, max_tokens: 200, ignore_eos: true });
    expect(JSON.parse(sseData(stream.body).at(-2)!)).toMatchObject({ error: { code: 'upstream_timeout' } });
    a!.configure({ fault: 'slow-start=3000' });
    const whole = await chat(g);
    expect(whole.status).toBe(504);
    expect(JSON.parse(whole.body)).toMatchObject({ error: { code: 'upstream_timeout', type: 'server_error' } });
  });
});

describe('admission control', () => {
  it('queues beyond maxConcurrencyPerReplica, turns away the overflow with 429 and Retry-After, and answers everyone', async () => {
    const [a] = await sims(1, { itlMs: 20 });
    const g = await gateway([a!.url], { ...fast, maxConcurrencyPerReplica: 2, queue: { maxSize: 3, timeoutMs: 5000 } });
    const results = await Promise.all(Array.from({ length: 8 }, () => chat(g, { max_tokens: 10, ignore_eos: true })));
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
    for (const r of results.filter((x) => x.status === 429)) {
      expect(r.headers['retry-after']).toBe('1');
      expect(JSON.parse(r.body)).toMatchObject({ error: { code: 'queue_full', type: 'rate_limit_error' } });
    }
    expect(a!.engine.stats.finished.length + a!.engine.stats.finished.stop).toBe(5);
    const m = await metrics(g);
    expect(metricSum(m, 'modelgate_rejected_requests_total', { reason: 'queue_full' })).toBe(3);
    expect(metricSum(m, 'modelgate_queue_wait_seconds_count', { result: 'admitted' })).toBe(3);
  });

  it('answers 429 queue_timeout when no slot frees in time', async () => {
    const [a] = await sims(1, { itlMs: 50 });
    const g = await gateway([a!.url], { ...fast, maxConcurrencyPerReplica: 1, queue: { maxSize: 5, timeoutMs: 100 } });
    const [first, second] = await Promise.all([chat(g, { max_tokens: 20, ignore_eos: true }), chat(g, { max_tokens: 20, ignore_eos: true })]);
    expect([first.status, second.status].sort()).toEqual([200, 429]);
    expect(JSON.parse([first, second].find((r) => r.status === 429)!.body)).toMatchObject({ error: { code: 'queue_timeout' } });
  });

  it('takes a queued client that leaves out of the queue, so it never reaches a replica', async () => {
    const [a] = await sims(1, { itlMs: 20 });
    const g = await gateway([a!.url], { ...fast, maxConcurrencyPerReplica: 1, queue: { maxSize: 5, timeoutMs: 5000 } });
    const running = chat(g, { max_tokens: 15, ignore_eos: true });
    await waitFor(() => a!.engine.numRunning === 1, 'the first request to run');
    const leaving = chat(g, {}, { abortAfterMs: 50 });
    await waitFor(async () => metricSum(await metrics(g), 'modelgate_queue_depth') === 1, 'the second to queue');
    expect((await leaving).error?.code).toBe('CLIENT_ABORT');
    await waitFor(async () => metricSum(await metrics(g), 'modelgate_queue_depth') === 0, 'the queue to empty');
    expect((await running).status).toBe(200);
    expect(a!.engine.stats.promptTokens).toBeGreaterThan(0);
    expect(a!.engine.stats.finished.length + a!.engine.stats.finished.stop).toBe(1);
    expect(metricSum(await metrics(g), 'modelgate_queue_wait_seconds_count', { result: 'abandoned' })).toBe(1);
  });
});

describe('active health checks', () => {
  it('eject a replica that is up but failing its health check, and bring it back when healthy', async () => {
    const [a, b] = await sims(2);
    const g = await gateway([a!.url, b!.url], { healthCheck: { enabled: true, intervalMs: 100, unhealthyThreshold: 1, healthyThreshold: 1 } });
    const replicasOf = async (n: number): Promise<Set<string>> => new Set(await Promise.all(Array.from({ length: n }, async () => String((await chat(g)).headers['x-sim-replica']))));
    a!.configure({ unhealthy: true });
    await waitFor(async () => [...(await replicasOf(8))].join() === 'r1', 'the unhealthy replica to be ejected');
    a!.configure({ unhealthy: false });
    await waitFor(async () => (await replicasOf(12)).has('r0'), 'the replica to come back');
  });
});

describe('a replica whose answers break after their first tokens', () => {
  // Each stream's first byte used to count a success, resetting the failure count its broken end had
  // just added: a replica whose every stream stalled, died or errored a few tokens in was never taken out.
  it.each([
    ['stall (silent past the idle timeout)', 'stall-after=2', 'upstream_timeout'],
    ['die (the connection dropped)', 'die-after=2', 'upstream_stream_broken'],
    // an engine's own server error may be the request's doing: one key's open the breaker once the replica fails its health check too
    ['end in the engine’s own server error (its health check failing)', 'error-after=2', undefined],
  ])('streams that %s open its breaker; then every stream is served whole by the healthy replica', async (_case, fault, code) => {
    const [bad, good] = await sims(2);
    bad!.configure({ fault, unhealthy: fault.startsWith('error-after') });
    const g = await gateway([bad!.url, good!.url], { ...fast, timeouts: { idleMs: 200 } });
    const broken: RawResponse[] = [];
    await untilOpen(g, bad!.url, async () => {
      const res = await chat(g, { stream: true, max_tokens: 20, ignore_eos: true });
      if (res.headers['x-sim-replica'] === 'r0') broken.push(res);
      return res;
    });
    // the client saw each broken stream end with an error event after its first tokens
    expect(broken.length).toBe(2); // failureThreshold: 2, with the healthy replica's answers between them
    for (const res of broken) {
      const events = sseData(res.body);
      expect(contentTimes(res).length).toBeGreaterThanOrEqual(1);
      const error = events.map((e) => (e === '[DONE]' ? undefined : (JSON.parse(e) as { error?: { code?: string } }).error)).find((e) => e !== undefined);
      expect(error).toBeDefined();
      if (code) expect(error).toMatchObject({ code });
    }
    // the operator sees it open; every stream after it goes to the healthy replica and ends whole
    expect(metricSum(await metrics(g), 'modelgate_breaker_state', { endpoint: bad!.url })).toBe(2);
    for (let i = 0; i < 4; i++) {
      const res = await chat(g, { stream: true, max_tokens: 20, ignore_eos: true });
      expect(res.headers['x-sim-replica']).toBe('r1');
      expect(sseData(res.body).at(-1)).toBe('[DONE]');
      expect(contentTimes(res)).toHaveLength(20);
    }
  });
});

describe('one tenant’s requests that the engine answers with a server error', () => {
  const MALLORY = 'sk-mallory-0123456789';
  async function twoTenants(endpoints: string[], deployment: object = {}): Promise<TestRouter<RunningRouter>> {
    const g = await startTestRouter({
      keysYaml: `- name: tester\n  key: ${KEY}\n- name: mallory\n  key: ${MALLORY}\n`,
      // the simulator's fault header stands for a request the engine chokes on (forwarded as an operator would)
      server: { forwardHeaders: ['x-sim-fault'] },
      pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints, resilience: fast }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }], ...deployment }],
    });
    cleanups.push(() => g.close());
    return g;
  }
  const poisoned = (g: TestRouter<RunningRouter>): Promise<RawResponse> => chat(g, {}, { headers: { authorization: `Bearer ${MALLORY}`, 'x-sim-fault': 'status=500' } });

  it('do not open the breakers of replicas that pass their health check: every other tenant is served', async () => {
    // ten such requests opened both replicas' breakers, and every other tenant got 503 for a cool-down
    const replicas = await sims(2);
    const g = await twoTenants(replicas.map((r) => r.url));
    for (let i = 0; i < 10; i++) expect((await poisoned(g)).status).toBe(500);
    await waitFor(() => g.logs.some((l) => l.includes('circuit breaker kept closed')), 'the health check’s verdict');
    for (const r of replicas) expect(breakerOf(g, r.url) ?? 'closed').toBe('closed');
    expect((await chat(g)).status).toBe(200);
    const kept = JSON.parse(g.logs.find((l) => l.includes('circuit breaker kept closed'))!) as Record<string, unknown>;
    expect(kept).toMatchObject({ level: 40, pool: 'llm', keys: ['mallory'], failures: expect.any(Number) });
    expect(metricSum(await metrics(g), 'modelgate_breaker_state')).toBe(0);
  });

  it.each([
    ['', {}],
    [' on a deployment that resumes streams (the engine’s error event is held back to continue elsewhere)', { resumeStreams: true }],
  ])('streams that end in the engine’s own server error, one tenant’s%s, do not open breakers of healthy replicas', async (_case, deployment) => {
    const replicas = await sims(3);
    const g = await twoTenants(
      replicas.map((r) => r.url),
      deployment,
    );
    for (let i = 0; i < 6; i++) await chat(g, { stream: true, max_tokens: 20, ignore_eos: true }, { headers: { authorization: `Bearer ${MALLORY}`, 'x-sim-fault': 'error-after=2' } });
    await waitFor(() => g.logs.some((l) => l.includes('circuit breaker kept closed')), 'the health check’s verdict');
    for (const r of replicas) expect(breakerOf(g, r.url) ?? 'closed').toBe('closed');
    expect((await chat(g)).status).toBe(200);
  });

  it('open the breaker of a replica whose engine died (its health check fails too), and the others serve', async () => {
    const [dead, ok] = await sims(2);
    dead!.configure({ fault: 'status=500', unhealthy: true }); // as vLLM once its engine core is dead: 500 to everything, /health failing
    const g = await twoTenants([dead!.url, ok!.url]);
    // one key alone (a fleet of one application): its server errors still take the dead replica out, once its health check fails
    await untilOpen(g, dead!.url, async () => {
      const res = await chat(g);
      return res.status === 500 ? { ...res, status: 200 } : res; // the requests the dead replica got were answered 500
    });
    for (let i = 0; i < 4; i++) expect((await chat(g)).headers['x-sim-replica']).toBe('r1');
  });
});

describe('breaker recovery', () => {
  it('half-opens after the cool-down and closes when the replica answers again', async () => {
    const [a, b] = await sims(2);
    const g = await gateway([a!.url, b!.url], { ...fast, breaker: { failureThreshold: 2, cooldownMs: 300, closeAfterSuccesses: 1 } });
    a!.configure({ fault: 'status=502' });
    await untilOpen(g, a!.url, () => chat(g));
    a!.configure({ fault: '' });
    await waitFor(async () => {
      await chat(g);
      return breakerOf(g, a!.url) === 'closed';
    }, 'the breaker to close after a successful probe');
  });
});
