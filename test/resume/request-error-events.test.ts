/**
 * A resumable stream that an engine ends with an error event the request caused (a 4xx: vLLM's 400 for a
 * ValueError raised while it streams, llama.cpp's `error:` block with a 400) is not resumed: another replica
 * would fail the same way. The client gets the engine's own error, re-wrapped, exactly as with
 * `resumeStreams` off, and the stream counts as answered, not as a broken replica. Real sockets: the
 * router in process, two scripted engines.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startUpstream, type RecordingUpstream, type Reply } from '../helpers/upstream.js';

const chunk = (delta: object): string =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'served/llm', choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] })}\n\n`;

/** Two tokens, then the error event `error` and `[DONE]`, as vLLM ends a stream that failed. */
const erring =
  (error: string): Reply =>
  (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Hello' }) + chunk({ content: ' there' }) + error + 'data: [DONE]\n\n');
  };

const VLLM_400 = 'data: {"error": {"message": "bad thing in your request", "type": "BadRequestError", "param": null, "code": 400}}\n\n';
const LLAMACPP_400 = 'error: {"code":400,"message":"the request exceeds the available context size","type":"invalid_request_error"}\n\n';

/** The events of a streamed chat answer, as the client got them. */
async function stream(url: string, model: string): Promise<{ status: number; events: string[] }> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], stream: true }),
  });
  const text = await response.text();
  return { status: response.status, events: text.split('\n\n').filter((e) => e !== '') };
}

describe.each([
  ['vLLM’s in-stream 400', VLLM_400, 'bad thing in your request'],
  ['llama.cpp’s `error:` block with a 400', LLAMACPP_400, 'the request exceeds the available context size'],
])('a resumable stream ended by %s', (_case, error, message) => {
  let engines: RecordingUpstream[] = [];
  let g: TestRouter<RunningRouter>;

  beforeAll(async () => {
    engines = await Promise.all([startUpstream(erring(error)), startUpstream(erring(error))]);
    const pool = { name: 'llm', engine: 'vllm', servedModelName: 'served/llm', endpoints: engines.map((e) => e.url) };
    g = await startTestRouter({
      pools: [pool],
      deployments: [
        { id: 'on', model: 'on', targets: [{ pool: 'llm' }], resumeStreams: true },
        { id: 'off', model: 'off', targets: [{ pool: 'llm' }] },
      ],
    });
  });

  afterAll(async () => {
    await g.close();
    await Promise.all(engines.map((e) => e.close()));
  });

  const chats = (): number => engines.reduce((sum, e) => sum + e.requests.filter((r) => r.url === '/v1/chat/completions').length, 0);

  it('is not resumed: the client gets the engine’s own error as with resumeStreams off, and the stream ends answered', async () => {
    const off = await stream(g.router.apiUrl, 'off');
    const before = chats();
    const on = await stream(g.router.apiUrl, 'on');
    expect(chats()).toBe(before + 1); // no continuation went to the other replica
    expect(on.status).toBe(200);
    expect(on.events).toEqual(off.events);
    const last = on.events.at(-2) ?? '';
    expect(JSON.parse(last.slice(6))).toEqual({ error: expect.objectContaining({ message, type: 'invalid_request_error' }) as unknown });
    expect(on.events.at(-1)).toBe('data: [DONE]');
    const metrics = await adminMetrics(g);
    expect(metricSum(metrics, 'modelgate_stream_resumptions_total', { deployment: 'on' })).toBe(0);
    // the request's failure, not the replica's: the stream ended complete (neither broken nor engine_error)
    expect(metricSum(metrics, 'modelgate_response_ends_total', { deployment: 'on', end: 'complete' })).toBe(1);
    expect(metricSum(metrics, 'modelgate_response_ends_total', { deployment: 'on' })).toBe(1);
  });
});
