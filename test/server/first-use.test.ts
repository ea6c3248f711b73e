/**
 * What a new user met on the first try, over real sockets with the official `openai` client:
 * fallbacks on the very first request, `models.retrieve`, engine error types, the access log.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter, type TestRouterOptions } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

let live: SimServer;
let deadUrl: string;
const routers: Array<TestRouter<RunningRouter>> = [];

beforeAll(async () => {
  live = await startTestSim({ model: ['served/big'], name: 'big-0', maxModelLen: 64 });
  const dead = await startTestSim({ model: ['served/small'] });
  deadUrl = dead.url;
  await dead.close(); // its port now refuses connections
});
afterEach(async () => {
  for (const g of routers.splice(0)) await g.close();
});
afterAll(() => live.close());

async function gateway(options: TestRouterOptions): Promise<{ g: TestRouter<RunningRouter>; client: OpenAI }> {
  const g = await startTestRouter(options);
  routers.push(g);
  return { g, client: new OpenAI({ apiKey: KEY, baseURL: `${g.router.apiUrl}/v1`, maxRetries: 0 }) };
}

/** `small` (one replica, refusing connections) falls back to `big`. */
function fallbackSetup(resilience: object = {}): TestRouterOptions {
  return {
    pools: [
      { name: 'small', servedModelName: 'served/small', endpoints: [deadUrl], resilience },
      { name: 'big', servedModelName: 'served/big', endpoints: [live.url] },
    ],
    deployments: [
      { id: 'small-prod', model: 'small', targets: [{ pool: 'small' }], fallbacks: ['big-prod'] },
      { id: 'big-prod', model: 'big', aliases: ['meta-llama/Llama-3.1-8B-Instruct'], targets: [{ pool: 'big' }] },
    ],
  };
}

interface LogLine {
  msg: string;
  model?: string;
  deployment?: string;
  pool?: string;
  endpoint?: string;
  fallback?: string;
  status?: number;
}
const requestLines = (g: TestRouter<RunningRouter>): LogLine[] =>
  g.logs
    .join('')
    .split('\n')
    .filter((l) => l.includes('"msg":"request"'))
    .map((l) => JSON.parse(l) as LogLine);

describe('fallbacks', () => {
  it.each([
    ['with retries', {}],
    ['with no retry budget', { retries: { maxRetries: 0 } }],
  ])('the first request to a pool whose only replica refuses connections moves on to the fallback (%s)', async (_what, resilience) => {
    const { g, client } = await gateway(fallbackSetup(resilience));
    const first = await client.chat.completions.create({ model: 'small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 });
    expect(first.choices[0]?.message.content).toMatch(/\w/);
    const m = await adminMetrics(g);
    expect(metricSum(m, 'modelgate_fallbacks_total', { from_deployment: 'small-prod', to_deployment: 'big-prod' })).toBe(1);
    expect(metricSum(m, 'modelgate_upstream_attempts_total', { endpoint: deadUrl, outcome: 'connect' })).toBe(1); // one try, then on
    await waitFor(() => requestLines(g).length === 1, 'the access log line');
    expect(requestLines(g)[0]).toMatchObject({ status: 200, model: 'small', deployment: 'small-prod', pool: 'big', fallback: 'big-prod', endpoint: live.url });
  });

  it('moves on when every attempt in a pool got a retryable error, and never for an error that is the request’s own', async () => {
    const busy = await startTestSim({ model: ['served/small'], fault: 'status=503' });
    try {
      const { client } = await gateway({
        ...fallbackSetup({ retries: { initialBackoffMs: 1, maxBackoffMs: 2 } }),
        pools: [
          { name: 'small', servedModelName: 'served/small', endpoints: [busy.url] },
          { name: 'big', servedModelName: 'served/big', endpoints: [live.url] },
        ],
      });
      expect((await client.chat.completions.create({ model: 'small', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 })).choices).toHaveLength(1);
      const err = await client.chat.completions.create({ model: 'big', messages: [{ role: 'user', content: 'x '.repeat(200) }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError); // not retryable: passed on, no fallback
    } finally {
      await busy.close();
    }
  });
});

describe('GET /v1/models/{model}', () => {
  it('serves client.models.retrieve for every name the key may use, slashes included, in OpenAI’s shape', async () => {
    const { client } = await gateway(fallbackSetup());
    const names = (await client.models.list()).data.map((m) => m.id);
    expect(names).toEqual(expect.arrayContaining(['small', 'small-prod', 'big', 'big-prod', 'meta-llama/Llama-3.1-8B-Instruct']));
    for (const id of names) {
      const model = await client.models.retrieve(id);
      expect(model).toEqual({ id, object: 'model', created: expect.any(Number), owned_by: 'modelgate' });
    }
    const missing = await client.models.retrieve('no-such-model').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    expect((missing as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
  });
});

describe('engine errors', () => {
  it('reach the client with OpenAI’s type, the engine’s message and the code', async () => {
    const { client } = await gateway(fallbackSetup());
    const err = await client.chat.completions.create({ model: 'big', messages: [{ role: 'user', content: 'x '.repeat(200) }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const bad = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(bad.type).toBe('invalid_request_error'); // vLLM says BadRequestError
    expect(bad.code).toBe('context_length_exceeded');
    expect(bad.message).toContain('maximum context length is 64 tokens');
  });
});
