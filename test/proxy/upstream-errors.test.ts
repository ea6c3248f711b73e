/** Engine error events inside a stream, re-wrapped in the router's envelope for the stream's dialect. */
import { describe, expect, it } from '@jest/globals';
import { streamError } from '../../src/proxy/upstream-errors.js';

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
