/** The Responses API (`/v1/responses`) through the official `openai` client and as raw vLLM events. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
let other: SimServer;
let client: OpenAI;

beforeAll(async () => {
  [sim, other] = await Promise.all([startTestSim({ model: ['chat-sim'] }), startTestSim({ model: ['chat-sim'] })]);
  client = new OpenAI({ apiKey: 'unused', baseURL: `${sim.url}/v1`, maxRetries: 0 });
});
afterAll(() => Promise.all([sim.close(), other.close()]));

interface SseEvent {
  event: string;
  data: Record<string, unknown>;
}

/** Splits a typed SSE body into (event, data) pairs. */
function typedEvents(body: string): SseEvent[] {
  return body
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const [eventLine = '', dataLine = ''] = block.split('\n');
      expect(eventLine.startsWith('event: ')).toBe(true);
      expect(dataLine.startsWith('data: ')).toBe(true);
      return { event: eventLine.slice(7), data: JSON.parse(dataLine.slice(6)) as Record<string, unknown> };
    });
}

describe('responses with the openai client', () => {
  it('answers one completed assistant message with usage', async () => {
    const response = await client.responses.create({ model: 'chat-sim', input: 'Say hello.', max_output_tokens: 6 });
    expect(response.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(response.object).toBe('response');
    expect(['completed', 'incomplete']).toContain(response.status);
    expect(response.output).toHaveLength(1);
    const message = response.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(message).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
    expect(message.id).toMatch(/^msg_/);
    expect(message.content[0]).toMatchObject({ type: 'output_text', annotations: [] });
    const usage = response.usage!;
    expect(usage.output_tokens).toBe(response.output_text.split(' ').length - 1);
    expect(usage.total_tokens).toBe(usage.input_tokens + usage.output_tokens);
    expect(usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(0);
    expect(response.previous_response_id).toBeNull();
  });

  it('streams typed events the client reads, one delta per token, ending with response.completed', async () => {
    const stream = await client.responses.create({ model: 'chat-sim', input: 'Stream.', stream: true, max_output_tokens: 5, ignore_eos: true } as OpenAI.Responses.ResponseCreateParamsStreaming);
    const types: string[] = [];
    const sequence: number[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      sequence.push(event.sequence_number);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(5).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(sequence).toEqual(types.map((_, i) => i));
    const message = completed?.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(message.content[0]).toMatchObject({ type: 'output_text', text });
    expect(completed?.status).toBe('incomplete');
    expect(completed?.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(completed?.usage?.output_tokens).toBe(5);
  });

  it('continues a stored conversation on the same replica, and 404s on another replica', async () => {
    const first = await client.responses.create({ model: 'chat-sim', input: 'Remember the word amber.', max_output_tokens: 4 });
    const next = await client.responses.create({ model: 'chat-sim', input: 'Which word?', previous_response_id: first.id, max_output_tokens: 4 });
    expect(next.previous_response_id).toBe(first.id);
    // The previous input and answer are part of the prompt now.
    expect(next.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens + first.usage!.output_tokens);
    expect((await client.responses.retrieve(first.id)).output_text).toBe(first.output_text);

    const elsewhere = new OpenAI({ apiKey: 'unused', baseURL: `${other.url}/v1`, maxRetries: 0 });
    const failure = elsewhere.responses.create({ model: 'chat-sim', input: 'Which word?', previous_response_id: first.id });
    await expect(failure).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const res = await rawRequest(`${other.url}/v1/responses`, { body: { model: 'chat-sim', input: 'x', previous_response_id: first.id } });
    expect(JSON.parse(res.body)).toEqual({ error: { message: `Response with id '${first.id}' not found.`, type: 'invalid_request_error', param: 'response_id', code: 404 } });
  });

  it('does not store a response sent with store: false', async () => {
    const response = await client.responses.create({ model: 'chat-sim', input: 'Forget me.', store: false, max_output_tokens: 2 });
    await expect(client.responses.retrieve(response.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe('responses in vLLM’s exact shapes', () => {
  it('frames each event as `event: <type>` and JSON with type and sequence_number, without [DONE]', async () => {
    const res = await rawRequest(`${sim.url}/v1/responses`, { body: { input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }], stream: true, max_output_tokens: 3 } });
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(res.body).not.toContain('[DONE]');
    const events = typedEvents(res.body);
    for (const e of events) expect(e.data.type).toBe(e.event);
    const created = events[0]!.data.response as Record<string, unknown>;
    expect(created).toMatchObject({ status: 'in_progress', output: [], usage: null, model: 'chat-sim', created_at: expect.any(Number) });
    const done = events.find((e) => e.event === 'response.output_item.done')!.data;
    const added = events.find((e) => e.event === 'response.output_item.added')!.data;
    expect((done.item as { id: string }).id).toBe((added.item as { id: string }).id);
    expect(Object.keys(events.find((e) => e.event === 'response.output_text.delta')!.data)).toEqual(['content_index', 'delta', 'item_id', 'logprobs', 'output_index', 'sequence_number', 'type']);
  });

  it('returns the response object with vLLM’s fields and defaults', async () => {
    const res = await rawRequest(`${sim.url}/v1/responses`, { body: { input: 'Hi', instructions: 'Be brief.', max_output_tokens: 3 } });
    const body = JSON.parse(res.body) as Record<string, unknown>;
    expect(Object.keys(body).slice(0, 8)).toEqual(['id', 'created_at', 'incomplete_details', 'instructions', 'metadata', 'model', 'object', 'output']);
    expect(body).toMatchObject({ instructions: 'Be brief.', temperature: 1, top_p: 1, tool_choice: 'auto', tools: [], max_output_tokens: 3, truncation: 'disabled', top_logprobs: null });
    expect(body.usage).toMatchObject({ output_tokens_details: { reasoning_tokens: 0 }, input_tokens_details: { cached_tokens: expect.any(Number) } });
  });

  it('adds log-probs when asked through include', async () => {
    const res = await rawRequest(`${sim.url}/v1/responses`, { body: { input: 'Hi', include: ['message.output_text.logprobs'], top_logprobs: 2, max_output_tokens: 3, ignore_eos: true } });
    const body = JSON.parse(res.body) as { output: Array<{ content: Array<{ logprobs: Array<{ top_logprobs: unknown[] }> }> }>; top_logprobs: number };
    expect(body.top_logprobs).toBe(2);
    expect(body.output[0]!.content[0]!.logprobs).toHaveLength(3);
    expect(body.output[0]!.content[0]!.logprobs[0]!.top_logprobs).toHaveLength(2);
  });

  it('answers GET /v1/responses/{id} with 404 for an unknown id and 405 for POST', async () => {
    expect((await rawRequest(`${sim.url}/v1/responses/resp_unknown`)).status).toBe(404);
    expect((await rawRequest(`${sim.url}/v1/responses/resp_unknown`, { body: {} })).status).toBe(405);
  });

  it.each([
    ['input of the wrong type', { input: 5 }, 400, 'input'],
    ['a prompt longer than the context', { input: 'x'.repeat(40000) }, 400, 'input'],
    ['an unknown model', { input: 'x', model: 'gpt-x' }, 404, 'model'],
    ['an unknown role', { input: [{ role: 'robot', content: 'x' }] }, 400, 'input[0].role'],
  ])('refuses %s', async (_name, body, status, param) => {
    const res = await rawRequest(`${sim.url}/v1/responses`, { body });
    expect(res.status).toBe(status);
    expect((JSON.parse(res.body) as { error: { param: string } }).error.param).toBe(param);
  });
});
