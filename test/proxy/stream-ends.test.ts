/**
 * How an engine's stream ends, as the client sees it through the router: the framing of a stream the
 * router changes (the engine's Content-Length is not the client's), a stream the engine ends without
 * its API's last event (a cut answer never looks finished), and an engine that answers a redirect.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { KEY, scrapedMetric, startTestRouter, type TestRouter } from '../helpers/router.js';
import { waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream, type Reply } from '../helpers/upstream.js';

const chunk = (content: string, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'served/llm', choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
const chunkOf = (index: number, content: string, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'served/llm', choices: [{ index, delta: { content }, finish_reason: finish }] })}\n\n`;
const USAGE = `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'served/llm', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\n`;

/** How the scripted engine ends its stream, chosen per request by the prompt's text. */
const STREAMS: Record<string, string> = {
  whole: chunk('Hel') + chunk('lo', 'stop') + USAGE + 'data: [DONE]\n\n',
  // the engine stops after two tokens: no finish reason, no [DONE], but a clean end of its response
  'no-end': chunk('Hel') + chunk('lo'),
  // an engine that leaves [DONE] out but says the answer finished
  'finish-no-done': chunk('Hel') + chunk('lo', 'stop') + USAGE,
  // n = 2 without [DONE]: choice 0 finishes, then the engine stops while choice 1 is still under way
  'two-one-finished': chunkOf(0, 'Hel') + chunkOf(1, 'Wor') + chunkOf(0, 'lo', 'stop') + chunkOf(1, 'ld'),
  // two prompts, n = 2 (four choices) without [DONE]: choices 0 and 1 finish, then the engine stops
  'four-two-finished': chunkOf(0, 'a', 'stop') + chunkOf(1, 'b', 'stop') + chunkOf(2, 'c') + chunkOf(3, 'd'),
  // n = 2 without [DONE], both finished
  'two-both-finished': chunkOf(0, 'Hel') + chunkOf(1, 'Wor') + chunkOf(0, 'lo', 'stop') + chunkOf(1, 'ld', 'length'),
  // Python's json.dumps spacing, no [DONE] (old Xinference)
  'spaced-finish': chunk('Hel') + 'data: {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}\n\n',
  // Ollama and old TGI put "" on every chunk: not a finish; the engine then dies
  'empty-finish': 'data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":""}]}\n\n',
  // [DONE] came, then the connection broke: the answer is whole
  'done-then-reset': chunk('Hel') + chunk('lo', 'stop') + 'data: [DONE]\n\n',
  // the last event without its blank line (some llama.cpp builds)
  'done-no-blank-line': chunk('Hel') + chunk('lo', 'stop') + 'data: [DONE]',
  'cut-no-blank-line': chunk('Hel') + 'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"lo"}',
  // vLLM's error event mid-stream: its own type and the status as a numeric code
  'error-event': chunk('Hel') + 'data: {"error": {"object": "error", "message": "CUDA error: out of memory", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n',
  'error-event-400': chunk('Hel') + 'data: {"error": {"message": "tool call could not be parsed", "type": "BadRequestError", "param": null, "code": 400}}\n\ndata: [DONE]\n\n',
  'responses-error':
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":0,"delta":"Hel"}\n\n' +
    'event: error\ndata: {"type":"error","code":"InternalServerError","message":"boom","param":null,"sequence_number":1}\n\n',
  'messages-error':
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3,"output_tokens":0}}}\n\n' +
    'event: error\ndata: {"type":"error","error":{"type":"internal_error","message":"boom"}}\n\n',
  responses:
    'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}\n\n' +
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1,"delta":"Hel"}\n\n',
  'responses-whole':
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":0,"delta":"Hel"}\n\n' +
    'event: response.completed\ndata: {"type":"response.completed","sequence_number":1,"response":{"id":"resp_1","status":"completed","usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
  messages:
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3,"output_tokens":0}}}\n\n' +
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}\n\n',
  'messages-whole':
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":3,"output_tokens":0}}}\n\n' +
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}\n\n' +
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}\n\n' +
    'event: message_stop\ndata: {"type":"message_stop"}\n\n',
};
// what a faulty engine sends after the stream's final event
STREAMS['responses-after'] = STREAMS['responses-whole']! + 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":2,"delta":"MORE"}\n\n';
STREAMS['messages-after'] = STREAMS['messages-whole']! + 'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"MORE"}}\n\n';

/** Answers each request with the stream its prompt names, framed with a Content-Length as a buffering engine might. */
const scripted: Reply = (req, res) => {
  if (req.url.startsWith('/v1/audio/')) {
    // OpenAI's transcription stream: no [DONE], no finish reason
    const text = 'data: {"type":"transcript.text.delta","delta":"Hel"}\n\ndata: {"type":"transcript.text.done","text":"Hel"}\n\n';
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(text);
    return;
  }
  const body = JSON.parse(req.body) as { messages?: Array<{ content: string }>; input?: string; prompt?: string[] };
  const name = body.input ?? body.messages?.[0]?.content ?? body.prompt?.[0] ?? '';
  if (name.startsWith('redirect-')) {
    const status = Number(name.slice('redirect-'.length));
    res.writeHead(status, { location: 'http://127.0.0.1:1/elsewhere', 'content-length': '0' });
    res.end();
    return;
  }
  if (name === 'endless-event') {
    // one event that never ends, past what the router holds (32 Mi characters)
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk('Hel') + 'data: {"x":"');
    const piece = 'x'.repeat(1 << 20);
    let sent = 0;
    const more = (): void => {
      while (sent < 40 && !res.destroyed) {
        sent++;
        if (!res.write(piece)) return void res.once('drain', more);
      }
    };
    more();
    return;
  }
  if (name === 'char-across-writes') {
    // a write that ends just after a blank line, inside a character that starts the next line
    const euro = Buffer.from('€');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(Buffer.concat([Buffer.from(chunk('Hel')), euro.subarray(0, 1)]));
    setImmediate(() => res.end(Buffer.concat([euro.subarray(1), Buffer.from(': a comment\n\n' + chunk('lo', 'stop') + 'data: [DONE]\n\n')])));
    return;
  }
  if (name === 'done-then-reset') {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(STREAMS[name]!);
    setImmediate(() => res.socket?.destroy());
    return;
  }
  if (name === 'split-then-die' || name === 'split-slow') {
    // an event cut across two writes; then the engine dies, or finishes it a moment later
    const second = chunk('lo', 'stop');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk('Hel') + second.slice(0, 30));
    setImmediate(() => {
      if (name === 'split-then-die') res.socket?.destroy();
      else res.end(second.slice(30) + 'data: [DONE]\n\n');
    });
    return;
  }
  const text = STREAMS[name] ?? STREAMS.whole!;
  // an engine (or a proxy in front of one) with its own Anthropic-style request id
  res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': Buffer.byteLength(text), 'request-id': 'req_engine' });
  res.end(text);
};

let engine: RecordingUpstream;
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  engine = await startUpstream(scripted);
  gateway = await startTestRouter({
    pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat', 'completions', 'responses', 'messages', 'audio'], endpoints: [engine.url] }],
    deployments: [{ id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }] }],
  });
});
afterAll(async () => {
  await gateway.close();
  await engine.close();
});

const post = (path: string, body: object, headers: Record<string, string> = {}) =>
  rawRequest(`${gateway.router.apiUrl}${path}`, { headers: { authorization: `Bearer ${KEY}`, ...headers }, body: { model: 'llm', ...body } });
const chat = (prompt: string, extra: object = {}) => post('/v1/chat/completions', { messages: [{ role: 'user', content: prompt }], stream: true, ...extra });
const accessLine = async (requestId: string): Promise<Record<string, unknown>> => {
  let line: string | undefined;
  await waitFor(() => (line = gateway.logs.find((l) => l.includes(`"requestId":"${requestId}"`) && l.includes('"msg":"request"'))) !== undefined, 'the access-log line');
  return JSON.parse(line!) as Record<string, unknown>;
};

describe('the framing of a stream the router changes', () => {
  it('drops the engine’s Content-Length, so two requests on one kept-alive connection both arrive whole', async () => {
    // the client did not ask for usage: the router asked the engine for it and strips the usage chunk,
    // so the client gets fewer bytes than the engine's Content-Length counted
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const send = (prompt: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string; socket: unknown }> =>
      new Promise((resolve, reject) => {
        const payload = JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: prompt }], stream: true });
        const req = http.request(`${gateway.router.apiUrl}/v1/chat/completions`, { method: 'POST', agent, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' } }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, socket: req.socket }));
          res.on('error', reject);
        });
        req.on('error', reject);
        req.end(payload);
      });
    try {
      const first = await send('whole');
      expect(first.status).toBe(200);
      expect(first.headers['content-length']).toBeUndefined();
      expect(first.headers['transfer-encoding']).toBe('chunked');
      expect(sseData(first.body)).toEqual([expect.stringContaining('"Hel"'), expect.stringContaining('"lo"'), '[DONE]']);
      const second = await send('whole');
      expect(second.socket).toBe(first.socket); // the same connection, still in step
      expect(sseData(second.body).at(-1)).toBe('[DONE]');
      // and a stream the router ends with its error event is framed by the router too
      const cut = await send('no-end');
      expect(cut.headers['content-length']).toBeUndefined();
      expect(sseData(cut.body).at(-2)).toContain('upstream_stream_broken');
      const after = await send('whole');
      expect(after.socket).toBe(first.socket);
      expect(sseData(after.body).at(-1)).toBe('[DONE]');
    } finally {
      agent.destroy();
    }
  });

  it('keeps the engine’s Content-Length on a JSON answer (relayed byte for byte)', async () => {
    const saved = engine.reply;
    engine.reply = (_req, res) => {
      const body = JSON.stringify({ id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }] });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    };
    try {
      const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
      expect(res.status).toBe(200);
      expect(res.headers['content-length']).toBe(String(Buffer.byteLength(res.body)));
    } finally {
      engine.reply = saved;
    }
  });
});

describe('a stream the engine ends without its last event', () => {
  it('ends, on chat, with the error event and [DONE]; the access log and goodput count it as cut short', async () => {
    const failed = (): Promise<number> => scrapedMetric(gateway.router.adminUrl, 'modelgate_goodput_requests_total', { deployment: 'llm-prod', result: 'failed' });
    const before = await failed();
    const res = await chat('no-end', { stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    const events = sseData(res.body);
    expect(events.slice(0, 2)).toEqual([expect.stringContaining('"Hel"'), expect.stringContaining('"lo"')]);
    expect(JSON.parse(events[2]!)).toEqual({ error: expect.objectContaining({ code: 'upstream_stream_broken', type: 'server_error' }) });
    expect(events.slice(3)).toEqual(['[DONE]']);
    const line = await accessLine(res.headers['x-request-id'] as string);
    expect(line).toMatchObject({ status: 200, failure: 'upstream_stream_broken', incomplete: true });
    await waitFor(async () => (await failed()) === before + 1, 'goodput to count the stream as failed');
  });

  it('with n = 2 and no [DONE], ends broken while one choice has not finished, and whole once both have', async () => {
    const cut = await chat('two-one-finished', { n: 2 });
    const events = sseData(cut.body);
    expect(events.slice(0, 4).map((e) => (JSON.parse(e) as { choices: Array<{ index: number }> }).choices[0]?.index)).toEqual([0, 1, 0, 1]);
    expect(JSON.parse(events[4]!)).toEqual({ error: expect.objectContaining({ code: 'upstream_stream_broken' }) });
    expect((await accessLine(cut.headers['x-request-id'] as string)).incomplete).toBe(true);
    // completions with two prompts and n = 2: four choices, of which two finishing is not the end
    const four = await post('/v1/completions', { prompt: ['four-two-finished', 'second prompt'], n: 2, stream: true });
    expect(four.body).toContain('upstream_stream_broken');
    expect((await accessLine(four.headers['x-request-id'] as string)).incomplete).toBe(true);
    const whole = await chat('two-both-finished', { n: 2 });
    expect(whole.body).not.toContain('upstream_stream_broken');
    const line = await accessLine(whole.headers['x-request-id'] as string);
    expect(line.failure).toBeUndefined();
    expect(line.incomplete).toBeUndefined();
  });

  it('does not hold an event without end past 32 Mi characters: the stream ends broken, the engine’s request is cut', async () => {
    const res = await chat('endless-event', { stream_options: { include_usage: true } });
    expect(sseData(res.body)).toEqual([expect.stringContaining('"Hel"'), expect.stringContaining('upstream_stream_broken'), '[DONE]']);
    expect(res.body.length).toBeLessThan(10_000);
  });

  it('loses no byte of a character the engine’s writes cut just after a blank line', async () => {
    for (const extra of [{ stream_options: { include_usage: true } }, {}]) {
      const res = await chat('char-across-writes', extra);
      expect(res.body).toContain('\n\n€: a comment\n\n');
      expect(sseData(res.body).at(-1)).toBe('[DONE]');
    }
  });

  it('takes an empty finish reason for none', async () => {
    const res = await chat('empty-finish', { stream_options: { include_usage: true } });
    expect(sseData(res.body).at(-2)).toContain('upstream_stream_broken');
  });

  it('never hands the client half an event: a stream cut inside one ends after the last whole event', async () => {
    for (const extra of [{}, { stream_options: { include_usage: true } }]) {
      const res = await chat('cut-no-blank-line', extra);
      expect(res.body).not.toContain('"content":"lo"');
      const events = sseData(res.body);
      expect(events).toHaveLength(3);
      expect(events[0]).toContain('"Hel"');
      expect(JSON.parse(events[1]!)).toEqual({ error: expect.objectContaining({ code: 'upstream_stream_broken' }) });
      expect(events[2]).toBe('[DONE]');
    }
  });

  it('holds an event cut across the engine’s writes until it is whole, and drops it when the engine dies inside it', async () => {
    // with the usage the client asked for, events are relayed as they come; without, the router strips its own
    for (const extra of [{ stream_options: { include_usage: true } }, {}]) {
      const slow = await chat('split-slow', extra);
      expect(sseData(slow.body)).toEqual([expect.stringContaining('"Hel"'), expect.stringContaining('"lo"'), '[DONE]']);
      const died = await chat('split-then-die', extra);
      expect(sseData(died.body)).toEqual([expect.stringContaining('"Hel"'), expect.stringContaining('upstream_stream_broken'), '[DONE]']);
    }
    // what the official client makes of it: the router's error, not a JSON parse error on half an event
    const client = new OpenAI({ apiKey: KEY, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'llm', messages: [{ role: 'user', content: 'split-then-die' }], stream: true, stream_options: { include_usage: true } });
    const seen: string[] = [];
    const failure = await (async () => {
      for await (const part of stream) seen.push(part.choices[0]?.delta.content ?? '');
    })().catch((err: unknown) => err);
    expect(seen).toEqual(['Hel']);
    expect(failure).toBeInstanceOf(OpenAI.APIError);
    expect((failure as InstanceType<typeof OpenAI.APIError>).code).toBe('upstream_stream_broken');
  });

  it('leaves the audio APIs’ streams alone: engines agree on no last event there', async () => {
    const boundary = 'b0undary';
    const part = (name: string, value: string, file = false): string =>
      `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${file ? '; filename="a.wav"\r\nContent-Type: audio/wav' : ''}\r\n\r\n${value}\r\n`;
    const body = part('file', 'RIFF....WAVE', true) + part('model', 'llm') + part('stream', 'true') + `--${boundary}--\r\n`;
    const res = await rawRequest(`${gateway.router.apiUrl}/v1/audio/transcriptions`, {
      headers: { authorization: `Bearer ${KEY}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
      body,
    });
    expect(res.status).toBe(200);
    expect(sseData(res.body)).toEqual(['{"type":"transcript.text.delta","delta":"Hel"}', '{"type":"transcript.text.done","text":"Hel"}']);
    expect((await accessLine(res.headers['x-request-id'] as string)).failure).toBeUndefined();
  });

  it.each([
    ['finish-no-done', 'a finish reason, from an engine that leaves [DONE] out'],
    ['done-no-blank-line', '[DONE] without its blank line'],
    ['spaced-finish', 'a finish reason in spaced JSON, without [DONE]'],
    ['done-then-reset', '[DONE], then a broken connection'],
  ])('counts %s as finished (%s)', async (prompt) => {
    for (const extra of [{}, { stream_options: { include_usage: true } }]) {
      const res = await chat(prompt, extra);
      expect(res.body).not.toContain('upstream_stream_broken');
      expect(res.body).toContain('"lo"');
      const line = await accessLine(res.headers['x-request-id'] as string);
      expect(line.failure).toBeUndefined();
      expect(line.incomplete).toBeUndefined();
    }
  });

  it('ends a Responses API stream without response.completed with its error event', async () => {
    const cut = await post('/v1/responses', { input: 'responses', stream: true });
    const events = cut.body.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toMatch(/^event: error\ndata: \{"type":"error","code":"upstream_stream_broken",.*"sequence_number":2\}$/);
    const whole = await post('/v1/responses', { input: 'responses-whole', stream: true });
    expect(whole.body).not.toContain('event: error');
    expect(whole.body.trimEnd().endsWith('"status":"completed","usage":{"input_tokens":3,"output_tokens":1}}}')).toBe(true);
  });

  it('drops what an engine sends after response.completed or message_stop: the client’s stream ends with its final event', async () => {
    const responses = await post('/v1/responses', { input: 'responses-after', stream: true });
    expect(responses.body).not.toContain('MORE');
    expect(responses.body.trimEnd().endsWith('"status":"completed","usage":{"input_tokens":3,"output_tokens":1}}}')).toBe(true);
    const messages = await post('/v1/messages', { max_tokens: 8, messages: [{ role: 'user', content: 'messages-after' }], stream: true }, { 'x-api-key': KEY });
    expect(messages.body).not.toContain('MORE');
    expect(messages.body.trimEnd().endsWith('event: message_stop\ndata: {"type":"message_stop"}')).toBe(true);
  });

  it('ends a Messages API stream without message_stop with Anthropic’s error event', async () => {
    const cut = await post('/v1/messages', { max_tokens: 8, messages: [{ role: 'user', content: 'messages' }], stream: true }, { 'x-api-key': KEY });
    expect(cut.body.split('\n\n').filter(Boolean).at(-1)).toMatch(
      /^event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The model server closed the stream before it finished\."\}\}$/,
    );
    const whole = await post('/v1/messages', { max_tokens: 8, messages: [{ role: 'user', content: 'messages-whole' }], stream: true }, { 'x-api-key': KEY });
    expect(whole.body).not.toContain('event: error');
    expect(whole.body.trimEnd().endsWith('event: message_stop\ndata: {"type":"message_stop"}')).toBe(true);
    // the id Anthropic's clients read is the router's, whatever the engine sent
    expect(whole.headers['request-id']).toBe(whole.headers['x-request-id']);
  });
});

describe('the engine’s own error event in a stream', () => {
  it('is relayed in the router’s envelope, and the log, goodput, the response ends and the breaker see a failed answer', async () => {
    const failed = (): Promise<number> => scrapedMetric(gateway.router.adminUrl, 'modelgate_goodput_requests_total', { deployment: 'llm-prod', result: 'failed' });
    // a stream the engine ended with its error event is no `complete` end (ModelgateStreamsCut counts it)
    const ended = (end: string): Promise<number> => scrapedMetric(gateway.router.adminUrl, 'modelgate_response_ends_total', { deployment: 'llm-prod', end });
    for (const extra of [{ stream_options: { include_usage: true } }, {}]) {
      const [before, erred, complete] = [await failed(), await ended('engine_error'), await ended('complete')];
      const res = await chat('error-event', extra);
      expect(sseData(res.body)).toEqual([expect.stringContaining('"Hel"'), '{"error":{"message":"CUDA error: out of memory","type":"server_error","param":null,"code":null}}', '[DONE]']);
      const line = await accessLine(res.headers['x-request-id'] as string);
      expect(line).toMatchObject({ status: 200, failure: 'server_error', incomplete: true });
      await waitFor(async () => (await failed()) === before + 1, 'goodput to count the stream as failed');
      expect(await ended('engine_error')).toBe(erred + 1);
      expect(await ended('complete')).toBe(complete);
    }
    const bad = await chat('error-event-400', { stream_options: { include_usage: true } });
    expect(JSON.parse(sseData(bad.body)[1]!)).toEqual({ error: { message: 'tool call could not be parsed', type: 'invalid_request_error', param: null, code: null } });
    expect(await accessLine(bad.headers['x-request-id'] as string)).toMatchObject({ failure: 'invalid_request_error' });
  });

  it('keeps the dialect: the Responses API’s error event with its sequence number, Anthropic’s envelope on the Messages API', async () => {
    const responses = await post('/v1/responses', { input: 'responses-error', stream: true });
    // the engine named its exception class as the code: the client gets OpenAI's code for a server error instead
    expect(responses.body.split('\n\n').filter(Boolean).at(-1)).toBe('event: error\ndata: {"type":"error","code":"server_error","message":"boom","param":null,"sequence_number":1}');
    expect((await accessLine(responses.headers['x-request-id'] as string)).failure).toBe('server_error');
    const messages = await post('/v1/messages', { max_tokens: 8, messages: [{ role: 'user', content: 'messages-error' }], stream: true }, { 'x-api-key': KEY });
    expect(messages.body.split('\n\n').filter(Boolean).at(-1)).toBe('event: error\ndata: {"type":"error","error":{"type":"api_error","message":"boom"}}');
    expect(messages.body).not.toContain('upstream_stream_broken');
  });
});

describe('an engine that answers with a redirect', () => {
  it.each([302, 307, 304])('answers %i as 502 upstream_redirect, with a body, not followed', async (status) => {
    const before = engine.requests.length;
    const res = await post('/v1/chat/completions', { messages: [{ role: 'user', content: `redirect-${status}` }] });
    expect(res.status).toBe(502);
    expect(res.headers.location).toBeUndefined();
    expect(JSON.parse(res.body)).toEqual({
      error: {
        message: `The model server answered with a redirect (status ${status}), which the router does not follow; check the pool's endpoint URL.`,
        type: 'server_error',
        param: null,
        code: 'upstream_redirect',
      },
    });
    expect(engine.requests.length).toBe(before + 1); // neither retried nor followed
  });
});
