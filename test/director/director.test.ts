/** Director.direct: the plan it hands the exchange (route, bodies, headers, scheduling inputs) and the metrics it records. */
import { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { describe, expect, it } from '@jest/globals';
import { chatPromptText } from '../../src/api/prompt-text.js';
import { type InferenceKind, type ValidRequest } from '../../src/api/validate.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RouterError } from '../../src/core/errors.js';
import { type Capability, type Deployment, type PoolSpec } from '../../src/core/types.js';
import { Director, type DirectedRequest, type ResponseMetrics } from '../../src/director/director.js';
import { type ExchangePlan, type ExchangeReport } from '../../src/director/exchange.js';
import { Registry } from '../../src/registry/registry.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

function pool(name: string, capabilities: readonly Capability[] = ['chat'], backendKey?: string): PoolSpec {
  return { name, engine: 'vllm', servedModelName: `${name}-served`, capabilities, resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS, ...(backendKey ? { backendKey } : {}) };
}

const POOLS = [pool('a', ['chat'], 'key-a'), pool('b'), pool('emb', ['embeddings'])];
const MAIN: Deployment = { id: 'main', model: 'main-model', aliases: ['m'], targets: [{ pool: 'a', weight: 1 }], fallbacks: ['backup'], created: 0 };
const BACKUP: Deployment = { id: 'backup', model: 'backup-model', aliases: [], targets: [{ pool: 'b', weight: 1 }], fallbacks: [], created: 0 };
const VECTORS: Deployment = { id: 'vectors', model: 'vectors-model', aliases: [], targets: [{ pool: 'emb', weight: 1 }], fallbacks: [], created: 0 };

function setup(opts: { report?: ExchangeReport; withoutEndpoints?: string[] } = {}) {
  const catalog = new Registry(POOLS, [MAIN, BACKUP, VECTORS]);
  const empty = new Set(opts.withoutEndpoints ?? []);
  const plans: ExchangePlan[] = [];
  const exchange = {
    run: (_req: IncomingMessage, _res: ServerResponse, plan: ExchangePlan): Promise<ExchangeReport> => {
      plans.push(plan);
      return Promise.resolve(opts.report ?? { attempts: [] });
    },
  };
  const recorded: string[] = [];
  const metrics: ResponseMetrics = {
    recordTimeToFirstToken: (l, s) => recorded.push(`ttft ${l.deployment}/${l.pool} ${s}`),
    recordInterToken: (l, s) => recorded.push(`itl ${l.deployment}/${l.pool} ${s}`),
    recordTokens: (l, p, c) => recorded.push(`tokens ${l.deployment}/${l.pool} ${p} ${c}`),
    recordResponseEnd: (l, end) => recorded.push(`end ${l.deployment}/${l.pool} ${end}`),
    recordFallback: (fd, fp, td, tp) => recorded.push(`fallback ${fd}/${fp} → ${td}/${tp}`),
  };
  const director = new Director({
    catalog: () => catalog,
    endpoints: { snapshot: (name) => (empty.has(name) ? [] : [{ id: `${name}-1`, pool: name, url: new URL('http://x.local'), weight: 1 }]) },
    exchange: exchange,
    metrics,
    random: () => 0,
    forwardedHeaders: ['content-type', 'x-priority'],
    clientStallMs: 4_000,
  });
  return { director, plans, recorded };
}

function request(kind: InferenceKind, deployment: Deployment, body: ValidRequest, headers: IncomingHttpHeaders = {}): DirectedRequest {
  const text = JSON.stringify(body);
  return {
    kind,
    deployment,
    asked: body.model,
    body,
    raw: Buffer.from(text),
    text,
    priority: 'critical',
    requestId: 'rid-7',
    headers: { 'content-type': 'application/json', cookie: 'secret', ...headers },
    forwarded: { for: '10.1.2.3', proto: 'http', host: 'router.local', port: '8080' },
    signal: new AbortController().signal,
  };
}

const req = {} as IncomingMessage;
const res = {} as ServerResponse;
const chat: ValidRequest = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

describe('Director.direct: the plan', () => {
  it('routes along the planned pools, each step with its served model, its own key and only allowed headers', async () => {
    const t = setup();
    const directed = request('chat', MAIN, chat, { 'x-session-id': 's1', 'x-priority': 'critical', 'x-other': 'no' });
    await t.director.direct(req, res, directed);
    const plan = t.plans[0];
    expect(plan?.route.map((s) => `${s.pool.name}@${s.deployment}`)).toEqual(['a@main', 'b@backup']);
    expect(plan?.route.map((s) => (JSON.parse(s.body.toString()) as { model: string }).model)).toEqual(['a-served', 'b-served']);
    expect(plan?.route[0]?.headers).toEqual({
      'content-type': 'application/json',
      'x-priority': 'critical',
      'x-session-id': 's1', // the pool's session header always crosses
      'x-request-id': 'rid-7',
      'x-forwarded-for': '10.1.2.3',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': 'router.local',
      'x-forwarded-port': '8080',
      authorization: 'Bearer key-a',
    });
    expect(plan?.route[1]?.headers.authorization).toBeUndefined();
    expect(plan).toMatchObject({ requestId: 'rid-7', path: '/v1/chat/completions', clientStallMs: 4_000, signal: directed.signal, stripUsageChunk: false });
    expect(plan?.request.priority).toBe('critical');
    expect(plan?.request.promptText?.()).toBe(chatPromptText(chat));
  });

  it('reads request headers for the scheduler case-insensitively, the first of repeated values', async () => {
    const t = setup();
    await t.director.direct(req, res, request('chat', MAIN, chat, { 'x-session-id': ['first', 'second'], 'x-one': 'v' }));
    const header = t.plans[0]?.request.header;
    expect(header?.('X-Session-Id')).toBe('first');
    expect(header?.('x-one')).toBe('v');
    expect(header?.('x-none')).toBeUndefined();
  });

  it.each([
    { case: 'a stream without usage asked: usage asked for, and stripped', body: { ...chat, stream: true }, strip: true, options: { include_usage: true } },
    {
      case: 'stream options kept while usage is added',
      body: { ...chat, stream: true, stream_options: { continuous_usage_stats: false } },
      strip: true,
      options: { continuous_usage_stats: false, include_usage: true },
    },
    { case: 'a stream whose client asked for usage: untouched', body: { ...chat, stream: true, stream_options: { include_usage: true } }, strip: false, options: { include_usage: true } },
    { case: 'no stream: no usage option', body: chat, strip: false, options: undefined },
  ])('chat, $case', async ({ body, strip, options }) => {
    const t = setup();
    await t.director.direct(req, res, request('chat', MAIN, body));
    const plan = t.plans[0];
    expect(plan?.stripUsageChunk).toBe(strip);
    expect((JSON.parse(plan?.route[0]?.body.toString() ?? '{}') as { stream_options?: unknown }).stream_options).toEqual(options);
  });

  it('embeddings: the embeddings path, no prompt for prefix affinity, no usage override', async () => {
    const t = setup();
    await t.director.direct(req, res, request('embeddings', VECTORS, { model: 'vectors', input: 'x', stream: true }));
    const plan = t.plans[0];
    expect(plan?.path).toBe('/v1/embeddings');
    expect(plan?.request.promptText).toBeUndefined();
    expect(plan?.stripUsageChunk).toBe(false);
    expect(plan?.route.map((s) => s.pool.name)).toEqual(['emb']);
  });

  it.each([
    { case: 'a capability mismatch', kind: 'embeddings' as const, without: [], code: 'MODEL_CAPABILITY_MISMATCH' },
    { case: 'no pool with endpoints', kind: 'chat' as const, without: ['a', 'b'], code: 'NO_READY_REPLICA' },
  ])('rejects on $case without calling the exchange', async ({ kind, without, code }) => {
    const t = setup({ withoutEndpoints: without });
    const err = await t.director.direct(req, res, request(kind, MAIN, chat)).catch((e: unknown) => e);
    expect(err instanceof RouterError && err.code).toBe(code);
    expect(t.plans).toEqual([]);
    expect(t.recorded).toEqual([]);
  });
});

describe('Director.direct: the report and metrics', () => {
  it('records end, time to first token, tokens and inter-token gaps under the answering pool', async () => {
    const report: ExchangeReport = { attempts: [], end: 'complete', ttftMs: 250, usage: { promptTokens: 12, completionTokens: 3 }, pool: POOLS[1], fallback: 'backup' };
    const t = setup({ report });
    const out = await t.director.direct(req, res, request('chat', MAIN, chat));
    t.plans[0]?.onInterToken?.('b', 40);
    expect(out.poolName).toBe('b');
    expect(out.fallback).toBe('backup');
    expect(t.recorded).toEqual(['end main/b complete', 'ttft main/b 0.25', 'tokens main/b 12 3', 'itl main/b 0.04']);
  });

  it('an estimated usage counts no prompt tokens; labels fall back to the route’s first pool', async () => {
    const t = setup({ report: { attempts: [], usage: { promptTokens: 4, completionTokens: 9, estimated: true } } });
    const out = await t.director.direct(req, res, request('chat', MAIN, chat));
    expect(out.poolName).toBe('a');
    expect(out.fallback).toBeUndefined();
    expect(t.recorded).toEqual(['tokens main/a 0 9']);
  });

  it('a route that starts at a fallback records the fallback and reports it', async () => {
    const t = setup({ withoutEndpoints: ['a'], report: { attempts: [] } });
    const out = await t.director.direct(req, res, request('chat', MAIN, chat));
    expect(t.plans[0]?.route.map((s) => `${s.pool.name}@${s.deployment}`)).toEqual(['b@backup']);
    expect(t.recorded).toEqual(['fallback main/ → backup/b']);
    expect(out).toMatchObject({ poolName: 'b', fallback: 'backup' });
  });
});
