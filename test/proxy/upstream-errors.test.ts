/** Engine error events inside a stream, re-wrapped in the router's envelope for the stream's dialect. */
import { describe, expect, it } from '@jest/globals';
import { normaliseUpstreamError, streamError } from '../../src/proxy/upstream-errors.js';

describe('streamError', () => {
  it('maps an engine exception class given as the code to OpenAI’s code for the status (it was relayed as the code)', () => {
    const err = streamError('responses', { event: 'error', data: '{"type":"error","code":"InternalServerError","message":"boom","param":null}' });
    expect(err?.status).toBe(500);
    expect(err?.code).toBe('server_error');
    expect(err?.text).toBe('event: error\ndata: {"type":"error","code":"server_error","message":"boom","param":null}\n\n');
  });

  it('wraps llama.cpp’s `error:` block (read by the tap as an error event) as `data: {"error": …}` with its status', () => {
    const err = streamError('openai', { event: 'error', data: '{"code":500,"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error"}' });
    expect(err).toEqual({
      status: 500,
      code: 'server_error',
      text: 'data: {"error":{"message":"Failed to decode the batch, n_batch = 512, ret = -3","type":"server_error","param":null,"code":null}}\n\n',
    });
    const tooLong = streamError('openai', { event: 'error', data: '{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}' });
    expect(tooLong).toMatchObject({ status: 400, code: 'context_length_exceeded' });
  });

  it.each([
    ['validation', 422, 'invalid_request_error'],
    ['template_error', 422, 'invalid_request_error'],
    ['tool_error', 422, 'invalid_request_error'],
    ['overloaded', 429, 'rate_limit_error'],
    ['generation', 502, 'server_error'],
    ['incomplete_generation', 500, 'server_error'],
    ['something_new', 500, 'server_error'],
  ])('gives TGI’s %s event the status TGI answers it with unstreamed (%i), and OpenAI’s type', (type, status, openAiType) => {
    const err = streamError('openai', { data: JSON.stringify({ error: 'Input validation error: too long', error_type: type }) });
    expect(err?.status).toBe(status);
    expect(err?.code).toBe(type);
    expect(JSON.parse(err!.text.slice('data: '.length))).toEqual({ error: { message: 'Input validation error: too long', type: openAiType, param: null, code: type } });
  });

  it('keeps a code that is an OpenAI code', () => {
    const err = streamError('openai', { data: '{"error":{"message":"too long","type":"BadRequestError","code":"context_length_exceeded"}}' });
    expect(err?.code).toBe('context_length_exceeded');
  });
});

// An engine that answers an exception's formatted traceback as the error's message showed the client its
// insides (file paths, versions, code lines): a plain-text 5xx was already held back, a JSON one was not.
describe('normaliseUpstreamError: stack traces in a message', () => {
  const messageOf = (status: number, body: string): string => normaliseUpstreamError(status, Buffer.from(body)).envelope.error.message;
  const python =
    'Traceback (most recent call last):\n  File "/usr/local/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", line 412, in create\n    raise RuntimeError("boom")\nRuntimeError: boom';

  it.each([
    ['a Python traceback alone', 500, JSON.stringify({ error: { message: python, type: 'InternalServerError', code: 500 } }), 'The model server answered with status 500.'],
    ['a message before a Python traceback', 500, JSON.stringify({ object: 'error', message: `Internal server error\n${python}`, code: 500 }), 'Internal server error'],
    ['a FastAPI detail ending in a traceback frame', 500, JSON.stringify({ detail: 'engine died\n  File "/app/server.py", line 12, in handler' }), 'engine died'],
    [
      'a JavaScript stack',
      502,
      JSON.stringify({ error: { message: 'TypeError: x is undefined\n    at handle (/srv/app/index.js:10:15)\n    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)' } }),
      'TypeError: x is undefined',
    ],
    [
      'a Rust panic',
      500,
      JSON.stringify({ error: "thread 'tokio-runtime-worker' panicked at router/src/infer.rs:123:45:\nindex out of bounds", error_type: 'generation' }),
      'The model server answered with status 500.',
    ],
    ['a Go goroutine dump', 500, JSON.stringify({ message: 'runtime error\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:5 +0x1d' }), 'runtime error'],
    ['a 4xx plain text with a traceback', 400, `bad input\n${python}`, 'bad input'],
  ])('keeps only what comes before %s', (_name, status, body, shown) => {
    expect(messageOf(status, body)).toBe(shown);
  });

  it.each([
    [
      'a one-line server error',
      500,
      '{"error":{"message":"CUDA out of memory. Tried to allocate 2.00 GiB","type":"InternalServerError","code":500}}',
      'CUDA out of memory. Tried to allocate 2.00 GiB',
    ],
    [
      'a message naming a file and line in prose',
      400,
      '{"error":{"message":"Error at line 3: unexpected token at position 12 in the template","code":400}}',
      'Error at line 3: unexpected token at position 12 in the template',
    ],
    [
      'a multi-line validation message',
      400,
      '{"error":{"message":"2 validation errors:\\n  messages.0.role: invalid\\n  at least one message is required","code":400}}',
      '2 validation errors:\n  messages.0.role: invalid\n  at least one message is required',
    ],
  ])('passes %s on whole', (_name, status, body, shown) => {
    expect(messageOf(status, body)).toBe(shown);
  });

  it('a trace past what is shown goes with the clipped rest; one just inside it is cut at its start', () => {
    const prose = 'word '.repeat(600).trim(); // 2,999 characters
    expect(messageOf(500, JSON.stringify({ error: { message: `${prose}\n${python}` } }))).toBe(`${prose.slice(0, 2000)}…`);
    expect(messageOf(500, JSON.stringify({ error: { message: `${prose.slice(0, 1500)}\n${python}` } }))).toBe(prose.slice(0, 1500).trim());
  });

  it('holds a traceback back from an in-stream error event too', () => {
    const err = streamError('openai', { data: JSON.stringify({ error: { message: `Engine loop failed\n${python}`, type: 'InternalServerError', code: 500 } }) });
    expect(err?.text).toBe('data: {"error":{"message":"Engine loop failed","type":"server_error","param":null,"code":null}}\n\n');
  });
});
