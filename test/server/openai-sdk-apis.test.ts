/**
 * The official openai client on the APIs beyond chat — completions and the Responses API — through the
 * router exactly as users call it (only the base URL changed): streamed and not, tokens counted in the
 * router's metrics, and `previous_response_id` follow-ups landing on the replica that holds the response.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;
let client: OpenAI;
const OTHER_KEY = 'sk-other-team-0123456789';

beforeAll(async () => {
  sims = await Promise.all([1, 2, 3].map((n) => startTestSim({ model: ['meta/llama'], name: `replica-${n}` })));
  gateway = await startTestRouter({
    pools: [{ name: 'llama', servedModelName: 'meta/llama', capabilities: ['chat', 'completions', 'responses'], endpoints: sims.map((s) => s.url) }],
    deployments: [{ id: 'llama-prod', model: 'llama-3.1-8b', aliases: ['default'], targets: [{ pool: 'llama' }] }],
    // the simulator's per-request fault header is not on the default allow-list: forwarded as an operator would
    server: { forwardHeaders: ['x-sim-fault'] },
    keysYaml: `- name: tester\n  key: ${KEY}\n- name: other-team\n  key: ${OTHER_KEY}\n`,
  });
  client = new OpenAI({ apiKey: KEY, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
});
afterAll(async () => {
  await gateway.close();
  await Promise.all(sims.map((s) => s.close()));
});

describe('openai client: completions.create', () => {
  it('completes a string prompt, a prompt list (one choice each) and token ids, by alias', async () => {
    const one = await client.completions.create({ model: 'default', prompt: 'Once upon a time', max_tokens: 5 });
    expect(one.object).toBe('text_completion');
    expect(one.choices[0]?.text).toMatch(/\w/);
    expect(one.usage?.total_tokens).toBe((one.usage?.prompt_tokens ?? 0) + (one.usage?.completion_tokens ?? 0));

    const two = await client.completions.create({ model: 'default', prompt: ['first prompt', 'second prompt'], max_tokens: 3 });
    expect(two.choices.map((c) => c.index)).toEqual([0, 1]);

    const ids = await client.completions.create({ model: 'llama-prod', prompt: [101, 2023, 2003], max_tokens: 2 });
    expect(ids.choices).toHaveLength(1);
  });

  it('echo and logprobs reach the engine and come back', async () => {
    const echoed = await client.completions.create({ model: 'default', prompt: 'Say it back', max_tokens: 3, echo: true, logprobs: 2 });
    expect(echoed.choices[0]?.text.startsWith('Say it back')).toBe(true);
    expect(echoed.choices[0]?.logprobs?.tokens?.length).toBeGreaterThan(0);
  });

  it('streams text chunks; without include_usage the client gets no usage chunk, and the router still counts the tokens', async () => {
    const before = metricSum(await adminMetrics(gateway), 'modelgate_completion_tokens_total', { deployment: 'llama-prod' });
    const stream = await client.completions.create({ model: 'default', prompt: 'Stream me', max_tokens: 6, stream: true });
    let text = '';
    let usageChunks = 0;
    for await (const chunk of stream) {
      if (chunk.usage) usageChunks += 1;
      text += chunk.choices.map((c) => c.text).join('');
    }
    expect(text).toMatch(/\w/);
    expect(usageChunks).toBe(0);
    const metrics = await adminMetrics(gateway);
    expect(metricSum(metrics, 'modelgate_completion_tokens_total', { deployment: 'llama-prod' }) - before).toBe(6);
    expect(metricSum(metrics, 'modelgate_requests_total', { route: 'completions', code: '200' })).toBeGreaterThanOrEqual(4);
    expect(metricSum(metrics, 'modelgate_time_to_first_token_seconds_count', { deployment: 'llama-prod' })).toBeGreaterThan(0);
  });

  it('suffix passes the router’s validation and reaches the engine, whose own answer comes back (vLLM refuses suffix)', async () => {
    const err = await client.completions.create({ model: 'default', prompt: 'def f(', suffix: '\n    return x', max_tokens: 3 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).message).toMatch(/suffix is not currently supported/);
    expect(metricSum(await adminMetrics(gateway), 'modelgate_upstream_attempts_total', { outcome: 'upstream_400' })).toBe(1);
  });

  it('a bad prompt is the client’s BadRequestError with the field named', async () => {
    const err = await client.completions.create({ model: 'default', prompt: [] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('prompt');
  });
});

/** The replica that answered a Responses API call, from the simulator's response header. */
async function createOn(params: OpenAI.Responses.ResponseCreateParamsNonStreaming): Promise<{ id: string; replica: string | null; text: string }> {
  const { data, response } = await client.responses.create(params).withResponse();
  return { id: data.id, replica: response.headers.get('x-sim-replica'), text: data.output_text };
}

describe('openai client: responses.create', () => {
  it('answers without streaming, with usage counted by the router', async () => {
    const before = metricSum(await adminMetrics(gateway), 'modelgate_prompt_tokens_total', { deployment: 'llama-prod' });
    const response = await client.responses.create({ model: 'default', input: 'Tell me something', max_output_tokens: 8 });
    expect(response.id).toMatch(/^resp_/);
    expect(['completed', 'incomplete']).toContain(response.status); // incomplete when max_output_tokens cut it
    expect(response.output_text).toMatch(/\w/);
    expect(metricSum(await adminMetrics(gateway), 'modelgate_prompt_tokens_total', { deployment: 'llama-prod' }) - before).toBe(response.usage?.input_tokens);
  });

  it('streams typed events from response.created to response.completed', async () => {
    const stream = await client.responses.create({ model: 'default', input: 'Stream a story', max_output_tokens: 5, stream: true });
    const types: string[] = [];
    let text = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(0);
    expect(text).toMatch(/\w/);
  });

  it('previous_response_id follow-ups land on the replica that holds the response, every time', async () => {
    const first = await createOn({ model: 'default', input: 'Start a conversation', max_output_tokens: 4 });
    expect(first.replica).toMatch(/^replica-/);
    let previous = first.id;
    for (let turn = 0; turn < 6; turn++) {
      const next = await createOn({ model: 'default', input: `turn ${turn}`, previous_response_id: previous, max_output_tokens: 3 });
      expect(next.replica).toBe(first.replica);
      previous = next.id;
    }
    expect(metricSum(await adminMetrics(gateway), 'modelgate_previous_response_requests_total', { outcome: 'pinned' })).toBeGreaterThanOrEqual(6);
  });

  it('a streamed answer is remembered too: its follow-up lands on the same replica', async () => {
    const { data: stream, response } = await client.responses.create({ model: 'default', input: 'stream then follow', max_output_tokens: 3, stream: true }).withResponse();
    let id = '';
    for await (const event of stream) if (event.type === 'response.completed') id = event.response.id;
    const next = await createOn({ model: 'default', input: 'and?', previous_response_id: id, max_output_tokens: 3 });
    expect(next.replica).toBe(response.headers.get('x-sim-replica'));
  });

  it('another key cannot continue (and so read) a stored response: 404 from the router, the engine never asked', async () => {
    const mine = await createOn({ model: 'default', input: 'a private conversation', max_output_tokens: 3 });
    const other = new OpenAI({ apiKey: OTHER_KEY, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
    const err = await other.responses.create({ model: 'default', input: 'what did they say?', previous_response_id: mine.id }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).param).toBe('previous_response_id');
    expect(metricSum(await adminMetrics(gateway), 'modelgate_previous_response_requests_total', { outcome: 'other_key' })).toBe(1);
    // its owner still can
    expect((await createOn({ model: 'default', input: 'go on', previous_response_id: mine.id, max_output_tokens: 3 })).replica).toBe(mine.replica);
  });

  it('another key cannot slip the id in through extra_body (the engine would get it at the top level): the same 404', async () => {
    const mine = await createOn({ model: 'default', input: 'another private conversation', max_output_tokens: 3 });
    const other = new OpenAI({ apiKey: OTHER_KEY, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
    const before = metricSum(await adminMetrics(gateway), 'modelgate_previous_response_requests_total', { outcome: 'other_key' });
    for (let i = 0; i < 3; i++) {
      // the Node SDK sends a field it does not know as given (Python's SDK has an `extra_body` argument that sends this body)
      const params = { model: 'default', input: 'what did they say?', extra_body: { previous_response_id: mine.id } } as OpenAI.Responses.ResponseCreateParamsNonStreaming;
      const err = await other.responses.create(params).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    }
    expect(metricSum(await adminMetrics(gateway), 'modelgate_previous_response_requests_total', { outcome: 'other_key' })).toBe(before + 3);
    // its owner may use extra_body as well: the follow-up lands where the response is
    const own = { model: 'default', input: 'go on', max_output_tokens: 3, extra_body: { previous_response_id: mine.id } } as OpenAI.Responses.ResponseCreateParamsNonStreaming;
    const { data, response } = await client.responses.create(own).withResponse();
    expect(data.previous_response_id).toBe(mine.id);
    expect(response.headers.get('x-sim-replica')).toBe(mine.replica);
  });

  it('an id the router never saw is passed on, not guessed: the engine’s 404 reaches the client', async () => {
    const err = await client.responses.create({ model: 'default', input: 'x', previous_response_id: 'resp_never_made' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(metricSum(await adminMetrics(gateway), 'modelgate_previous_response_requests_total', { outcome: 'unknown' })).toBe(1);
  });

  it('a stream the engine breaks ends with a typed error event numbered after the last one: the client raises it', async () => {
    const stream = await client.responses.create({ model: 'default', input: 'break', max_output_tokens: 50, stream: true }, { headers: { 'x-sim-fault': 'die-after=2' } });
    const seen: Array<{ type: string; sequence_number: number }> = [];
    const err = await (async () => {
      for await (const event of stream) seen.push(event);
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).message).toMatch(/closed the stream before it finished/);
    expect(seen.map((e) => e.type)).toContain('response.output_text.delta');
    expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_e, i) => i));
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'error', code: 'upstream_stream_broken', sequence_number: seen.length });
    expect(metricSum(await adminMetrics(gateway), 'modelgate_response_ends_total', { end: 'upstream_broken' })).toBe(1);
  });

  it('a bad temperature is the client’s BadRequestError naming it', async () => {
    const err = await client.responses.create({ model: 'default', input: 'x', temperature: 3 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('temperature');
  });
});
