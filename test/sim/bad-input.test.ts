/** Bad input gets vLLM's error shapes and never takes the simulator down. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
const errors: string[] = [];
beforeAll(async () => {
  sim = await startTestSim({ maxModelLen: 256, maxBodyBytes: 2048 }, { logError: (m) => errors.push(m) });
});
afterAll(() => sim.close());

function expectVllmError(res: { status: number; body: string }, status: number, param?: string | null): void {
  expect(res.status).toBe(status);
  const body = JSON.parse(res.body) as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error)).toEqual(['message', 'type', 'param', 'code']);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.code).toBe(status);
  if (param !== undefined) expect(body.error.param).toBe(param);
}

describe('simulator bad input', () => {
  const hello = [{ role: 'user', content: 'hi' }];
  it.each([
    ['an array body', [1, 2], null],
    ['no messages', {}, 'messages'],
    ['messages not a list', { messages: 'hi' }, 'messages'],
    ['a message without a role', { messages: [{ content: 'x' }] }, 'messages[0].role'],
    ['content of the wrong type', { messages: [{ role: 'user', content: 5 }] }, 'messages[0].content'],
    ['max_tokens as a string', { messages: hello, max_tokens: '5' }, 'max_tokens'],
    ['temperature-like junk in n', { messages: hello, n: 1.5 }, 'n'],
    ['stream as a string', { messages: hello, stream: 'yes' }, 'stream'],
    ['too many top_logprobs', { messages: hello, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['a prompt longer than the context', { messages: [{ role: 'user', content: 'y'.repeat(1100) }] }, 'input_tokens'],
  ])('answers 400 to %s', async (_name, body, param) => {
    expectVllmError(await rawRequest(`${sim.url}/v1/chat/completions`, { body }), 400, param);
  });

  it('answers 400 "Bad Request" to a body that is not JSON', async () => {
    const res = await rawRequest(`${sim.url}/v1/chat/completions`, { body: '{"messages": [' });
    expectVllmError(res, 400, null);
    expect((JSON.parse(res.body) as { error: { type: string } }).error.type).toBe('Bad Request');
  });

  it('answers 404 with param model to an unknown model', async () => {
    expectVllmError(await rawRequest(`${sim.url}/v1/embeddings`, { body: { model: 'other', input: 'x' } }), 404, 'model');
  });

  it('answers 413 to a body over --max-body-bytes', async () => {
    expectVllmError(await rawRequest(`${sim.url}/v1/chat/completions`, { body: { messages: [{ role: 'user', content: 'z'.repeat(4096) }] } }), 413);
  });

  it('answers 404 to an unknown path and 405 to a wrong method', async () => {
    expectVllmError(await rawRequest(`${sim.url}/v1/nothing`), 404);
    expectVllmError(await rawRequest(`${sim.url}/v1/chat/completions`), 405);
    expectVllmError(await rawRequest(`${sim.url}/metrics`, { method: 'POST', body: '' }), 405);
  });

  it('is still healthy afterwards and never logged an unexpected error', async () => {
    const health = await rawRequest(`${sim.url}/health`);
    expect(health.status).toBe(200);
    expect(health.body).toBe('');
    expect(errors).toEqual([]);
  });
});

describe('simulator discovery endpoints', () => {
  it('serves /metrics in Prometheus text with vLLM names', async () => {
    const res = await rawRequest(`${sim.url}/metrics`);
    expect(res.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:cache_config_info',
      'vllm:prefix_cache_queries_total',
      'vllm:prefix_cache_hits_total',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
      'vllm:time_to_first_token_seconds_bucket',
    ]) {
      expect(res.body).toMatch(new RegExp(`^${name}\\{[^}]*model_name="sim-model"[^}]*\\} \\d`, 'm'));
    }
  });

  it('names the replica in x-sim-replica on every response', async () => {
    const res = await rawRequest(`${sim.url}/v1/models`);
    expect(res.headers['x-sim-replica']).toBe(sim.url.replace('http://', ''));
  });
});
