/**
 * What engines other than vLLM put in a stream, as a client gets it through the router: llama.cpp's
 * mid-stream error as an `error:` block, TGI's error event with its `error_type`. Each fake engine answers with the bytes its engine's server
 * writes (the sources are named with each), on node:http; the client is the official openai SDK.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { KEY, scrapedMetric, startTestRouter, type TestRouter } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream, type Reply } from '../helpers/upstream.js';

/** llama.cpp's chunk (nlohmann's json, keys in its order); `delta` and finish reason as given. */
const llamaChunk = (delta: object, finish: string | null = null): string =>
  `data: ${JSON.stringify({ choices: [{ finish_reason: finish, index: 0, delta }], created: 1, id: 'chatcmpl-ll', model: 'served/llm', system_fingerprint: 'b5350-abc', object: 'chat.completion.chunk' })}\n\n`;

/**
 * A llama.cpp build whose streamed error callback is `server_sent_event(sink, "error", error_data)`
 * (ggml-org/llama.cpp examples/server/server.cpp, 2025): `error: {json}` and a blank line, then the
 * OpenAI-compatible handler's `data: [DONE]`.
 */
const LLAMA_MID_ERROR =
  llamaChunk({ role: 'assistant', content: null }) +
  llamaChunk({ content: 'Hello' }) +
  'error: {"code":500,"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error"}\n\n' +
  'data: [DONE]\n\n';

/** An engine whose health check fails (so its answered server errors open its breaker) and that streams `stream`. */
const streaming =
  (stream: string): Reply =>
  (req, res) => {
    if (req.url === '/health') {
      res.writeHead(503).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(stream);
  };

/**
 * TGI's error event in a stream, axum's `data:` without a space (router/src/server.rs: a streamed
 * request is validated after the 200, its InferError goes as `Event::json_data(ErrorResponse {error,
 * error_type})`), then `data:[DONE]`; the messages are InferError's.
 */
const TGI_ERRORS: Record<string, string> = {
  validation: 'Input validation error: `inputs` tokens + `max_new_tokens` must be <= 2048. Given: 1887 `inputs` tokens and 1024 `max_new_tokens`',
  template_error: 'Template error: syntax error: unexpected end of input',
  tool_error: 'Tool error: Tool with name get_weather not found',
  overloaded: 'Model is overloaded',
  generation: 'Request failed during generation: Server error: CUDA out of memory',
  incomplete_generation: 'Incomplete generation',
};
const tgiError = (type: string): string => `data:${JSON.stringify({ error: TGI_ERRORS[type], error_type: type })}\n\ndata:[DONE]\n\n`;

/** A TGI replica whose health check fails, streaming the error event its prompt names. */
const tgi: Reply = (req, res) => {
  if (req.url === '/health') return void res.writeHead(503).end();
  const prompt = (JSON.parse(req.body) as { messages: Array<{ content: string }> }).messages[0]!.content;
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(tgiError(prompt));
};

async function routerFor(engine: 'llamacpp' | 'tgi', url: string, deployment: object = {}): Promise<TestRouter<RunningRouter>> {
  return startTestRouter({
    pools: [{ name: 'llm', engine, servedModelName: 'served/llm', capabilities: ['chat'], endpoints: [url], resilience: { breaker: { failureThreshold: 2, cooldownMs: 60_000 } } }],
    deployments: [{ id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }], ...deployment }],
  });
}

const accessLine = async (g: TestRouter<RunningRouter>, requestId: string): Promise<Record<string, unknown>> => {
  let line: string | undefined;
  await waitFor(() => (line = g.logs.find((l) => l.includes(`"requestId":"${requestId}"`) && l.includes('"msg":"request"'))) !== undefined, 'the access-log line');
  return JSON.parse(line!) as Record<string, unknown>;
};

/** Streams a chat answer with the openai SDK: the text it yielded, and the error it raised. */
async function sdkStream(g: TestRouter<RunningRouter>, prompt = 'hi'): Promise<{ text: string; error: unknown }> {
  const client = new OpenAI({ apiKey: KEY, baseURL: `${g.router.apiUrl}/v1`, maxRetries: 0 });
  let text = '';
  try {
    const stream = await client.chat.completions.create({ model: 'llm', messages: [{ role: 'user', content: prompt }], stream: true });
    for await (const part of stream) text += part.choices[0]?.delta?.content ?? '';
  } catch (error) {
    return { text, error };
  }
  return { text, error: undefined };
}

const breakerOf = (g: TestRouter<RunningRouter>, url: string): string | undefined => [...g.router.breakers.states()].find((b) => b.endpoint === url)?.state;

describe('llama.cpp’s mid-stream error sent as an `error:` block', () => {
  let engine: RecordingUpstream;
  beforeAll(async () => {
    engine = await startUpstream(streaming(LLAMA_MID_ERROR));
  });
  afterAll(async () => {
    await engine.close();
  });

  it.each([
    ['', {}],
    [' (a deployment with resumeStreams: llama.cpp cannot continue a message, so the error ends it as on any other)', { resumeStreams: true }],
  ])('reaches the openai SDK as an error, and the stream counts as ended by an engine error%s', async (_case, deployment) => {
    const g = await routerFor('llamacpp', engine.url, deployment);
    try {
      // the SDK skipped the unknown `error:` field and took the [DONE] after it for a finished answer
      const { text, error } = await sdkStream(g);
      expect(text).toBe('Hello');
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect((error as InstanceType<typeof OpenAI.APIError>).message).toContain('Failed to decode the batch, n_batch = 512, ret = -3');
      expect((error as InstanceType<typeof OpenAI.APIError>).type).toBe('server_error');

      const raw = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
        headers: { authorization: `Bearer ${KEY}` },
        body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true },
      });
      expect(raw.body).not.toContain('error: ');
      expect(sseData(raw.body).slice(2)).toEqual(['{"error":{"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error","param":null,"code":null}}', '[DONE]']);
      expect(await accessLine(g, raw.headers['x-request-id'] as string)).toMatchObject({ status: 200, failure: 'server_error', incomplete: true });
      const ended = (end: string): Promise<number> => scrapedMetric(g.router.adminUrl, 'modelgate_response_ends_total', { deployment: 'llm-prod', end });
      expect(await ended('engine_error')).toBe(2);
      expect(await ended('complete')).toBe(0);
    } finally {
      await g.close();
    }
  });

  it('counts against the replica’s breaker: two such streams from a replica whose health check fails open it', async () => {
    const g = await routerFor('llamacpp', engine.url);
    try {
      for (let i = 0; i < 2; i++) expect((await sdkStream(g)).error).toBeInstanceOf(OpenAI.APIError);
      await waitFor(() => breakerOf(g, engine.url) === 'open', 'the breaker to open');
    } finally {
      await g.close();
    }
  });
});

describe('TGI’s error event in a stream', () => {
  let engine: RecordingUpstream;
  let g: TestRouter<RunningRouter>;
  beforeAll(async () => {
    engine = await startUpstream(tgi);
    g = await routerFor('tgi', engine.url);
  });
  afterAll(async () => {
    await g.close();
    await engine.close();
  });
  const ended = (end: string): Promise<number> => scrapedMetric(g.router.adminUrl, 'modelgate_response_ends_total', { deployment: 'llm-prod', end });

  // the statuses TGI gives each error_type when it answers without streaming (422, 429, 424 → 502, 500)
  it.each([
    ['validation', 'invalid_request_error', 'complete'],
    ['template_error', 'invalid_request_error', 'complete'],
    ['tool_error', 'invalid_request_error', 'complete'],
    ['overloaded', 'rate_limit_error', 'complete'],
    ['generation', 'server_error', 'engine_error'],
    ['incomplete_generation', 'server_error', 'engine_error'],
  ])('%s reaches the openai SDK as %s with its error_type as the code, and the stream’s end is %s', async (type, errorType, end) => {
    const before = await ended(end);
    const { error } = await sdkStream(g, type);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    const apiError = error as InstanceType<typeof OpenAI.APIError>;
    expect(apiError.type).toBe(errorType);
    expect(apiError.code).toBe(type);
    expect(apiError.message).toContain(TGI_ERRORS[type]);
    expect(await accessLine(g, apiError.requestID!)).toMatchObject({ status: 200, failure: type });
    expect(await ended(end)).toBe(before + 1);
  });

  it('a tenant’s invalid requests and a busy engine move no breaker: only the engine’s own failures ask its health check, and open it', async () => {
    const replica = await startUpstream(tgi);
    const fresh = await routerFor('tgi', replica.url);
    try {
      // the breaker opens after two server errors in a row (its health check fails): three bad requests are none
      for (let i = 0; i < 3; i++) expect((await sdkStream(fresh, 'validation')).error).toBeInstanceOf(OpenAI.APIError);
      expect(breakerOf(fresh, replica.url)).toBe('closed');
      // overloaded, like an answered 429, counts as neither: the failures either side of it are two in a row
      for (const type of ['generation', 'overloaded', 'generation']) expect((await sdkStream(fresh, type)).error).toMatchObject({ code: type });
      await waitFor(() => breakerOf(fresh, replica.url) === 'open', 'the breaker to open');
      // the one health check asked came after the generation errors, none after the invalid requests
      expect(replica.requests.map((r) => (r.url === '/health' ? 'health' : (JSON.parse(r.body) as { messages: Array<{ content: string }> }).messages[0]!.content))).toEqual([
        'validation',
        'validation',
        'validation',
        'generation',
        'overloaded',
        'generation',
        'health',
      ]);
    } finally {
      await fresh.close();
      await replica.close();
    }
  });
});
