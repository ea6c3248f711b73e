/**
 * Token accounting without changing what the client asked for: the router asks the engine for stream
 * usage, and removes the usage chunk for a client that did not ask — byte for byte either way, also
 * when the engine's chunks split events and characters.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest } from '../helpers/http.js';
import { chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { okChat, startUpstream, type RecordingUpstream, type Reply } from '../helpers/upstream.js';

const head = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"served/llm"';
const EVENTS = [
  `data: {${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`,
  `data: {${head},"choices":[{"index":0,"delta":{"content":" héllo 😀"},"logprobs":null,"finish_reason":null}]}\n\n`,
  `data: {${head},"choices":[{"index":0,"delta":{"content":" wörld"},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}\n\n`,
  `data: {${head},"choices":[],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}\n\n`,
  'data: [DONE]\n\n',
];
const STREAM = Buffer.from(EVENTS.join(''), 'utf8');
const WITHOUT_USAGE = Buffer.from(EVENTS.filter((_, i) => i !== 3).join(''), 'utf8');

/** Writes the stream in pieces cut at awkward byte offsets: inside the emoji and inside the usage event. */
const choppedStream: Reply = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
  const emoji = STREAM.indexOf(Buffer.from('😀')) + 2;
  const usage = STREAM.indexOf(Buffer.from('"usage"')) + 3;
  const cuts = [10, emoji, usage, STREAM.length - 5, STREAM.length];
  let from = 0;
  const next = (i: number): void => {
    if (i >= cuts.length) return void res.end();
    res.write(STREAM.subarray(from, cuts[i]));
    from = cuts[i]!;
    setTimeout(() => next(i + 1), 5);
  };
  next(0);
};

let upstream: RecordingUpstream;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  upstream = await startUpstream(choppedStream);
  g = await startTestRouter(chatSetup([upstream.url]));
});
afterEach(() => {
  upstream.requests.length = 0;
  upstream.reply = choppedStream;
});
afterAll(async () => {
  await g.close();
  await upstream.close();
});

async function chatBytes(body: object): Promise<Buffer> {
  const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], ...body } });
  expect(res.status).toBe(200);
  return Buffer.from(res.body, 'utf8');
}

const sentUpstream = (): Record<string, unknown> => JSON.parse(upstream.requests[0]!.body) as Record<string, unknown>;
const metric = async (name: string): Promise<number> => {
  const text = (await rawRequest(`${g.router.adminUrl}/metrics`)).body;
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
};

describe('stream usage', () => {
  it('passes the stream through byte for byte when the client asked for usage', async () => {
    const before = await metric('modelgate_completion_tokens_total');
    expect(await chatBytes({ stream: true, stream_options: { include_usage: true } })).toEqual(STREAM);
    expect(sentUpstream().stream_options).toEqual({ include_usage: true });
    expect(upstream.requests[0]!.body).toContain('"stream_options":{"include_usage":true}');
    expect((await metric('modelgate_completion_tokens_total')) - before).toBe(2);
  });

  it('asks the engine for usage and removes exactly the usage chunk when the client did not ask', async () => {
    const before = await metric('modelgate_prompt_tokens_total');
    expect(await chatBytes({ stream: true })).toEqual(WITHOUT_USAGE);
    expect(sentUpstream().stream_options).toEqual({ include_usage: true });
    expect((await metric('modelgate_prompt_tokens_total')) - before).toBe(7);
  });

  it('keeps the client’s other stream options and overrides include_usage: false', async () => {
    expect(await chatBytes({ stream: true, stream_options: { include_usage: false, continuous_usage_stats: false } })).toEqual(WITHOUT_USAGE);
    expect(sentUpstream().stream_options).toEqual({ include_usage: true, continuous_usage_stats: false });
  });

  it('leaves a non-streamed request alone and reads usage from the JSON body', async () => {
    upstream.reply = okChat;
    const before = await metric('modelgate_prompt_tokens_total');
    const body = '{"model":"llm","messages":[{"role":"user","content":"hi"}],"stream":false}';
    const res = await rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body });
    expect(res.status).toBe(200);
    expect(upstream.requests[0]!.body).toBe(body.replace('"llm"', '"served/llm"'));
    expect((await metric('modelgate_prompt_tokens_total')) - before).toBe(1);
  });

  it('records time to first token at the first content event, not at the role chunk', async () => {
    const before = await metric('modelgate_time_to_first_token_seconds_count');
    await chatBytes({ stream: true });
    expect((await metric('modelgate_time_to_first_token_seconds_count')) - before).toBe(1);
    const gaps = await metric('modelgate_inter_token_latency_seconds_count');
    expect(gaps).toBeGreaterThanOrEqual(1);
  });
});
