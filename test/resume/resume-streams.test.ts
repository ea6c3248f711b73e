/**
 * Streams that survive a dying replica (issue 21), end to end over real sockets: `modelgate serve`
 * in front of `modelgate sim` processes, one of them killed (SIGKILL) while 20 streams run; every
 * stream must end with exactly the text and usage an uninterrupted run gives. Then the cases that
 * are refused or fail, which end with today's SSE error event, and the official SDK on a resumed stream.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { stopChild } from '../helpers/child-process.js';
import { rawRequest } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim } from '../helpers/sim.js';

const CLI = new URL('../../dist/cli.js', import.meta.url).pathname;
const TOKENS = 60;

interface SimProcess {
  name: string;
  url: string;
  child: ChildProcess;
}

/** `modelgate sim` as its own process, on a free port; resolves once it listens. */
function spawnSim(name: string): Promise<SimProcess> {
  const child = spawn(process.execPath, [CLI, 'sim', '--port', '0', '--name', name, '--model', 'served/llm', '--itl-ms', '15', '--output-min', String(TOKENS), '--output-max', String(TOKENS)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`sim ${name} exited (${code}) before listening`)));
    createInterface(child.stdout).on('line', (line) => {
      const url = /listening on (\S+)/.exec(line)?.[1];
      if (url) resolve({ name, url, child });
    });
  });
}

/** One streamed answer as the client saw it. */
interface Seen {
  replica: string;
  status: number;
  events: string[];
  chunks: Array<Record<string, unknown>>;
  text: string;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** Streams `body` from `url`, calling `onContent` at each content chunk. */
async function stream(url: string, body: object, onContent: () => void = () => undefined): Promise<Seen> {
  const response = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const seen: Seen = { replica: response.headers.get('x-sim-replica') ?? '', status: response.status, events: [], chunks: [], text: '' };
  const decoder = new TextDecoder();
  let pending = '';
  for await (const part of response.body as unknown as AsyncIterable<Uint8Array>) {
    pending += decoder.decode(part, { stream: true });
    for (let at = pending.indexOf('\n\n'); at >= 0; at = pending.indexOf('\n\n')) {
      const event = pending.slice(0, at);
      pending = pending.slice(at + 2);
      seen.events.push(event);
      if (!event.startsWith('data: {')) continue;
      const chunk = JSON.parse(event.slice(6)) as Record<string, unknown>;
      seen.chunks.push(chunk);
      if (chunk.usage) seen.usage = chunk.usage as Seen['usage'];
      for (const choice of (chunk.choices ?? []) as Array<{ delta?: { content?: string }; text?: string }>) {
        const piece = choice.delta?.content ?? choice.text ?? '';
        seen.text += piece;
        if (piece !== '') onContent();
      }
    }
  }
  return seen;
}

/** The same request answered whole by one replica, directly: what an uninterrupted run gives. */
async function uninterrupted(sim: string, path: string, body: Record<string, unknown>): Promise<{ text: string; usage: { prompt_tokens: number; completion_tokens: number } }> {
  const { stream: _stream, stream_options: _options, ...whole } = body;
  const answer = JSON.parse((await rawRequest(`${sim}${path}`, { body: { ...whole, model: 'served/llm' } })).body) as {
    choices: Array<{ message?: { content: string }; text?: string }>;
    usage: { prompt_tokens: number; completion_tokens: number };
  };
  const choice = answer.choices[0];
  // cached prompt tokens depend on what each replica served before: not compared
  return { text: choice?.message?.content ?? choice?.text ?? '', usage: { prompt_tokens: answer.usage.prompt_tokens, completion_tokens: answer.usage.completion_tokens } };
}

describe('a replica killed mid-stream under load (modelgate serve, modelgate sim processes)', () => {
  let sims: SimProcess[] = [];
  let router: ServedRouter | undefined;
  let dir = '';

  beforeAll(async () => {
    sims = await Promise.all(['r0', 'r1', 'r2'].map(spawnSim));
    dir = await mkdtemp(join(tmpdir(), 'modelgate-resume-'));
    await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
    const config = {
      server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'llm', engine: 'vllm', servedModelName: 'served/llm', endpoints: sims.map((s) => s.url) }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }], resumeStreams: true }],
    };
    await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
    router = await serveRouter(join(dir, 'modelgate.yaml'));
  }, 30_000);

  afterAll(async () => {
    await router?.stop();
    await Promise.all(sims.map((s) => stopChild(s.child, 2000)));
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 30_000);

  it('ends every stream with the uninterrupted text and usage, one id and one [DONE], and counts the resumed ones', async () => {
    const api = router!.api;
    const victim = sims[0]!;
    const requests = Array.from({ length: 20 }, (_, i) =>
      i % 4 === 3
        ? { path: '/v1/completions', body: { model: 'llm', prompt: `Story ${i}:`, seed: 100 + i, max_tokens: TOKENS, stream: true, stream_options: { include_usage: true } } }
        : {
            path: '/v1/chat/completions',
            body: { model: 'llm', messages: [{ role: 'user', content: `Tell story ${i}` }], seed: 100 + i, stream: true, ...(i % 2 ? { stream_options: { include_usage: true } } : {}) },
          },
    );
    // every stream under way (a few tokens each), then the victim dies
    let started = 0;
    let allStarted: () => void = () => undefined;
    const underWay = new Promise<void>((resolve) => (allStarted = resolve));
    const counts = requests.map(() => 0);
    const seen = requests.map(({ path, body }, i) =>
      stream(`${api}${path}`, body, () => {
        counts[i] = (counts[i] ?? 0) + 1;
        if (counts[i] === 3 && ++started === requests.length) allStarted();
      }),
    );
    await underWay;
    victim.child.kill('SIGKILL');
    const results = await Promise.all(seen);

    const onVictim = results.filter((r) => r.replica === victim.name).length;
    expect(onVictim).toBeGreaterThan(0);
    const wholes = await Promise.all(requests.map(({ path, body }) => uninterrupted(sims[1]!.url, path, body)));
    for (const [i, r] of results.entries()) {
      const { path, body } = requests[i]!;
      const whole = wholes[i]!;
      expect(r.status).toBe(200);
      expect(r.text).toBe(whole.text);
      expect(r.events.filter((e) => e === 'data: [DONE]')).toHaveLength(1);
      expect(r.events.some((e) => e.includes('"error"'))).toBe(false);
      expect(new Set(r.chunks.map((c) => c.id)).size).toBe(1);
      expect(new Set(r.chunks.map((c) => c.created)).size).toBe(1);
      if (path === '/v1/chat/completions') expect(r.chunks.filter((c) => JSON.stringify(c).includes('"role":"assistant"'))).toHaveLength(1);
      if ('stream_options' in body) {
        expect(r.usage).toMatchObject({ prompt_tokens: whole.usage.prompt_tokens, completion_tokens: whole.usage.completion_tokens });
        expect(r.usage?.total_tokens).toBe(whole.usage.prompt_tokens + whole.usage.completion_tokens);
      } else expect(r.usage).toBeUndefined();
    }
    const metrics = (await rawRequest(`${router!.admin}/metrics`)).body;
    expect(metricSum(metrics, 'modelgate_stream_resumptions_total', { result: 'resumed', reason: 'upstream_broken' })).toBe(onVictim);
    expect(metricSum(metrics, 'modelgate_stream_resumptions_total', { result: 'failed' })).toBe(0);
    // the router counted each answer's tokens once: delivered + continued, never both attempts whole
    expect(metricSum(metrics, 'modelgate_completion_tokens_total', { deployment: 'llm' })).toBe(requests.length * TOKENS);
    expect(metricSum(metrics, 'modelgate_response_ends_total', { deployment: 'llm', end: 'complete' })).toBe(requests.length);
  }, 60_000);
});

describe('refused and failed resumptions, and the SDK on a resumed stream (in-process router and simulators)', () => {
  let dying: SimServer;
  let healthy: SimServer;
  let erroring: SimServer;
  let stalling: SimServer;
  /** Serves another name than its pools' servedModelName: answers 404 "The model `served/llm` does not exist." */
  let misnamed: SimServer;
  let g: TestRouter<RunningRouter>;
  const resilience = { breaker: { failureThreshold: 1000, cooldownMs: 1000, closeAfterSuccesses: 1 } };

  beforeAll(async () => {
    // every stream on `dying` breaks after 5 tokens; the router's tie-break (random 0: the last tied) tries it first
    dying = await startTestSim({ model: ['served/llm'], name: 'dying', fault: 'die-after=5', outputMin: 20, outputMax: 20 });
    healthy = await startTestSim({ model: ['served/llm'], name: 'healthy', outputMin: 20, outputMax: 20 });
    erroring = await startTestSim({ model: ['served/llm'], name: 'erroring', fault: 'error-after=5', outputMin: 20, outputMax: 20 });
    stalling = await startTestSim({ model: ['served/llm'], name: 'stalling', fault: 'stall-after=5', outputMin: 20, outputMax: 20 });
    misnamed = await startTestSim({ model: ['served/other'], name: 'misnamed', outputMin: 20, outputMax: 20 });
    const endpoints = [healthy.url, dying.url];
    g = await startTestRouter({
      random: () => 0,
      pools: [
        { name: 'llm', engine: 'vllm', servedModelName: 'served/llm', endpoints, resilience, routing: { scorers: [{ name: 'outstanding', weight: 1 }] } },
        { name: 'tgi', engine: 'tgi', servedModelName: 'served/llm', endpoints, resilience, routing: { scorers: [{ name: 'outstanding', weight: 1 }] } },
        { name: 'solo', engine: 'vllm', servedModelName: 'served/llm', endpoints: [dying.url], resilience },
        { name: 'erroring', engine: 'vllm', servedModelName: 'served/llm', endpoints: [healthy.url, erroring.url], resilience },
        { name: 'stalling', engine: 'vllm', servedModelName: 'served/llm', endpoints: [healthy.url, stalling.url], resilience: { ...resilience, timeouts: { idleMs: 300 } } },
        // the tie-break takes the last tied: `dying` first, then the continuation tries `misnamed` before `healthy`
        {
          name: 'halfnamed',
          engine: 'vllm',
          servedModelName: 'served/llm',
          endpoints: [healthy.url, misnamed.url, dying.url],
          resilience,
          routing: { scorers: [{ name: 'outstanding', weight: 1 }] },
        },
      ],
      deployments: [
        { id: 'llm', model: 'llm', targets: [{ pool: 'llm' }], resumeStreams: true },
        { id: 'off', model: 'off', targets: [{ pool: 'llm' }] },
        { id: 'tgi', model: 'tgi', targets: [{ pool: 'tgi' }], resumeStreams: true },
        { id: 'solo', model: 'solo', targets: [{ pool: 'solo' }], resumeStreams: true },
        { id: 'erroring', model: 'erroring', targets: [{ pool: 'erroring' }], resumeStreams: true },
        { id: 'stalling', model: 'stalling', targets: [{ pool: 'stalling' }], resumeStreams: true },
        { id: 'halfnamed', model: 'halfnamed', targets: [{ pool: 'halfnamed' }], resumeStreams: true },
      ],
    });
  });

  afterAll(async () => {
    await g.close();
    await Promise.all([dying, healthy, erroring, stalling, misnamed].map((s) => s.close()));
  });

  const chat = (model: string, extra: object = {}): object => ({ model, messages: [{ role: 'user', content: 'hello' }], seed: 5, stream: true, ...extra });
  const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } };

  it.each([
    ['tools', 'refused', 'tools', chat('llm', { tools: [tool] })],
    ['n > 1', 'refused', 'n', chat('llm', { n: 2 })],
    ['logprobs', 'refused', 'logprobs', chat('llm', { logprobs: true })],
    ['response_format', 'refused', 'guided_decoding', chat('llm', { response_format: { type: 'json_object' } })],
    ['an engine without continue_final_message (tgi)', 'refused', 'engine', chat('tgi')],
    ['no other replica to continue on', 'failed', 'no_replica', chat('solo')],
  ])('%s: the stream ends with the SSE error event, counted %s/%s', async (_case, result, reason, body) => {
    const deployment = (body as { model: string }).model;
    const before = metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result, reason });
    const r = await stream(`${g.router.apiUrl}/v1/chat/completions`, body);
    expect(r.replica).toBe('dying');
    const error = r.events.at(-2) ?? '';
    expect(JSON.parse(error.slice(6))).toEqual({ error: expect.objectContaining({ code: 'upstream_stream_broken' }) as unknown });
    expect(r.events.at(-1)).toBe('data: [DONE]');
    expect(metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result, reason })).toBe(before + 1);
  });

  it('with resumeStreams off, the stream ends with the SSE error event as before, and nothing is counted', async () => {
    const r = await stream(`${g.router.apiUrl}/v1/chat/completions`, chat('off'));
    expect(r.replica).toBe('dying');
    expect(JSON.parse((r.events.at(-2) ?? '').slice(6))).toEqual({ error: expect.objectContaining({ code: 'upstream_stream_broken' }) as unknown });
    expect(r.events.at(-1)).toBe('data: [DONE]');
    expect(metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment: 'off' })).toBe(0);
  });

  it.each([
    ['an in-stream error event', 'error_event', 'erroring'],
    ['a replica that stops sending (idle timeout)', 'idle_timeout', 'stalling'],
  ])('%s: the stream goes on elsewhere with the uninterrupted text, counted resumed/%s', async (_case, reason, deployment) => {
    const before = metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result: 'resumed', reason });
    const body = chat(deployment, { stream_options: { include_usage: true } });
    const r = await stream(`${g.router.apiUrl}/v1/chat/completions`, body);
    const whole = await uninterrupted(healthy.url, '/v1/chat/completions', body as Record<string, unknown>);
    expect(r.replica).toBe(deployment);
    expect(r.text).toBe(whole.text);
    expect(r.usage).toMatchObject(whole.usage);
    expect(r.events.filter((e) => e.includes('"error"'))).toEqual([]);
    expect(r.events.filter((e) => e === 'data: [DONE]')).toHaveLength(1);
    expect(metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result: 'resumed', reason })).toBe(before + 1);
  });

  it("a replica that does not serve the pool's servedModelName is skipped, as on a first attempt: the stream goes on on the next", async () => {
    // it used to end the stream (failed/upstream_error) at the misnamed replica, with a replica that serves the name untried
    const deployment = 'halfnamed';
    const failedBefore = metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result: 'failed' });
    const resumedBefore = metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment, result: 'resumed', reason: 'upstream_broken' });
    const mismatchBefore = metricSum(await adminMetrics(g), 'modelgate_upstream_attempts_total', { pool: 'halfnamed', endpoint: misnamed.url, outcome: 'served_model_mismatch' });
    const body = chat(deployment, { stream_options: { include_usage: true } });
    const r = await stream(`${g.router.apiUrl}/v1/chat/completions`, body);
    const whole = await uninterrupted(healthy.url, '/v1/chat/completions', body as Record<string, unknown>);
    expect(r.replica).toBe('dying');
    expect(r.text).toBe(whole.text);
    expect(r.usage).toMatchObject(whole.usage);
    expect(r.events.filter((e) => e.includes('"error"'))).toEqual([]);
    expect(r.events.filter((e) => e === 'data: [DONE]')).toHaveLength(1);
    const metrics = await adminMetrics(g);
    expect(metricSum(metrics, 'modelgate_upstream_attempts_total', { pool: 'halfnamed', endpoint: misnamed.url, outcome: 'served_model_mismatch' })).toBe(mismatchBefore + 1);
    expect(metricSum(metrics, 'modelgate_stream_resumptions_total', { deployment, result: 'resumed', reason: 'upstream_broken' })).toBe(resumedBefore + 1);
    expect(metricSum(metrics, 'modelgate_stream_resumptions_total', { deployment, result: 'failed' })).toBe(failedBefore);
  });

  it('the official openai SDK reads a resumed stream without error: the uninterrupted text and usage', async () => {
    const client = new OpenAI({ baseURL: `${g.router.apiUrl}/v1`, apiKey: KEY, maxRetries: 0 });
    const before = metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment: 'llm', result: 'resumed' });
    const chunks = await client.chat.completions.create({ model: 'llm', messages: [{ role: 'user', content: 'hello' }], seed: 5, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    const ids = new Set<string>();
    for await (const chunk of chunks) {
      ids.add(chunk.id);
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    const whole = await uninterrupted(healthy.url, '/v1/chat/completions', chat('llm') as Record<string, unknown>);
    expect(text).toBe(whole.text);
    expect(usage).toMatchObject(whole.usage);
    expect(ids.size).toBe(1);
    expect(metricSum(await adminMetrics(g), 'modelgate_stream_resumptions_total', { deployment: 'llm', result: 'resumed' })).toBe(before + 1);
  });
});
