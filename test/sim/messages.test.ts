/** The Anthropic Messages API (`/v1/messages`) through the official `@anthropic-ai/sdk` and as raw vLLM events. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import Anthropic from '@anthropic-ai/sdk';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
let client: Anthropic;

beforeAll(async () => {
  sim = await startTestSim({ model: ['claude-sim'], outputMin: 6, outputMax: 6 });
  client = new Anthropic({ apiKey: 'unused', baseURL: sim.url, maxRetries: 0 });
});
afterAll(() => sim.close());

const messages = (body: object, headers: Record<string, string> = {}): ReturnType<typeof rawRequest> =>
  rawRequest(`${sim.url}/v1/messages`, { headers, body: { model: 'claude-sim', max_tokens: 20, messages: [{ role: 'user', content: 'Hello' }], ...body } });

function events(body: string): Array<{ event: string; data: Record<string, unknown> }> {
  return body
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const [eventLine = '', dataLine = ''] = block.split('\n');
      return { event: eventLine.replace(/^event: /, ''), data: JSON.parse(dataLine.replace(/^data: /, '')) as Record<string, unknown> };
    });
}

describe('messages with the anthropic SDK', () => {
  it('answers messages.create with one text block, end_turn and usage', async () => {
    const message = await client.messages.create({ model: 'claude-sim', max_tokens: 50, system: 'Be terse.', messages: [{ role: 'user', content: 'Hi there' }] });
    expect(message.type).toBe('message');
    expect(message.role).toBe('assistant');
    expect(message.model).toBe('claude-sim');
    expect(message.stop_reason).toBe('end_turn');
    expect(message.content).toHaveLength(1);
    const block = message.content[0] as Anthropic.TextBlock;
    expect(block.type).toBe('text');
    expect(message.usage.output_tokens).toBe(6);
    expect(block.text.split(' ')).toHaveLength(7);
    expect(message.usage.input_tokens).toBeGreaterThan(0);
  });

  it('streams with messages.stream: text events build the final message', async () => {
    const stream = client.messages.stream({ model: 'claude-sim', max_tokens: 4, messages: [{ role: 'user', content: 'Count.' }] });
    const deltas: string[] = [];
    stream.on('text', (delta) => deltas.push(delta));
    const final = await stream.finalMessage();
    expect(deltas).toHaveLength(4);
    expect(final.stop_reason).toBe('max_tokens');
    expect(final.usage.output_tokens).toBe(4);
    expect((final.content[0] as Anthropic.TextBlock).text).toBe(deltas.join(''));
  });

  it('surfaces an unknown model as the SDK’s NotFoundError', async () => {
    const failure = client.messages.create({ model: 'claude-nope', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
    await expect(failure).rejects.toBeInstanceOf(Anthropic.NotFoundError);
  });
});

describe('messages in vLLM’s exact shapes', () => {
  it('streams vLLM’s event sequence, each as `event:` and `data:` with the same type', async () => {
    const res = await messages({ stream: true, max_tokens: 3 });
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    const all = events(res.body);
    expect(all.map((e) => e.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    for (const e of all) expect(e.data.type).toBe(e.event);
    const start = all[0]!.data.message as { id: string; content: unknown[]; usage: { input_tokens: number; output_tokens: number } };
    expect(start.id).toMatch(/^chatcmpl-/);
    expect(start.content).toEqual([]);
    expect(start.usage.output_tokens).toBe(0);
    expect(all[2]!.data).toEqual({ type: 'content_block_delta', delta: { type: 'text_delta', text: expect.any(String) }, index: 0 });
    expect(all[6]!.data).toEqual({ type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage: { input_tokens: start.usage.input_tokens, output_tokens: 3 } });
    expect(res.body).not.toContain('[DONE]');
  });

  it('leaves stop_sequence out of the non-streamed message, as vLLM’s exclude_none does', async () => {
    const body = JSON.parse((await messages({})).body) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(['id', 'type', 'role', 'content', 'model', 'stop_reason', 'usage']);
  });

  it.each([
    ['no max_tokens', { max_tokens: undefined }, 400, 'BadRequestError'],
    ['max_tokens of 0', { max_tokens: 0 }, 400, 'BadRequestError'],
    ['no messages', { messages: [] }, 400, 'BadRequestError'],
    ['an unknown model', { model: 'other' }, 404, 'NotFoundError'],
  ])('answers %s in Anthropic’s error envelope', async (_name, body, status, type) => {
    const res = await messages(body);
    expect(res.status).toBe(status);
    expect(JSON.parse(res.body)).toEqual({ type: 'error', error: { type, message: expect.any(String) } });
  });

  it('sends injected failures in Anthropic’s envelope, before and during a stream', async () => {
    const res = await messages({}, { 'x-sim-fault': 'status=529' });
    expect(res.status).toBe(529);
    expect(JSON.parse(res.body)).toEqual({ type: 'error', error: { type: 'InternalServerError', message: 'Injected failure (status 529).' } });
    const broken = await messages({ stream: true }, { 'x-sim-fault': 'error-after=1' });
    expect(events(broken.body).at(-1)).toEqual({ event: 'error', data: { type: 'error', error: { type: 'internal_error', message: 'Internal server error' } } });
  });
});
