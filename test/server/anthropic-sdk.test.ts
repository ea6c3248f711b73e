/**
 * The official @anthropic-ai/sdk through the router's /v1/messages, as a Claude-style client calls it
 * (only the base URL changed): the key as x-api-key (the SDK's default) or a Bearer token, messages.create
 * and messages.stream, tokens counted, and every error — the router's and the engine's, before and during
 * a stream — in Anthropic's envelope, so the SDK raises its own typed errors.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;
let client: Anthropic;

beforeAll(async () => {
  sims = await Promise.all([startTestSim({ model: ['Qwen/Qwen3-8B'] }), startTestSim({ model: ['Qwen/Qwen3-8B'] })]);
  gateway = await startTestRouter({
    pools: [
      { name: 'qwen', servedModelName: 'Qwen/Qwen3-8B', capabilities: ['chat', 'messages'], endpoints: sims.map((s) => s.url) },
      { name: 'chat-only', servedModelName: 'Qwen/Qwen3-8B', capabilities: ['chat'], endpoints: [sims[0]?.url] },
    ],
    deployments: [
      { id: 'qwen-prod', model: 'claude-house', aliases: ['qwen'], targets: [{ pool: 'qwen' }] },
      { id: 'chat-prod', model: 'chat-only-model', targets: [{ pool: 'chat-only' }] },
    ],
    keysYaml: `- name: tester\n  key: ${KEY}\n- name: narrow\n  key: sk-narrow-0123456789\n  models: [chat-prod]\n`,
    // the simulator's per-request fault header is not on the default allow-list: forwarded as an operator would
    server: { forwardHeaders: ['x-sim-fault'] },
  });
  client = new Anthropic({ apiKey: KEY, baseURL: gateway.router.apiUrl, maxRetries: 0 });
});
afterAll(async () => {
  await gateway.close();
  await Promise.all(sims.map((s) => s.close()));
});

const ask = { model: 'claude-house', max_tokens: 8, messages: [{ role: 'user' as const, content: 'Hello there' }] };

describe('@anthropic-ai/sdk: messages', () => {
  it('messages.create with the key as x-api-key: a message with text and usage, counted by the router', async () => {
    const message = await client.messages.create(ask);
    expect(message.role).toBe('assistant');
    expect(message.content[0]?.type).toBe('text');
    expect(message.usage.input_tokens).toBeGreaterThan(0);
    const metrics = await adminMetrics(gateway);
    expect(metricSum(metrics, 'modelgate_requests_total', { route: 'messages', code: '200' })).toBeGreaterThanOrEqual(1);
    expect(metricSum(metrics, 'modelgate_prompt_tokens_total', { deployment: 'qwen-prod' })).toBeGreaterThanOrEqual(message.usage.input_tokens);
  });

  it('the SDK gets the router’s request id (Anthropic’s `request-id` header) on answers and errors alike', async () => {
    const message = await client.messages.create(ask);
    expect(message._request_id).toMatch(/^[0-9a-f-]{36}$/);
    const { response } = await client.messages.create(ask).withResponse();
    expect(response.headers.get('request-id')).toBe(response.headers.get('x-request-id'));
    const err = await client.messages.create({ ...ask, model: 'claude-nope' }).catch((e: unknown) => e);
    expect((err as InstanceType<typeof Anthropic.APIError>).requestID).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('a Bearer token (authToken) works as well', async () => {
    const bearer = new Anthropic({ apiKey: null, authToken: KEY, baseURL: gateway.router.apiUrl, maxRetries: 0 });
    const message = await bearer.messages.create({ ...ask, model: 'qwen' });
    expect(message.content.length).toBeGreaterThan(0);
  });

  it('messages.stream: text deltas, a final message, and TTFT and tokens in the router’s metrics', async () => {
    const before = await adminMetrics(gateway);
    const stream = client.messages.stream({ ...ask, max_tokens: 6 });
    let text = '';
    stream.on('text', (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(text).toMatch(/\w/);
    expect(final.content[0]?.type === 'text' && final.content[0].text).toBe(text);
    const after = await adminMetrics(gateway);
    const delta = (name: string): number => metricSum(after, name, { deployment: 'qwen-prod' }) - metricSum(before, name, { deployment: 'qwen-prod' });
    expect(delta('modelgate_time_to_first_token_seconds_count')).toBe(1);
    expect(delta('modelgate_completion_tokens_total')).toBe(final.usage.output_tokens);
    expect(delta('modelgate_prompt_tokens_total')).toBe(final.usage.input_tokens);
  });

  it('a stream the engine breaks ends with Anthropic’s error event: the SDK raises it', async () => {
    const stream = client.messages.stream({ ...ask, max_tokens: 50 }, { headers: { 'x-sim-fault': 'die-after=2' } });
    const err = await stream.finalMessage().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.APIError);
    expect(JSON.stringify((err as InstanceType<typeof Anthropic.APIError>).error)).toMatch(/"type":"api_error".*closed the stream before it finished/);
  });
});

describe('@anthropic-ai/sdk: errors arrive in Anthropic’s envelope', () => {
  const errorOf = async (promise: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> => {
    const err = await promise.catch((e: unknown) => e);
    if (!(err instanceof Anthropic.APIError)) throw new Error(`expected an APIError, got ${String(err)}`);
    return err;
  };

  it.each([
    ['a wrong key', () => new Anthropic({ apiKey: 'sk-wrong-0123456789', baseURL: gateway.router.apiUrl, maxRetries: 0 }).messages.create(ask), Anthropic.AuthenticationError, 'authentication_error'],
    ['no max_tokens', () => client.messages.create({ ...ask, max_tokens: undefined as unknown as number }), Anthropic.BadRequestError, 'invalid_request_error'],
    ['an unknown model', () => client.messages.create({ ...ask, model: 'claude-nope' }), Anthropic.NotFoundError, 'not_found_error'],
    [
      'a model the key may not use',
      () => new Anthropic({ apiKey: 'sk-narrow-0123456789', baseURL: gateway.router.apiUrl, maxRetries: 0 }).messages.create(ask),
      Anthropic.NotFoundError,
      'not_found_error',
    ],
    ['a model whose pools do not serve messages', () => client.messages.create({ ...ask, model: 'chat-only-model' }), Anthropic.BadRequestError, 'invalid_request_error'],
    ['the engine’s own 503', () => client.messages.create(ask, { headers: { 'x-sim-fault': 'status=503' } }), Anthropic.APIError, 'overloaded_error'],
  ])('%s', async (_case, call, errorClass, type) => {
    const err = await errorOf(call());
    expect(err).toBeInstanceOf(errorClass);
    expect(err.error).toMatchObject({ type: 'error', error: { type } });
    expect(Object.keys((err.error as { error: object }).error).sort()).toEqual(['message', 'type']);
  });

  it('the capability mismatch names the capability', async () => {
    const err = await errorOf(client.messages.create({ ...ask, model: 'chat-only-model' }));
    expect(err.message).toMatch(/does not serve the Messages API \(capability `messages`\)/);
  });
});
