/**
 * The body each engine gets (routeSteps): the shortcut for a stream's usage request (one member put
 * before the closing brace) gives exactly the bytes the general patch (upstreamBody) gives.
 */
import { describe, expect, it } from '@jest/globals';
import { apiRoute } from '../../src/api/routes.js';
import { type ValidRequest } from '../../src/api/validate.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type PoolSpec } from '../../src/core/types.js';
import { type DirectedRequest } from '../../src/director/director.js';
import { routeSteps, streamUsageOverride } from '../../src/director/upstream-request.js';
import { upstreamBody } from '../../src/proxy/body-patch.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';

const pool = (servedModelName: string): PoolSpec => ({ name: 'p', engine: 'vllm', servedModelName, capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS });

function request(text: string): DirectedRequest {
  const body = JSON.parse(text) as ValidRequest;
  const api = apiRoute('chat');
  return {
    api,
    path: '/v1/chat/completions',
    deployment: { id: 'd', model: body.model, aliases: [], targets: [{ pool: 'p', weight: 1 }], fallbacks: [], created: 0 },
    asked: body.model,
    body,
    raw: Buffer.from(text),
    text,
    priority: 'critical',
    tenant: 't',
    weight: 1,
    requestId: 'rid',
    engineRequestId: 'rid',
    cacheSalt: 'salt-t',
    headers: {},
    forwarded: { for: '10.0.0.1', proto: 'http', host: 'h', port: '80' },
    signal: new AbortController().signal,
  };
}

const sent = (text: string, served: string): string => {
  const req = request(text);
  const usage = streamUsageOverride(req.body);
  return routeSteps([{ pool: pool(served), deployment: 'd' }], req, usage, () => new Set())[0]!.body.toString('utf8');
};
const general = (text: string, served: string): string => {
  const req = request(text);
  return upstreamBody(text, served, req.asked, streamUsageOverride(req.body));
};

describe('routeSteps: the body of a stream that asked for no usage', () => {
  it.each([
    ['compact', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'],
    ['spaced, with a newline at the end', '{ "model" : "m" ,\n  "messages" : [ { "role" : "user", "content" : "} {" } ],\n  "stream" : true }\n'],
    ['non-ASCII text and escapes', '{"model":"m","messages":[{"role":"user","content":"h\\u00e9llo — 日本 \\"}\\""}],"stream":true,"max_tokens":16}'],
    ['stream last, a nested object before it', '{"messages":[{"role":"user","content":"x"}],"model":"m","metadata":{"a":{"b":"}"}},"stream":true}'],
  ])('%s, to a pool serving the name asked: the general patch’s bytes, usage asked for', (_name, text) => {
    const out = sent(text, 'm');
    expect(out).toBe(general(text, 'm'));
    expect(out).not.toBe(text);
    expect((JSON.parse(out) as { stream_options?: unknown }).stream_options).toEqual({ include_usage: true });
    expect(JSON.parse(out)).toEqual({ ...(JSON.parse(text) as object), stream_options: { include_usage: true } });
  });

  it.each([
    ['another served name', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}', 'served'],
    ['stream options of its own', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"continuous_usage_stats":false}}', 'm'],
    ['usage asked not to come', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":false}}', 'm'],
    ['extra_body', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"extra_body":{"top_k":2}}', 'm'],
  ])('%s: the general patch', (_name, text, served) => {
    const out = sent(text, served);
    expect(out).toBe(general(text, served));
    expect((JSON.parse(out) as { stream_options?: { include_usage?: boolean } }).stream_options?.include_usage).toBe(true);
  });

  it('a stream that asked for usage itself, to a pool serving the name asked: the bytes as received', () => {
    const text = '{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}';
    const req = request(text);
    const step = routeSteps([{ pool: pool('m'), deployment: 'd' }], req, streamUsageOverride(req.body), () => new Set())[0]!;
    expect(step.body).toBe(req.raw);
  });
});

describe('routeSteps: a pool that isolates keys (routing.prefix.isolateKeys)', () => {
  const isolating = (engine: PoolSpec['engine']): PoolSpec => ({ ...pool('served'), engine, routing: { ...ROUTING_DEFAULTS, prefix: { ...ROUTING_DEFAULTS.prefix, isolateKeys: true } } });
  const bodyFor = (text: string, target: PoolSpec, cacheSalt: string, api = apiRoute('chat')): Record<string, unknown> => {
    const req = { ...request(text), cacheSalt, api };
    return JSON.parse(routeSteps([{ pool: target, deployment: 'd' }], req, streamUsageOverride(req.body), () => new Set())[0]!.body.toString('utf8')) as Record<string, unknown>;
  };
  const chat = '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}';

  it('gives a vLLM engine the key’s own cache_salt on every API, over any the client sent (it could name another key’s)', () => {
    const a = bodyFor(chat, isolating('vllm'), 'salt-a');
    expect(a).toMatchObject({ model: 'served', cache_salt: 'salt-a', stream_options: { include_usage: true } });
    const forged = bodyFor('{"model":"m","messages":[{"role":"user","content":"hi"}],"cache_salt":"guess","extra_body":{"cache_salt":"guess"}}', isolating('vllm'), 'salt-b');
    expect(forged.cache_salt).toBe('salt-b');
    expect(forged.extra_body).toBeUndefined();
    for (const [api, text] of [
      ['completions', '{"model":"m","prompt":"hi"}'],
      ['responses', '{"model":"m","input":"hi","cache_salt":"guess"}'],
      ['messages', '{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"cache_salt":"guess"}'],
      ['embeddings', '{"model":"m","input":"hi"}'],
    ] as const) {
      expect(bodyFor(text, isolating('vllm'), 'salt-a', apiRoute(api)).cache_salt).toBe('salt-a');
    }
  });

  it('sets none in a pool that does not isolate keys', () => {
    expect(bodyFor(chat, pool('served'), 'salt-a').cache_salt).toBeUndefined();
  });

  it('gives a vLLM engine a new request_id where the client sent one (vLLM may run and store the request under it)', () => {
    const sent = '{"model":"m","input":"hi","request_id":"resp_shared"}';
    const ids = [0, 1].map(() => bodyFor(sent, pool('served'), 'salt-a', apiRoute('responses')).request_id);
    expect(ids).toEqual([expect.stringMatching(/^resp_[0-9a-f]{32}$/), expect.stringMatching(/^resp_[0-9a-f]{32}$/)]);
    expect(ids[0]).not.toBe(ids[1]);
    // none added where the client sent none
    expect(bodyFor('{"model":"m","input":"hi"}', pool('served'), 'salt-a', apiRoute('responses')).request_id).toBeUndefined();
  });
});
