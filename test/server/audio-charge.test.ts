/**
 * Speech to text under per-key token limits. An engine answers a non-streamed transcription or
 * translation with seconds of audio, not tokens (vLLM: `usage: {type: "duration"}`), so the router
 * counts the answer's text (4 characters a token, as it estimates prompts): the key's tokens, its
 * GET /v1/limits and its metrics see it, and a key whose budget audio spent is refused. A streamed one
 * counts its events; an engine that does report tokens is believed.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { createServer, type Server } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { adminMetrics, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const SERVED = 'openai/whisper-large-v3';
const METERED = 'sk-metered-0123456789';
const SMALL = 'sk-small-0123456789'; // a budget one transcription spends
const TOKENS = 'sk-tokens-0123456789';

let asr: SimServer;
/** An engine that reports tokens for its transcriptions (OpenAI's newer models do: `usage: {type: "tokens"}`). */
let counting: Server;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  asr = await startTestSim({ model: [SERVED], name: 'asr-0' });
  counting = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ text: 'reported in tokens', usage: { type: 'tokens', input_tokens: 30, output_tokens: 7, total_tokens: 37 } }));
    });
  });
  await new Promise<void>((resolve) => counting.listen(0, '127.0.0.1', resolve));
  g = await startTestRouter({
    pools: [
      { name: 'asr', servedModelName: SERVED, capabilities: ['audio'], endpoints: [asr.url] },
      { name: 'counting', servedModelName: 'counting-asr', capabilities: ['audio'], endpoints: [`http://127.0.0.1:${(counting.address() as AddressInfo).port}`] },
    ],
    deployments: [
      { id: 'stt', model: SERVED, targets: [{ pool: 'asr' }] },
      { id: 'counting', model: 'counting-asr', targets: [{ pool: 'counting' }] },
    ],
    keysYaml: `
- name: metered
  key: ${METERED}
  limits: { requestsPerMinute: unlimited, tokensPerDay: 1000000 }
- name: small
  key: ${SMALL}
  limits: { requestsPerMinute: unlimited, tokensPerDay: 5 }
- name: tokens
  key: ${TOKENS}
  limits: { requestsPerMinute: unlimited, tokensPerDay: 1000000 }
`,
    config: { limits: { keyMetrics: true } },
  });
});
afterAll(async () => {
  await g.close();
  await asr.close();
  await new Promise((resolve) => counting.close(resolve));
});

const TRANSCRIBE = '/v1/audio/transcriptions';
const TRANSLATE = '/v1/audio/translations';

/** Two seconds of "audio" as a multipart form, with these fields. */
async function form(fields: Array<[string, string]>): Promise<{ bytes: Buffer; type: string }> {
  const body = new FormData();
  const audio = new Uint8Array(64000);
  for (let i = 0; i < audio.length; i++) audio[i] = (i * 7 + (i >> 8)) % 256;
  body.append('file', new Blob([audio], { type: 'audio/wav' }), 'speech.wav');
  for (const [name, value] of fields) body.append(name, value);
  const request = new Request('http://encoder.invalid/', { method: 'POST', body });
  return { bytes: Buffer.from(await request.arrayBuffer()), type: request.headers.get('content-type') ?? '' };
}

async function upload(key: string, path: string, fields: Array<[string, string]>): Promise<Response> {
  const body = await form(fields);
  return fetch(`${g.router.apiUrl}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': body.type }, body: body.bytes });
}

/** Tokens the key's day has used, as GET /v1/limits says. */
async function usedToday(key: string): Promise<number> {
  const limits = JSON.parse((await rawRequest(`${g.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${key}` } })).body) as { tokens_per_day: { used: number } };
  return limits.tokens_per_day.used;
}

const tokensOf = (text: string): number => Math.ceil(text.length / 4);

describe('speech to text under token limits', () => {
  it.each([
    [TRANSCRIBE, 'json'],
    [TRANSLATE, 'json'],
    [TRANSCRIBE, 'verbose_json'],
  ])('%s (%s): a non-streamed answer is charged its text', async (path, format) => {
    const before = await usedToday(METERED);
    const res = await upload(METERED, path, [
      ['model', SERVED],
      ['response_format', format],
    ]);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { text: string; usage?: { type: string } };
    expect(body.text.length).toBeGreaterThan(0);
    if (path === TRANSCRIBE && format === 'json') expect(body.usage?.type).toBe('duration'); // seconds, not tokens: nothing else to count
    // verbose_json repeats the text in its segments: the text is counted once
    await waitFor(async () => (await usedToday(METERED)) - before === tokensOf(body.text), 'the answer charged');
  });

  it('charges a plain-text answer its whole body', async () => {
    const before = await usedToday(METERED);
    const res = await upload(METERED, TRANSCRIBE, [
      ['model', SERVED],
      ['response_format', 'text'],
    ]);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.length).toBeGreaterThan(0);
    await waitFor(async () => (await usedToday(METERED)) - before === tokensOf(text), 'the answer charged');
  });

  it('counts a streamed answer by its events, as before', async () => {
    const before = await usedToday(METERED);
    const res = await upload(METERED, TRANSCRIBE, [
      ['model', SERVED],
      ['stream', 'true'],
    ]);
    expect(res.status).toBe(200);
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: {') && e.includes('"content":"'));
    expect(events.length).toBeGreaterThan(0);
    await waitFor(async () => (await usedToday(METERED)) - before === events.length, 'the stream charged');
  });

  it('believes an engine that reports tokens', async () => {
    const before = await usedToday(TOKENS);
    const res = await upload(TOKENS, TRANSCRIBE, [['model', 'counting-asr']]);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { text: string }).text).toBe('reported in tokens');
    await waitFor(async () => (await usedToday(TOKENS)) - before === 37, 'the reported tokens charged');
  });

  it('refuses a key whose budget its transcriptions spent; the operator sees the tokens and the refusal', async () => {
    const first = await upload(SMALL, TRANSCRIBE, [['model', SERVED]]);
    expect(first.status).toBe(200);
    const { text } = (await first.json()) as { text: string };
    expect(tokensOf(text)).toBeGreaterThan(5);
    await waitFor(async () => (await usedToday(SMALL)) === tokensOf(text), 'the answer charged');
    const second = await upload(SMALL, TRANSCRIBE, [['model', SERVED]]);
    expect(second.status).toBe(429);
    expect(((await second.json()) as { error: { code: string } }).error.code).toBe('insufficient_quota');
    const metrics = await adminMetrics(g);
    expect(metricSum(metrics, 'modelgate_key_tokens_total', { key: 'small', type: 'completion' })).toBe(tokensOf(text));
    expect(metricSum(metrics, 'modelgate_limit_rejections_total', { reason: 'budget' })).toBeGreaterThanOrEqual(1);
  });
});
