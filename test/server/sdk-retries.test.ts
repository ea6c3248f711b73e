/**
 * What the official SDKs' automatic retries do with the router's error answers, counted at the router:
 * an answer that asks for a wait longer than the SDKs take (a key's tokens bucket deep in debt, an
 * engine's `Retry-After: 3600` passed on) says `x-should-retry: false`, so OpenAI's SDK does not send
 * it again twice within 1.5 s (each refused again) and Anthropic's does not sleep the whole wait inside
 * the call.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { adminMetrics, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const INDEBTED = 'sk-indebted-0123456789'; // 1,000 tokens a minute
const FREE = 'sk-free-0123456789';

let sim: SimServer;
let busySim: SimServer;
let refusingSim: SimServer;
let hungSim: SimServer;
let flakySim: SimServer;
let saysNo: http.Server;
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  sim = await startTestSim({ model: ['meta/llama'] });
  // an engine (say, a hosted API behind an `openai` pool) that asks for an hour's wait
  busySim = await startTestSim({ model: ['meta/busy'], fault: 'status=429,retry-after=3600' });
  // an engine that refuses the router's backend key, and one that never answers
  refusingSim = await startTestSim({ model: ['meta/refusing'], fault: 'status=401' });
  hungSim = await startTestSim({ model: ['meta/hung'], fault: 'hang' });
  // a replica that hangs until a test mends it
  flakySim = await startTestSim({ model: ['meta/flaky'], fault: 'hang' });
  // a hosted API (or another router) behind an `openai` pool, whose error says it will not change
  saysNo = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const body = JSON.stringify({ error: { message: 'This organization is not allowed to use this model.', type: 'server_error', param: null, code: null } });
      res.writeHead(500, { 'content-type': 'application/json', 'x-should-retry': 'false' }).end(body);
    });
  });
  await new Promise<void>((resolve) => saysNo.listen(0, '127.0.0.1', resolve));
  const hung = (name: string, maxRetries: number): object => ({
    name,
    servedModelName: 'meta/hung',
    capabilities: ['chat'],
    endpoints: [hungSim.url],
    resilience: { timeouts: { firstByteMs: 200 }, retries: { maxRetries, initialBackoffMs: 0 }, breaker: { failureThreshold: 100 } },
  });
  gateway = await startTestRouter({
    pools: [
      { name: 'llama', servedModelName: 'meta/llama', capabilities: ['chat', 'messages'], endpoints: [sim.url] },
      { name: 'busy', servedModelName: 'meta/busy', capabilities: ['chat', 'messages'], endpoints: [busySim.url] },
      { name: 'refusing', servedModelName: 'meta/refusing', capabilities: ['chat', 'messages'], endpoints: [refusingSim.url] },
      { name: 'says-no', engine: 'openai', servedModelName: 'hosted/model', capabilities: ['chat'], endpoints: [`http://127.0.0.1:${(saysNo.address() as AddressInfo).port}`] },
      hung('hung', 1),
      hung('hung-no-retries', 0),
      // one timeout opens the breaker for 4.5 s: longer than the SDK's two retries 2 s apart would wait (a server
      // error the engine answered would ask the health check first, which the replica passes)
      {
        name: 'flaky',
        servedModelName: 'meta/flaky',
        capabilities: ['chat'],
        endpoints: [flakySim.url],
        resilience: { timeouts: { firstByteMs: 200 }, retries: { maxRetries: 0 }, breaker: { failureThreshold: 1, cooldownMs: 4_500 } },
      },
    ],
    deployments: [
      { id: 'llama', model: 'llama', targets: [{ pool: 'llama' }] },
      { id: 'busy', model: 'busy', targets: [{ pool: 'busy' }] },
      { id: 'refusing', model: 'refusing', targets: [{ pool: 'refusing' }] },
      { id: 'says-no', model: 'says-no', targets: [{ pool: 'says-no' }] },
      { id: 'hung', model: 'hung', targets: [{ pool: 'hung' }] },
      { id: 'hung-no-retries', model: 'hung-no-retries', targets: [{ pool: 'hung-no-retries' }] },
      { id: 'flaky', model: 'flaky', targets: [{ pool: 'flaky' }] },
    ],
    keysYaml: `- name: indebted\n  key: ${INDEBTED}\n  limits: { tokensPerMinute: 1000 }\n- name: free\n  key: ${FREE}\n`,
  });
});
afterAll(async () => {
  await gateway.close();
  await sim.close();
  await busySim.close();
  await refusingSim.close();
  await hungSim.close();
  await flakySim.close();
  await new Promise<void>((resolve) => saysNo.close(() => resolve()));
});

/** The access log's request lines for `path` so far. */
function requestsTo(path: string): number {
  return gateway.logs.filter((line) => line.includes('"msg":"request"') && line.includes(`"path":"${path}"`)).length;
}

const chat = { model: 'llama', messages: [{ role: 'user' as const, content: 'hello' }], max_tokens: 5 };

describe("a wait longer than the SDKs take: x-should-retry: false, and the SDK's one request", () => {
  it('a tokens bucket minutes in debt: the OpenAI SDK (2 retries) sends one request, not three', async () => {
    const openai = new OpenAI({ apiKey: INDEBTED, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    // one admitted prompt of about 4,000 tokens puts the 1,000-a-minute bucket about 3,000 in debt: minutes to refill
    const big = await openai.chat.completions.create({ ...chat, messages: [{ role: 'user', content: 'word '.repeat(4000) }] });
    expect(big.usage?.prompt_tokens).toBeGreaterThan(3000);
    const before = metricSum(await adminMetrics(gateway), 'modelgate_limit_rejections_total', { reason: 'tokens' });
    const refused = await openai.chat.completions.create(chat).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.code).toBe('rate_limit_exceeded');
    expect(Number(error.headers?.get('retry-after-ms'))).toBeGreaterThan(60_000);
    expect(error.headers?.get('x-should-retry')).toBe('false');
    // refused once: the SDK did not retry at once on its own backoff, ignoring a wait it will not take
    expect(metricSum(await adminMetrics(gateway), 'modelgate_limit_rejections_total', { reason: 'tokens' }) - before).toBe(1);

    // Anthropic's SDK would sleep the minutes inside messages.create: it answers at once instead
    const anthropic = new Anthropic({ apiKey: INDEBTED, baseURL: gateway.router.apiUrl, maxRetries: 2 });
    const anthropicRefused = await anthropic.messages.create(chat).catch((err: unknown) => err);
    expect(anthropicRefused).toBeInstanceOf(Anthropic.RateLimitError);
    expect(metricSum(await adminMetrics(gateway), 'modelgate_limit_rejections_total', { reason: 'tokens' }) - before).toBe(2);
  });

  it("an engine's Retry-After of an hour, passed on: one request reaches the router and the engine per SDK call", async () => {
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    const before = requestsTo('/v1/chat/completions');
    const refused = await openai.chat.completions.create({ ...chat, model: 'busy' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.headers?.get('retry-after')).toBe('3600');
    expect(error.headers?.get('x-should-retry')).toBe('false');
    // the access log line is written as the exchange ends, a moment after the answer
    await waitFor(() => requestsTo('/v1/chat/completions') > before, 'the request logged');
    expect(requestsTo('/v1/chat/completions') - before).toBe(1);

    const anthropic = new Anthropic({ apiKey: FREE, baseURL: gateway.router.apiUrl, maxRetries: 2 });
    const messagesBefore = requestsTo('/v1/messages');
    const anthropicRefused = await anthropic.messages.create({ ...chat, model: 'busy' }).catch((err: unknown) => err);
    expect(anthropicRefused).toBeInstanceOf(Anthropic.RateLimitError);
    await waitFor(() => requestsTo('/v1/messages') > messagesBefore, 'the request logged');
    expect(requestsTo('/v1/messages') - messagesBefore).toBe(1);
  });
});

describe('errors retrying cannot fix, or that the router has already retried: x-should-retry: false', () => {
  it("an engine that refuses the router's backend key (502 upstream_auth_failed): one request per SDK call, not three", async () => {
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    const before = requestsTo('/v1/chat/completions');
    const refused = await openai.chat.completions.create({ ...chat, model: 'refusing' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.InternalServerError);
    const error = refused as InstanceType<typeof OpenAI.InternalServerError>;
    expect(error.status).toBe(502);
    expect(error.code).toBe('upstream_auth_failed');
    expect(error.headers?.get('x-should-retry')).toBe('false');
    await waitFor(() => requestsTo('/v1/chat/completions') > before, 'the request logged');
    expect(requestsTo('/v1/chat/completions') - before).toBe(1);

    const anthropic = new Anthropic({ apiKey: FREE, baseURL: gateway.router.apiUrl, maxRetries: 2 });
    const messagesBefore = requestsTo('/v1/messages');
    const anthropicRefused = await anthropic.messages.create({ ...chat, model: 'refusing' }).catch((err: unknown) => err);
    expect(anthropicRefused).toBeInstanceOf(Anthropic.InternalServerError);
    await waitFor(() => requestsTo('/v1/messages') > messagesBefore, 'the request logged');
    expect(requestsTo('/v1/messages') - messagesBefore).toBe(1);
  });

  it("an engine's own x-should-retry: false is passed on with its error: one request per SDK call", async () => {
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    const before = requestsTo('/v1/chat/completions');
    const refused = await openai.chat.completions.create({ ...chat, model: 'says-no' }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.InternalServerError);
    expect((refused as InstanceType<typeof OpenAI.InternalServerError>).headers?.get('x-should-retry')).toBe('false');
    await waitFor(() => requestsTo('/v1/chat/completions') > before, 'the request logged');
    expect(requestsTo('/v1/chat/completions') - before).toBe(1);
  });

  it('a first-byte timeout the router retried (504 upstream_timeout): the SDK does not send it through every attempt again', async () => {
    const attempts = async (): Promise<number> => metricSum(await adminMetrics(gateway), 'modelgate_upstream_attempts_total', { pool: 'hung' });
    const before = await attempts();
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    const timedOut = await openai.chat.completions.create({ ...chat, model: 'hung' }).catch((err: unknown) => err);
    expect(timedOut).toBeInstanceOf(OpenAI.InternalServerError);
    const error = timedOut as InstanceType<typeof OpenAI.InternalServerError>;
    expect(error.status).toBe(504);
    expect(error.code).toBe('upstream_timeout');
    expect(error.headers?.get('x-should-retry')).toBe('false');
    // the router's two attempts, once: not 2 × 3
    await waitFor(async () => (await attempts()) - before >= 2, 'the attempts counted');
    expect((await attempts()) - before).toBe(2);
  });

  it('a timeout the router did not retry (its pool allows no retries) is left to the SDK, which retries it', async () => {
    const before = requestsTo('/v1/chat/completions');
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 1 });
    const timedOut = await openai.chat.completions.create({ ...chat, model: 'hung-no-retries' }).catch((err: unknown) => err);
    expect((timedOut as InstanceType<typeof OpenAI.InternalServerError>).status).toBe(504);
    expect((timedOut as InstanceType<typeof OpenAI.InternalServerError>).headers?.get('x-should-retry')).toBeNull();
    await waitFor(() => requestsTo('/v1/chat/completions') - before >= 2, 'both requests logged');
    expect(requestsTo('/v1/chat/completions') - before).toBe(2);
    // the operator tells the SDK's retry from a new call: its line says clientRetry (the SDK's x-stainless-retry-count)
    const lines = gateway.logs.filter((line) => line.includes('"msg":"request"') && line.includes('"model":"hung-no-retries"'));
    expect(lines.map((line) => (JSON.parse(line) as { clientRetry?: number }).clientRetry)).toEqual([undefined, 1]);
  });
});

describe('a pool whose every replica is held out by its breaker', () => {
  it('says how long the cool-down has left, so the OpenAI SDK retries once, when the replica is tried again, and gets its answer', async () => {
    // the replica times out once: its breaker opens for 4.5 s; then it is mended
    const failed = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${FREE}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...chat, model: 'flaky' }),
    });
    expect(failed.status).toBe(504);
    flakySim.configure({ fault: '' });
    const before = requestsTo('/v1/chat/completions');
    const raw = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${FREE}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...chat, model: 'flaky' }),
    });
    expect(raw.status).toBe(503);
    // whole seconds to the cool-down's end (4.5 s from the failure, a moment ago): 4 or 5, never the usual 2
    expect(Number(raw.headers.get('retry-after'))).toBeGreaterThanOrEqual(4);
    expect(((await raw.json()) as { error: { code: string } }).error.code).toBe('no_ready_replica');

    // with the usual Retry-After of 2 s, both of the SDK's retries met the open breaker and the call failed
    const openai = new OpenAI({ apiKey: FREE, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 2 });
    const answer = await openai.chat.completions.create({ ...chat, model: 'flaky' });
    expect(answer.choices[0]?.message.content).toBeTruthy();
    await waitFor(() => requestsTo('/v1/chat/completions') >= before + 3, 'the requests logged');
    // the probe above (503), then the SDK's call: one 503 and its one retry, answered
    expect(requestsTo('/v1/chat/completions') - before).toBe(3);
  }, 20_000);
});

describe('request ids through the SDKs', () => {
  it("Anthropic's SDK gets the router's request id on /v1/models too, as on /v1/messages, matching the access log", async () => {
    const anthropic = new Anthropic({ apiKey: FREE, baseURL: gateway.router.apiUrl, maxRetries: 0 });
    const listed = await anthropic.models.list().withResponse();
    expect(listed.request_id).toMatch(/^[0-9a-f-]{36}$/);
    const missing = await anthropic.models.retrieve('nope').catch((err: unknown) => err);
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    const id = (missing as InstanceType<typeof Anthropic.NotFoundError>).requestID;
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    await waitFor(() => gateway.logs.some((line) => line.includes(`"requestId":"${id ?? ''}"`)), 'the request logged under that id');
  });
});
