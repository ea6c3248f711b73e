/** Director.direct: the plan it hands the exchange (route, bodies, headers, scheduling inputs) and the metrics it records. */
import { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { describe, expect, it } from '@jest/globals';
import { chatPromptText } from '../../src/api/prompt-text.js';
import { apiRoute } from '../../src/api/routes.js';
import { type ValidRequest } from '../../src/api/validate.js';
import { ResponseLocations } from '../../src/balancer/response-locations.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { RouterError } from '../../src/core/errors.js';
import { type ApiName, type Capability, type Deployment, type PoolSpec } from '../../src/core/types.js';
import { Director, HOLD_BACK_CHARS, type DirectedRequest, type ResponseMetrics } from '../../src/director/director.js';
import { type ExchangePlan, type ExchangeReport } from '../../src/director/exchange.js';
import { Registry } from '../../src/registry/registry.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

function pool(name: string, capabilities: readonly Capability[] = ['chat'], backendKey?: string): PoolSpec {
  return { name, engine: 'vllm', servedModelName: `${name}-served`, capabilities, resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS, ...(backendKey ? { backendKey } : {}) };
}

const GENERATIVE: Capability[] = ['completions', 'responses', 'rerank'];
const POOLS = [pool('a', ['chat'], 'key-a'), pool('b'), pool('emb', ['embeddings']), pool('r1', GENERATIVE), pool('r2', GENERATIVE)];
const MAIN: Deployment = { id: 'main', model: 'main-model', aliases: ['m'], targets: [{ pool: 'a', weight: 1 }], fallbacks: ['backup'], created: 0 };
const BACKUP: Deployment = { id: 'backup', model: 'backup-model', aliases: [], targets: [{ pool: 'b', weight: 1 }], fallbacks: [], created: 0 };
const VECTORS: Deployment = { id: 'vectors', model: 'vectors-model', aliases: [], targets: [{ pool: 'emb', weight: 1 }], fallbacks: [], created: 0 };
const AGENT: Deployment = {
  id: 'agent',
  model: 'agent-model',
  aliases: [],
  targets: [
    { pool: 'r1', weight: 1 },
    { pool: 'r2', weight: 1 },
  ],
  fallbacks: ['backup'],
  created: 0,
};

/** `answers`: the Responses API answer's id the exchange reads, and the replica and pool that made it. */
function setup(opts: { report?: ExchangeReport; withoutEndpoints?: string[]; answers?: { id: string; endpoint: string; pool: string }; ids?: Record<string, string> } = {}) {
  const catalog = new Registry(POOLS, [MAIN, BACKUP, VECTORS, AGENT]);
  const empty = new Set(opts.withoutEndpoints ?? []);
  const plans: ExchangePlan[] = [];
  const exchange = {
    run: (_req: IncomingMessage, _res: ServerResponse, plan: ExchangePlan): Promise<ExchangeReport> => {
      plans.push(plan);
      if (opts.answers) void plan.onResponseId?.(opts.answers.id, opts.answers.endpoint, opts.answers.pool);
      return Promise.resolve(opts.report ?? { attempts: [] });
    },
  };
  const recorded: string[] = [];
  const responses = new ResponseLocations(100);
  const metrics: ResponseMetrics = {
    recordTimeToFirstToken: (l, s) => recorded.push(`ttft ${l.deployment}/${l.pool} ${s}`),
    recordInterToken: (deployment, pool, s) => recorded.push(`itl ${deployment}/${pool} ${s}`),
    recordTokens: (l, p, c) => recorded.push(`tokens ${l.deployment}/${l.pool} ${p} ${c}`),
    recordResponseEnd: (l, end) => recorded.push(`end ${l.deployment}/${l.pool} ${end}`),
    recordFallback: (fd, fp, td, tp) => recorded.push(`fallback ${fd}/${fp} → ${td}/${tp}`),
    recordPreviousResponse: (outcome) => recorded.push(`previous ${outcome}`),
  };
  const director = new Director({
    catalog: () => catalog,
    endpoints: { snapshot: (name) => (empty.has(name) ? [] : [{ id: opts.ids?.[name] ?? `${name}-1`, pool: name, url: new URL('http://x.local'), weight: 1 }]) },
    exchange: exchange,
    metrics,
    random: () => 0,
    forwardedHeaders: ['content-type', 'x-priority'],
    clientStallMs: 4_000,
    responses,
  });
  return { director, plans, recorded, responses };
}

function request(kind: ApiName, deployment: Deployment, body: ValidRequest, headers: IncomingHttpHeaders = {}): DirectedRequest {
  const text = JSON.stringify(body);
  const api = apiRoute(kind);
  return {
    api,
    path: api.paths[0] as string,
    deployment,
    asked: body.model,
    body,
    raw: Buffer.from(text),
    text,
    priority: 'critical',
    tenant: 'team-a',
    weight: 1,
    requestId: 'rid-7',
    engineRequestId: 'rid-7.0a1b2c3d',
    cacheSalt: 'salt-7',
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
      'x-request-id': 'rid-7.0a1b2c3d', // the engine's id (a client's with a suffix), not the router's
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

  it('makes each step’s body and headers once, on first read, with accessors its steps share (none of their own)', async () => {
    const t = setup();
    await t.director.direct(req, res, request('chat', MAIN, chat));
    const [first, second] = t.plans[0]?.route ?? [];
    expect(first?.body).toBe(first?.body);
    expect(first?.headers).toBe(first?.headers);
    // Steps with getters of their own (closures made per request) kept each request's body and headers
    // alive through young-generation GCs, into the old generation (upstream-request.ts, LazyStep).
    for (const step of [first, second]) {
      expect(Object.getOwnPropertyDescriptor(step, 'body')).toBeUndefined();
      expect(Object.getOwnPropertyDescriptor(step, 'headers')).toBeUndefined();
    }
    expect(Object.getPrototypeOf(first)).toBe(Object.getPrototypeOf(second));
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

  it.each([
    ['a long stop string', { stop: 'x'.repeat(HOLD_BACK_CHARS) }, true],
    ['a long one in a list', { stop: ['\n', 'y'.repeat(HOLD_BACK_CHARS + 5)] }, true],
    ['a long stop sequence (the Messages API’s)', { stop_sequences: ['z'.repeat(HOLD_BACK_CHARS)] }, true],
    ['short stop strings', { stop: ['\n\n', 'User:', 'x'.repeat(HOLD_BACK_CHARS - 1)] }, undefined],
    ['none', {}, undefined],
  ])('marks a request with %s as one whose stream may go silent on its own', async (_case, stop, holds) => {
    const t = setup();
    await t.director.direct(req, res, request('chat', MAIN, { ...chat, ...stop }));
    expect(t.plans[0]?.holdsBackText).toBe(holds);
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

describe('Director.direct: every API of the route table', () => {
  it('completions: its path, its prompt for prefix affinity, and stream usage asked for like chat', async () => {
    const t = setup();
    await t.director.direct(req, res, request('completions', AGENT, { model: 'agent-model', prompt: 'Once upon', stream: true }));
    const plan = t.plans[0];
    expect(plan).toMatchObject({ path: '/v1/completions', stripUsageChunk: true, dialect: 'openai' });
    expect(plan?.request.promptText?.()).toContain('Once upon');
    expect((JSON.parse(plan?.route[0]?.body.toString() ?? '{}') as { stream_options?: unknown }).stream_options).toEqual({ include_usage: true });
  });

  it('rerank: the alias path the client called goes to the engine; no prompt, no usage override', async () => {
    const t = setup();
    const directed = { ...request('rerank', AGENT, { model: 'agent-model', query: 'q', documents: ['a'] }), path: '/v2/rerank' };
    await t.director.direct(req, res, directed);
    expect(t.plans[0]).toMatchObject({ path: '/v2/rerank', stripUsageChunk: false });
    expect(t.plans[0]?.request.promptText).toBeUndefined();
  });

  it('a capability the model does not serve is a 400 naming the capability and what it serves', async () => {
    const t = setup();
    const err = await t.director.direct(req, res, request('completions', VECTORS, { model: 'vectors-model', prompt: 'x' })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).message).toBe('The model `vectors-model` does not serve completions (capability `completions`); it serves embeddings (embeddings).');
    expect(t.plans).toHaveLength(0);
  });
});

describe('Director.direct: Responses API follow-ups', () => {
  const follow = (id: string, extra: object = {}): ValidRequest => ({ model: 'agent-model', input: 'and then?', previous_response_id: id, ...extra });

  it('remembers where each answer was made, and pins a follow-up to that replica alone, in one pool, with no fallback', async () => {
    const t = setup({ report: { attempts: [], endpoint: 'r2-1', pool: pool('r2', GENERATIVE), upstreamStatus: 200 }, answers: { id: 'resp_1', endpoint: 'r2-1', pool: 'r2' } });
    await t.director.direct(req, res, request('responses', AGENT, { model: 'agent-model', input: 'hi' }));
    expect(t.plans[0]).toMatchObject({ dialect: 'responses', path: '/v1/responses', stripUsageChunk: false });
    expect(t.plans[0]?.route.map((s) => s.pool.name)).toEqual(['r1', 'r2']); // the fallback's pool serves chat only
    expect(t.responses.find('resp_1')).toEqual({ pool: 'r2', endpoint: 'r2-1', owner: 'team-a' });

    await t.director.direct(req, res, request('responses', AGENT, follow('resp_1')));
    const plan = t.plans[1];
    expect(plan?.route.map((s) => s.pool.name)).toEqual(['r2']);
    expect(plan?.request.only).toBe('r2-1');
    expect(t.recorded).toContain('previous pinned');
  });

  it('an id the router does not know is routed like any request (never guessed), and counted', async () => {
    const t = setup();
    await t.director.direct(req, res, request('responses', AGENT, follow('resp_unknown')));
    expect(t.plans[0]?.route.map((s) => s.pool.name)).toEqual(['r1', 'r2']); // the fallback's pool serves chat only
    expect(t.plans[0]?.request.only).toBeUndefined();
    expect(t.recorded).toEqual(['previous unknown']);
  });

  it('a known id whose replica has left is routed like any request, and counted as replica_gone', async () => {
    const t = setup();
    void t.responses.remember('resp_old', { pool: 'r1', endpoint: 'r1-gone', owner: 'team-a' });
    await t.director.direct(req, res, request('responses', AGENT, follow('resp_old')));
    expect(t.plans[0]?.request.only).toBeUndefined();
    expect(t.recorded).toEqual(['previous replica_gone']);
  });

  it('a known id made through a pool this request does not route to is routed like any request, and counted as other_route, not replica_gone', async () => {
    const t = setup();
    void t.responses.remember('resp_elsewhere', { pool: 'some-other-pool', endpoint: 'x-1', owner: 'team-a' });
    await t.director.direct(req, res, request('responses', AGENT, follow('resp_elsewhere')));
    expect(t.plans[0]?.request.only).toBeUndefined();
    expect(t.plans[0]?.route.map((s) => s.pool.name)).toEqual(['r1', 'r2']);
    expect(t.recorded).toEqual(['previous other_route']);
  });

  it('a record an earlier version wrote (a Kubernetes replica was its pod, now its pod and port) still pins the follow-up to that pod', async () => {
    const t = setup({ ids: { r1: 'models/vllm-0:8000' } });
    void t.responses.remember('resp_legacy', { pool: 'r1', endpoint: 'models/vllm-0', owner: 'team-a' });
    await t.director.direct(req, res, request('responses', AGENT, follow('resp_legacy')));
    expect(t.plans[0]?.request.only).toBe('models/vllm-0:8000');
    expect(t.recorded).toEqual(['previous pinned']);
    // another pod whose name the old id begins with is not it
    const u = setup({ ids: { r1: 'models/vllm-00:8000' } });
    void u.responses.remember('resp_legacy', { pool: 'r1', endpoint: 'models/vllm-0', owner: 'team-a' });
    await u.director.direct(req, res, request('responses', AGENT, follow('resp_legacy')));
    expect(u.recorded).toEqual(['previous replica_gone']);
  });

  it('an id another key made is a 404 answered by the router: its conversation never reaches the other team', async () => {
    const t = setup();
    void t.responses.remember('resp_theirs', { pool: 'r1', endpoint: 'r1-1', owner: 'team-b' });
    const err = await t.director.direct(req, res, request('responses', AGENT, follow('resp_theirs'))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect(err).toMatchObject({ code: 'RESPONSE_NOT_FOUND', status: 404, param: 'previous_response_id', message: "Response with id 'resp_theirs' not found." });
    expect(t.plans).toHaveLength(0);
    expect(t.recorded).toEqual(['previous other_key']);
  });

  it('an answer made with store: false is not remembered', async () => {
    const t = setup({ report: { attempts: [], endpoint: 'r1-1', upstreamStatus: 200 }, answers: { id: 'resp_x', endpoint: 'r1-1', pool: 'r1' } });
    await t.director.direct(req, res, request('responses', AGENT, { model: 'agent-model', input: 'hi', store: false }));
    expect(t.plans[0]?.onResponseId).toBeUndefined();
    expect(t.responses.size).toBe(0);
    // a chat request is not one the Responses API continues: no id is asked for
    await t.director.direct(req, res, request('chat', MAIN, { model: 'main-model', messages: [{ role: 'user', content: 'hi' }] }));
    expect(t.plans[1]?.onResponseId).toBeUndefined();
  });
});
