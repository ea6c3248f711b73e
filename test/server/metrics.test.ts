/**
 * /metrics after scripted traffic — successes, streams with and without usage, retries, a 429, an
 * abort, an embedding — checked for values against what the clients saw, and the access log lines.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { contentTimes, rawRequest, sseData, type RawRequest, type RawResponse } from '../helpers/http.js';
import { KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

let sims: SimServer[];
let g: TestRouter<RunningRouter>;
const seen = { llm200: 0, prompt: 0, completion: 0, streamsWithContent: 0 };
let text = '';

function value(name: string, labels: Record<string, string> = {}): number {
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .filter((l) => Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

const chat = (deployment: string, body: object = {}, extra: RawRequest = {}): Promise<RawResponse> =>
  rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
    ...extra,
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: deployment, messages: [{ role: 'user', content: 'secret prompt text' }], max_tokens: 6, ignore_eos: true, ...body },
  });

function countUsage(res: RawResponse): void {
  const usage = (JSON.parse(res.body) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
  seen.prompt += usage.prompt_tokens;
  seen.completion += usage.completion_tokens;
}

beforeAll(async () => {
  sims = await Promise.all([0, 1, 2].map((i) => startTestSim({ model: ['served/llm'], name: `r${i}`, itlMs: i === 2 ? 30 : 2 })));
  g = await startTestRouter({
    pools: [
      { name: 'llm', servedModelName: 'served/llm', endpoints: [sims[0]!.url, sims[1]!.url], capabilities: ['chat', 'embeddings'], resilience: { retries: { initialBackoffMs: 1, maxBackoffMs: 2 } } },
      { name: 'tiny', servedModelName: 'served/llm', endpoints: [sims[2]!.url], resilience: { maxConcurrencyPerReplica: 1, queue: { maxSize: 0 } } },
    ],
    deployments: [
      { id: 'llm', model: 'llm-model', targets: [{ pool: 'llm' }] },
      { id: 'tiny', model: 'tiny-model', targets: [{ pool: 'tiny' }] },
    ],
  });

  for (let i = 0; i < 3; i++) {
    const res = await chat('llm');
    countUsage(res);
    seen.llm200 += 1;
  }
  // streams: one asks for usage, one does not (its tokens are counted from its content events)
  const withUsage = await chat('llm', { stream: true, stream_options: { include_usage: true } });
  const usageChunk = JSON.parse(sseData(withUsage.body).at(-2)!) as { usage: { prompt_tokens: number; completion_tokens: number } };
  seen.prompt += usageChunk.usage.prompt_tokens;
  seen.completion += usageChunk.usage.completion_tokens;
  const withoutUsage = await chat('llm', { stream: true });
  expect(withoutUsage.body).not.toContain('"usage"');
  seen.completion += contentTimes(withoutUsage).length;
  seen.prompt += usageChunk.usage.prompt_tokens; // same prompt
  seen.llm200 += 2;
  seen.streamsWithContent += 2;

  // retries: one replica answers 503 until traffic has been retried at least twice
  sims[0]!.configure({ fault: 'status=503,retry-after=0' });
  let metricsText = '';
  while (!/modelgate_retries_total\{[^}]*reason="upstream_503"[^}]*\} [2-9]/.test(metricsText)) {
    countUsage(await chat('llm'));
    seen.llm200 += 1;
    metricsText = (await rawRequest(`${g.router.adminUrl}/metrics`)).body;
  }
  sims[0]!.configure({ fault: '' });

  // a 429: two at once on a pool that takes one and queues none
  const pair = await Promise.all([chat('tiny', { max_tokens: 10 }), chat('tiny', { max_tokens: 10 })]);
  expect(pair.map((r) => r.status).sort()).toEqual([200, 429]);
  countUsage(pair.find((r) => r.status === 200)!);

  // an abort: the client leaves after the first token
  await chat('llm', { stream: true, max_tokens: 500 }, { onChunk: (_d, all) => all.includes('"content":" ') });
  seen.llm200 += 1;
  seen.streamsWithContent += 1;

  // an embedding
  const embedding = await rawRequest(`${g.router.apiUrl}/v1/embeddings`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'llm', input: ['abcdefgh', 'abcd'] } });
  expect(embedding.status).toBe(200);
  seen.prompt += 3;

  await waitFor(() => g.router.inFlight.total() === 0, 'every request to be released');
  text = (await rawRequest(`${g.router.adminUrl}/metrics`)).body;
});
afterAll(async () => {
  await g.close();
  await Promise.all(sims.map((s) => s.close()));
});

describe('metrics after traffic', () => {
  it('count requests by route, deployment, pool and status, and time them', () => {
    expect(value('modelgate_requests_total', { route: 'chat', deployment: 'llm', code: '200' })).toBe(seen.llm200);
    expect(value('modelgate_requests_total', { route: 'chat', deployment: 'tiny', code: '200' })).toBe(1);
    expect(value('modelgate_requests_total', { route: 'chat', deployment: 'tiny', code: '429' })).toBe(1);
    expect(value('modelgate_requests_total', { route: 'embeddings', deployment: 'llm', code: '200' })).toBe(1);
    expect(value('modelgate_request_duration_seconds_count', { route: 'chat', deployment: 'llm' })).toBe(seen.llm200);
  });

  it('count tokens from the usage engines reported, also for a stream whose client did not ask for it', () => {
    expect(value('modelgate_prompt_tokens_total')).toBe(seen.prompt);
    // the aborted stream's completion tokens: counted from the content events relayed before the client left
    const aborted = g.logs
      .join('')
      .split('\n')
      .filter((l) => l.includes('"failure":"client_gone"'))
      .map((l) => JSON.parse(l) as { completionTokens?: number; promptTokens?: number; tokensEstimated?: boolean });
    expect(aborted).toHaveLength(1);
    expect(aborted[0]).toMatchObject({ tokensEstimated: true, completionTokens: expect.any(Number) });
    expect(aborted[0]?.promptTokens).toBeUndefined();
    expect(aborted[0]?.completionTokens).toBeGreaterThanOrEqual(1); // the client saw one before it left
    expect(value('modelgate_completion_tokens_total')).toBe(seen.completion + (aborted[0]?.completionTokens ?? 0));
  });

  it('time first tokens and the gaps between them for streams', () => {
    expect(value('modelgate_time_to_first_token_seconds_count', { deployment: 'llm' })).toBe(seen.streamsWithContent);
    expect(value('modelgate_inter_token_latency_seconds_count', { deployment: 'llm' })).toBeGreaterThanOrEqual(2 * 5);
    expect(text).toMatch(/modelgate_time_to_first_token_seconds_bucket\{le="0\.01",deployment="llm",pool="llm"\} \d/);
  });

  it('count attempts by outcome, retries by reason, and keep the busy replica’s breaker closed', () => {
    const retried = value('modelgate_retries_total', { pool: 'llm', reason: 'upstream_503' });
    expect(retried).toBeGreaterThanOrEqual(2);
    expect(value('modelgate_upstream_attempts_total', { endpoint: sims[0]!.url, outcome: 'upstream_503' })).toBe(retried);
    expect(value('modelgate_breaker_state', { endpoint: sims[0]!.url })).toBe(0);
  });

  it('count the rejected request, report queue limits and ready endpoints per pool and deployment', () => {
    expect(value('modelgate_rejected_requests_total', { pool: 'tiny', reason: 'queue_full' })).toBe(1);
    expect(value('modelgate_queue_limit', { pool: 'tiny' })).toBe(0);
    expect(value('modelgate_pool_ready_endpoints', { pool: 'llm' })).toBe(2);
    expect(value('modelgate_deployment_ready_endpoints', { deployment: 'llm' })).toBe(2);
  });

  it('count how started responses ended, and hold no request in flight afterwards', () => {
    expect(value('modelgate_response_ends_total', { deployment: 'llm', end: 'client_gone' })).toBe(1);
    expect(value('modelgate_response_ends_total', { deployment: 'llm', end: 'complete' })).toBe(seen.llm200 - 1 + 1);
    expect(value('modelgate_endpoint_in_flight_requests')).toBe(0);
  });

  it('never put a key, a prompt or a request id in a label', () => {
    expect(text).not.toContain(KEY);
    expect(text).not.toContain('secret prompt');
    expect(text).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-/);
  });
});

describe('access log', () => {
  interface Line {
    requestId?: string;
    key?: string;
    status?: number;
    deployment?: string;
    pool?: string;
    endpoint?: string;
    ttftMs?: number;
    promptTokens?: number;
    completionTokens?: number;
    bytes?: number;
    attempts?: unknown[];
    failure?: string;
    incomplete?: boolean;
    durationMs?: number;
  }
  const lines = (): Line[] =>
    g.logs
      .join('')
      .split('\n')
      .filter((l) => l.includes('"msg":"request"'))
      .map((l) => JSON.parse(l) as Line);

  it('writes one line per request with ids, key name, timing, tokens and bytes', () => {
    const all = lines();
    expect(all.length).toBeGreaterThanOrEqual(seen.llm200 + 3);
    const stream = all.find((l) => l.ttftMs !== undefined && l.promptTokens !== undefined)!;
    expect(stream).toMatchObject({ key: 'tester', status: 200, deployment: 'llm', pool: 'llm' });
    expect(stream.requestId).toMatch(/\S/);
    expect(stream.bytes).toBeGreaterThan(0);
    expect(stream.completionTokens).toBeGreaterThan(0);
    expect(stream.durationMs).toBeGreaterThanOrEqual(stream.ttftMs!);
  });

  it('records every attempt of a retried request, the 429 and the abort', () => {
    const all = lines();
    expect(all.some((l) => Array.isArray(l.attempts) && l.attempts.length === 2)).toBe(true);
    expect(all.some((l) => l.status === 429 && l.failure === 'queue_full')).toBe(true);
    expect(all.some((l) => l.incomplete === true && l.failure === 'client_gone')).toBe(true);
  });

  it('never logs a key, a prompt or a completion', () => {
    const log = g.logs.join('');
    expect(log).not.toContain(KEY);
    expect(log).not.toContain('secret prompt');
    expect(log).not.toContain('"content"');
  });
});
