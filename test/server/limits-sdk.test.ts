/**
 * Per-key limits as clients see them, through the official SDKs (only the base URL changed): OpenAI's
 * rate-limit headers on every admitted response, a 429 the SDK retries after the Retry-After it was
 * given, a spent budget it does not retry, Anthropic's envelope on /v1/messages, a stream counted while
 * it flows, GET /v1/limits — and what the other tenant and the operator see.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { writeFile } from 'node:fs/promises';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { adminMetrics, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const RATED = 'sk-rated-0123456789'; // 120 requests a minute: one every 500 ms
const TINY = 'sk-tiny-0123456789'; // a 60-token day
const STREAMER = 'sk-streamer-0123456789';
const FREE = 'sk-free-0123456789';
const BUSY = 'sk-busy-0123456789';
const DEFAULTED = 'sk-defaulted-0123456789';
const LEAVER = 'sk-leaver-0123456789';

let sim: SimServer;
let slowSim: SimServer;
let gateway: TestRouter<RunningRouter>;

const keysYaml = `
- name: rated
  key: ${RATED}
  limits: { requestsPerMinute: 120, tokensPerMinute: 100000 }
- name: tiny
  key: ${TINY}
  limits: { requestsPerMinute: unlimited, tokensPerDay: 60 }
- name: streamer
  key: ${STREAMER}
  limits: { requestsPerMinute: unlimited, tokensPerMinute: 100000, tokensPerMonth: 1000000 }
- name: busy
  key: ${BUSY}
  limits: { requestsPerMinute: unlimited, concurrentRequests: 1 }
- name: defaulted
  key: ${DEFAULTED}
- name: leaver
  key: ${LEAVER}
  limits: { requestsPerMinute: unlimited, tokensPerDay: 100000 }
- name: free
  key: ${FREE}
  limits: { requestsPerMinute: unlimited }
`;

beforeAll(async () => {
  sim = await startTestSim({ model: ['meta/llama'], name: 'replica' });
  // 200 tokens, 10 ms apart: a stream of about two seconds
  slowSim = await startTestSim({ model: ['meta/slow'], name: 'slow', itlMs: 10, jitter: 0, outputMin: 200, outputMax: 200 });
  gateway = await startTestRouter({
    pools: [
      { name: 'llama', servedModelName: 'meta/llama', capabilities: ['chat', 'completions', 'messages'], endpoints: [sim.url] },
      { name: 'slow', servedModelName: 'meta/slow', capabilities: ['chat'], endpoints: [slowSim.url] },
    ],
    deployments: [
      { id: 'llama-prod', model: 'llama', targets: [{ pool: 'llama' }] },
      { id: 'slow-prod', model: 'slow', targets: [{ pool: 'slow' }] },
    ],
    keysYaml,
    config: { limits: { defaults: { requestsPerMinute: 1 }, keyMetrics: true } },
  });
});
afterAll(async () => {
  await gateway.close();
  await sim.close();
  await slowSim.close();
});

function openai(key: string, maxRetries = 0): OpenAI {
  return new OpenAI({ apiKey: key, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries });
}

const chat = { model: 'llama', messages: [{ role: 'user' as const, content: 'hello there' }], max_tokens: 5 };

describe('rate limits through the openai client', () => {
  it("puts OpenAI's x-ratelimit headers on each admitted response", async () => {
    const { response } = await openai(RATED).chat.completions.create(chat).withResponse();
    expect(response.status).toBe(200);
    expect(response.headers.get('x-ratelimit-limit-requests')).toBe('120');
    expect(Number(response.headers.get('x-ratelimit-remaining-requests'))).toBe(119);
    expect(response.headers.get('x-ratelimit-reset-requests')).toMatch(/^\d+ms$/);
    expect(response.headers.get('x-ratelimit-limit-tokens')).toBe('100000');
    expect(response.headers.get('x-ratelimit-remaining-tokens')).toMatch(/^\d+$/);
  });

  it('answers a key past its requests per minute 429 rate_limit_exceeded; the SDK waits the Retry-After it is given and gets through', async () => {
    const rated = openai(RATED);
    // spend the whole bucket, then one more is refused
    const refused = await (async () => {
      for (let i = 0; i < 200; i++) {
        try {
          await rated.chat.completions.create({ ...chat, max_tokens: 1 });
        } catch (err) {
          return err;
        }
      }
      return undefined;
    })();
    expect(refused).toBeInstanceOf(OpenAI.RateLimitError);
    const error = refused as InstanceType<typeof OpenAI.RateLimitError>;
    expect(error.status).toBe(429);
    expect(error.code).toBe('rate_limit_exceeded');
    expect(error.type).toBe('requests');
    expect(Number(error.headers?.get('retry-after-ms'))).toBeGreaterThan(0);
    expect(Number(error.headers?.get('retry-after-ms'))).toBeLessThanOrEqual(500);
    expect(error.headers?.get('x-ratelimit-remaining-requests')).toBe('0');
    // with its default retries the SDK sleeps the retry-after-ms (≤ 500 ms) and the bucket has refilled by then
    const retried = await openai(RATED, 2).chat.completions.create({ ...chat, max_tokens: 1 });
    expect(retried.choices).toHaveLength(1);
  });

  it('answers a spent budget 429 insufficient_quota, which the SDK does not retry', async () => {
    const client = openai(TINY, 3);
    const before = metricSum(await adminMetrics(gateway), 'modelgate_limit_rejections_total', { reason: 'budget' });
    let error: unknown;
    for (let i = 0; i < 20 && error === undefined; i++) {
      try {
        await client.chat.completions.create({ ...chat, max_tokens: 10 });
      } catch (err) {
        error = err;
      }
    }
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('insufficient_quota');
    expect((error as InstanceType<typeof OpenAI.RateLimitError>).message).toMatch(/budget of 60 tokens per day/);
    // one refusal counted: the SDK honoured x-should-retry: false instead of retrying three times
    expect(metricSum(await adminMetrics(gateway), 'modelgate_limit_rejections_total', { reason: 'budget' }) - before).toBe(1);
  });

  it("holds a key that sets no limits to the config's defaults", async () => {
    const client = openai(DEFAULTED);
    await client.chat.completions.create(chat);
    await expect(client.chat.completions.create(chat)).rejects.toThrow(/requests per min \(RPM\): Limit 1, Remaining 0/);
  });

  it('leaves the other tenants alone: a key without limits gets no rate-limit headers and is never refused', async () => {
    const { response } = await openai(FREE).chat.completions.create(chat).withResponse();
    expect(response.headers.get('x-ratelimit-limit-requests')).toBeNull();
  });

  it('counts a stream while it flows; the usage appears in GET /v1/limits and the per-key metrics', async () => {
    const client = openai(STREAMER);
    const stream = await client.chat.completions.create({ ...chat, max_tokens: 40, stream: true, stream_options: { include_usage: true } });
    let completion = 0;
    for await (const chunk of stream) if (chunk.usage) completion = chunk.usage.total_tokens;
    expect(completion).toBeGreaterThan(0);
    type Limits = Record<string, { limit: number; used?: number; remaining: number }>;
    const read = async (): Promise<Limits> => JSON.parse((await rawRequest(`${gateway.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${STREAMER}` } })).body) as Limits;
    expect(await read()).toMatchObject({ object: 'limits', key: 'streamer', limited: true, tokens_per_minute: { limit: 100000 }, tokens_per_month: { limit: 1000000 } });
    // settled within a flush: the engine's own count replaces the estimate and the streamed count
    await waitFor(async () => (await read()).tokens_per_month?.used === completion, 'the usage settled');
    const metrics = await adminMetrics(gateway);
    expect(metricSum(metrics, 'modelgate_key_tokens_total', { key: 'streamer' })).toBe(completion);
    expect(metricSum(metrics, 'modelgate_key_requests_total', { key: 'streamer', outcome: 'admitted' })).toBe(1);
    // the budget left, as of the request's end (it showed what was left at its admission, less its estimate only)
    expect(metricSum(metrics, 'modelgate_key_budget_remaining_tokens', { key: 'streamer', window: 'month' })).toBe((await read()).tokens_per_month?.remaining);
  });

  it('charges a request an engine worked on and whose answer never came its prompt’s estimate (a client that left), not a refund', async () => {
    type Limits = { tokens_per_day?: { used: number } };
    const read = async (): Promise<Limits> => JSON.parse((await rawRequest(`${gateway.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${LEAVER}` } })).body) as Limits;
    // non-streamed, about two seconds of generation: the client leaves after 300 ms, the engine's request is cancelled
    const left = await rawRequest(`${gateway.router.apiUrl}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${LEAVER}` },
      body: { model: 'slow', messages: [{ role: 'user', content: 'Tell me a long story about load balancers, please.' }] },
      abortAfterMs: 300,
    });
    expect(left.error?.code).toBe('CLIENT_ABORT');
    await waitFor(async () => ((await read()).tokens_per_day?.used ?? 0) > 0, 'the estimate charged');
    const used = (await read()).tokens_per_day?.used ?? 0;
    expect(used).toBeLessThan(50); // the prompt's estimate (about four characters a token), no completion tokens the router could count
    expect(metricSum(await adminMetrics(gateway), 'modelgate_key_tokens_total', { key: 'leaver', type: 'prompt' })).toBe(used);
  });

  it('counts a key without limits in the per-key metrics too (showback covers every key, not only the limited ones)', async () => {
    const before = metricSum(await adminMetrics(gateway), 'modelgate_key_requests_total', { key: 'free', outcome: 'admitted' });
    const tokensBefore = metricSum(await adminMetrics(gateway), 'modelgate_key_tokens_total', { key: 'free' });
    const answer = await openai(FREE).chat.completions.create(chat);
    const used = answer.usage?.total_tokens ?? 0;
    expect(used).toBeGreaterThan(0);
    // counted when the exchange has ended, just after the answer
    await waitFor(async () => metricSum(await adminMetrics(gateway), 'modelgate_key_requests_total', { key: 'free', outcome: 'admitted' }) === before + 1, 'the free key counted');
    expect(metricSum(await adminMetrics(gateway), 'modelgate_key_tokens_total', { key: 'free' })).toBe(tokensBefore + used);
  });

  it("counts a long stream's tokens while it flows: the key's budget shows them before the stream ends", async () => {
    type Limits = Record<string, { used: number }>;
    const used = async (): Promise<number> =>
      (JSON.parse((await rawRequest(`${gateway.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${STREAMER}` } })).body) as Limits).tokens_per_month?.used ?? 0;
    const before = await used();
    const stream = await openai(STREAMER).chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'go on' }], max_tokens: 200, stream: true });
    let chunks = 0;
    let seenMidStream = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content) chunks += 1;
      // halfway through, the budget already holds more than the prompt's estimate: the streamed tokens were sent
      if (chunks === 100) {
        await waitFor(async () => (await used()) - before > 50, 'streamed tokens counted mid-stream');
        seenMidStream = (await used()) - before;
      }
    }
    expect(chunks).toBe(200);
    expect(seenMidStream).toBeGreaterThan(50);
    expect(seenMidStream).toBeLessThan(200);
  });

  it('GET /v1/limits tells a key without limits so, and needs a key', async () => {
    const free = await rawRequest(`${gateway.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${FREE}` } });
    expect(JSON.parse(free.body)).toEqual({ object: 'limits', key: 'free', limited: false });
    expect((await rawRequest(`${gateway.router.apiUrl}/v1/limits`)).status).toBe(401);
  });
});

describe('concurrency and the Anthropic envelope', () => {
  it("refuses a second concurrent request of a key limited to one, in Anthropic's envelope on /v1/messages", async () => {
    const anthropic = new Anthropic({ apiKey: BUSY, baseURL: gateway.router.apiUrl, maxRetries: 0 });
    const slow = anthropic.messages.create({ model: 'llama', max_tokens: 200, messages: [{ role: 'user', content: 'take your time' }], stream: true });
    const stream = await slow;
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next(); // the first event is here: the request holds its slot
    const second = await anthropic.messages.create({ model: 'llama', max_tokens: 5, messages: [{ role: 'user', content: 'me too' }] }).catch((err: unknown) => err);
    expect(second).toBeInstanceOf(Anthropic.RateLimitError);
    expect((second as InstanceType<typeof Anthropic.RateLimitError>).error).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } });
    expect(JSON.stringify((second as InstanceType<typeof Anthropic.RateLimitError>).error)).toMatch(/may have 1 in flight at once/);
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
      // drain: the slot frees when the stream ends
    }
    const after = await anthropic.messages.create({ model: 'llama', max_tokens: 5, messages: [{ role: 'user', content: 'now' }] });
    expect(after.type).toBe('message');
  });
});

describe('a key taken out of the keys file', () => {
  it('loses its per-key series at the reload (a revoked key kept its budget gauge for good); the other keys keep theirs', async () => {
    await openai(STREAMER).chat.completions.create(chat);
    await openai(TINY)
      .chat.completions.create(chat)
      .catch(() => undefined);
    const series = async (key: string): Promise<number> => (await adminMetrics(gateway)).split('\n').filter((l) => l.startsWith('modelgate_key_') && l.includes(`key="${key}"`)).length;
    expect(await series('tiny')).toBeGreaterThan(0);
    const streamerBefore = await series('streamer');
    expect(streamerBefore).toBeGreaterThan(0);
    // the operator revokes tiny: its entry leaves the file
    await writeFile(gateway.keysFile, keysYaml.replace(/- name: tiny\n {2}key: \S+\n {2}limits: .*\n/, ''));
    expect(await gateway.router.keys.reload()).toBe(true);
    expect(await series('tiny')).toBe(0);
    expect(await series('streamer')).toBe(streamerBefore);
  });
});
