/**
 * The API app on its own, with a stand-in director: the server parses, authenticates, validates,
 * resolves and authorises, then hands over exactly what the director needs — and decides nothing
 * about routing. Also: the access log line it writes from the director's report.
 */
import { describe, expect, it, jest } from '@jest/globals';
import request from 'supertest';
import { type Principal } from '../../src/auth/key-store.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type PoolSpec } from '../../src/core/types.js';
import { type DirectedRequest, type DirectorReport } from '../../src/director/director.js';
import { Registry } from '../../src/registry/registry.js';
import { buildApp, type AppDeps } from '../../src/server/app.js';
import { API_ROUTES } from '../../src/api/routes.js';
import { captureLogs } from '../helpers/router.js';
import { FakeTime } from '../helpers/fake-time.js';
import { waitFor } from '../helpers/sim.js';

const pool: PoolSpec = { name: 'p', engine: 'vllm', servedModelName: 'served/m', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
const catalog = new Registry([pool], [{ id: 'm-prod', model: 'm', aliases: ['default'], targets: [{ pool: 'p', weight: 100 }], fallbacks: [], created: 1 }]);
const principals: Record<string, Principal> = {
  'sk-all': { name: 'all', models: undefined, priority: 'standard', weight: 1, cacheSalt: 'salt' },
  'sk-batch': { name: 'batch', models: new Set(['m']), priority: 'sheddable', weight: 1, cacheSalt: 'salt' },
  'sk-none': { name: 'none', models: new Set(['other']), priority: 'critical', weight: 1, cacheSalt: 'salt' },
};

function app(report: Partial<DirectorReport> = {}, limits?: AppDeps['limits'], models: Registry = catalog): { api: ReturnType<typeof buildApp>['api']; handed: DirectedRequest[]; logs: string[] } {
  const handed: DirectedRequest[] = [];
  const { logs, logger } = captureLogs();
  const built = buildApp({
    ...(limits ? { limits } : {}),
    maxBodyBytes: 4096,
    maxUploadBytes: 8192,
    maxJsonDepth: 8,
    keys: { authenticateOn: (key) => principals[key] },
    catalog: () => models,
    director: {
      direct: (_req, res, directed) => {
        handed.push(directed);
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
        return Promise.resolve({ attempts: [{ endpoint: 'e1', outcome: 'committed', ms: 3 }], poolName: 'p', servedModel: 'm', engine: 'vllm', endpoint: 'e1', upstreamStatus: 200, ...report });
      },
    },
    metrics: { recordRequest: () => undefined, contentType: 'text/plain', metrics: () => Promise.resolve('') },
    logger,
    clock: new FakeTime(),
    readiness: () => [],
    priorityHeader: 'X-Modelgate-Priority',
    trustedProxies: [],
  });
  return { api: built.api, handed, logs };
}

const chat = { model: 'default', messages: [{ role: 'user', content: 'hi' }] };

describe('the API app', () => {
  it('hands a valid request to the director with its API, path, deployment, priority, body and headers', async () => {
    const { api, handed } = app();
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-batch', 'x-session-id': 's1' }).send(chat).expect(200, { ok: true });
    expect(handed).toHaveLength(1);
    const directed = handed[0] as DirectedRequest;
    expect(directed).toMatchObject({ api: { name: 'chat' }, path: '/v1/chat/completions', asked: 'default', priority: 'sheddable', deployment: { id: 'm-prod' } });
    expect(JSON.parse(directed.text)).toEqual(chat);
    expect(directed.headers['x-session-id']).toBe('s1');
    expect(directed.forwarded.for).toMatch(/127\.0\.0\.1/);
    expect(directed.signal.aborted).toBe(false);
  });

  it('hands over the request as the engine will get it: extra_body’s fields in place of the top level’s (the model stays the client’s)', async () => {
    const { api, handed } = app();
    const body = { ...chat, n: 1, extra_body: { n: 2, model: 'elsewhere', previous_response_id: 'resp_x', messages: [{ role: 'user', content: 'the real prompt' }] } };
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-all' }).send(body).expect(200);
    const directed = handed[0] as DirectedRequest;
    expect(directed.body).toMatchObject({ model: 'default', n: 2, previous_response_id: 'resp_x', messages: [{ role: 'user', content: 'the real prompt' }] });
    expect(directed.body.extra_body).toEqual(body.extra_body); // kept: the engine's body is still patched from the client's text
    expect(directed.promptText?.()).toContain('the real prompt');
    // what extra_body puts in place of the top level is validated as the top level is
    await request(api)
      .post('/v1/chat/completions')
      .set({ authorization: 'Bearer sk-all' })
      .send({ ...chat, extra_body: { messages: 'not a list' } })
      .expect(400);
  });

  it('makes the prompt text once for the limits’ estimate and the director (a long prompt’s text is costly)', async () => {
    const route = API_ROUTES.find((r) => r.name === 'chat') as { promptText: (body: unknown) => string };
    const spy = jest.spyOn(route, 'promptText');
    try {
      const estimates: number[] = [];
      const limits = { limitsOf: () => ({}), admit: (_k: unknown, _d: unknown, estimate: number) => (estimates.push(estimate), Promise.resolve(undefined)), peek: () => Promise.resolve(undefined) };
      const { api, handed } = app({}, limits);
      await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-all' }).send(chat).expect(200);
      const directed = handed[0] as DirectedRequest;
      expect(directed.promptText?.()).toBe(directed.promptText?.());
      expect(estimates).toEqual([Math.ceil((directed.promptText?.().length ?? 0) / 4)]);
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('the priority header may lower a key’s class, never raise it', async () => {
    const { api, handed } = app();
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-all', 'x-modelgate-priority': 'sheddable' }).send(chat).expect(200);
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-batch', 'x-modelgate-priority': 'critical' }).send(chat).expect(200);
    expect(handed.map((d) => d.priority)).toEqual(['sheddable', 'sheddable']);
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-all', 'x-modelgate-priority': 'urgent' }).send(chat).expect(400);
  });

  it('lets a key reach a deployment only through the names that deployment holds: a name it lost to an older one gives no access to it', async () => {
    // Kubernetes mode: the same ModelDeployment name in two namespaces; the older keeps the bare name
    const target = { targets: [{ pool: 'p', weight: 100 }], fallbacks: [] };
    const teamA = { id: 'llama-prod', namespace: 'team-a', model: 'llama-8b', aliases: [], created: 1, ...target };
    const teamB = { id: 'llama-prod', namespace: 'team-b', model: 'secret-70b', aliases: ['llama-8b', 'big'], created: 2, ...target };
    const contested = new Registry([pool], [teamA, teamB]);
    principals['sk-llama'] = { name: 'llama', models: new Set(['llama-prod']), priority: 'standard', weight: 1, cacheSalt: 'salt' };
    try {
      const { api, handed } = app({}, undefined, contested);
      const auth = { authorization: 'Bearer sk-llama' };
      const listed = await request(api).get('/v1/models').set(auth).expect(200);
      expect((listed.body as { data: Array<{ id: string }> }).data.map((m) => m.id)).toEqual(['llama-prod', 'llama-8b']);
      await request(api).get('/v1/models/secret-70b').set(auth).expect(404);
      for (const model of ['secret-70b', 'big']) {
        const res = await request(api)
          .post('/v1/chat/completions')
          .set(auth)
          .send({ ...chat, model })
          .expect(404);
        expect((res.body as { error: { code: string } }).error.code).toBe('model_not_found');
      }
      expect(handed).toHaveLength(0);
      await request(api)
        .post('/v1/chat/completions')
        .set(auth)
        .send({ ...chat, model: 'llama-prod' })
        .expect(200);
      expect(handed.map((d) => d.deployment.namespace)).toEqual(['team-a']);
    } finally {
      delete principals['sk-llama'];
    }
  });

  it.each([
    ['no key', {}, chat, 401, 'invalid_api_key'],
    ['a model the key may not use', { authorization: 'Bearer sk-none' }, chat, 404, 'model_not_found'],
    ['an unknown model', { authorization: 'Bearer sk-all' }, { ...chat, model: 'nope' }, 404, 'model_not_found'],
    ['an invalid body', { authorization: 'Bearer sk-all' }, { model: 'm' }, 400, 'invalid_request'],
    ['JSON nested too deep', { authorization: 'Bearer sk-all' }, { ...chat, x: [[[[[[[[[1]]]]]]]]] }, 400, 'invalid_request'],
  ])('answers %s itself, without the director', async (_what, headers, body, status, code) => {
    const { api, handed } = app();
    const res = await request(api).post('/v1/chat/completions').set(headers).send(body).expect(status);
    expect((res.body as { error: { code: string } }).error.code).toBe(code);
    expect(handed).toHaveLength(0);
  });

  it('logs one line per request from the director’s report, bound to the request id', async () => {
    const { api, logs } = app({ fallback: 'other-prod', usage: { promptTokens: 0, completionTokens: 7, estimated: true }, failure: 'client_gone', end: 'client_gone' });
    await request(api).post('/v1/chat/completions').set({ authorization: 'Bearer sk-all', 'x-request-id': 'req-42' }).send(chat).expect(200);
    await waitFor(() => logs.some((l) => l.includes('"msg":"request"')), 'the access log line');
    const line = JSON.parse(logs.find((l) => l.includes('"msg":"request"')) ?? '{}') as Record<string, unknown>;
    expect(line).toMatchObject({
      requestId: 'req-42',
      key: 'all',
      model: 'default',
      deployment: 'm-prod',
      pool: 'p',
      fallback: 'other-prod',
      endpoint: 'e1',
      completionTokens: 7,
      tokensEstimated: true,
      failure: 'client_gone',
      status: 200,
    });
    expect(line.promptTokens).toBeUndefined();
  });
});
