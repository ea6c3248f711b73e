/**
 * Bounded labels under traffic (issue 20): after a mix of answers, engine errors, retries, broken
 * streams, a dead replica, unknown models, bad keys and odd paths, every value of every label that
 * comes from a fixed set (route, code, end, outcome, reason, result, event, state…) is in its set
 * (`BOUNDED_LABELS`, the same constants the record functions are typed with).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { BOUNDED_LABELS, type LabelSet } from '../../src/metrics/labels.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { adminMetrics, chatSetup, KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { type RunningRouter } from '../../src/main.js';
import { startTestSim } from '../helpers/sim.js';

let sims: SimServer[];
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  sims = [await startTestSim({ model: ['served/llm'], itlMs: 1, outputMin: 3, outputMax: 6 }), await startTestSim({ model: ['served/llm'], itlMs: 1, outputMin: 3, outputMax: 6 })];
  gateway = await startTestRouter(
    chatSetup(
      sims.map((s) => s.url),
      {
        pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat', 'completions', 'embeddings'], endpoints: [...sims.map((s) => s.url), 'http://127.0.0.1:1'] }],
        config: { server: { forwardHeaders: ['x-sim-fault'] }, resilience: { maxConcurrencyPerReplica: 4, breaker: { failureThreshold: 2 } } },
      },
    ),
  );
});

afterAll(async () => {
  await gateway?.close();
  for (const sim of sims ?? []) await sim.close();
});

const post = (path: string, body: object, headers: Record<string, string> = {}): Promise<{ status: number }> =>
  rawRequest(`${gateway.router.apiUrl}${path}`, { headers: { authorization: `Bearer ${KEY}`, ...headers }, body });

/** Every sample's labels of `text`, by metric family (histogram samples under their family). */
function labelValues(text: string): Map<string, Map<string, Set<string>>> {
  const out = new Map<string, Map<string, Set<string>>>();
  for (const line of text.split('\n')) {
    const match = /^([a-z_:][a-z0-9_:]*)\{(.*)\} /.exec(line);
    if (!match) continue;
    const family = match[1]!.replace(/_(bucket|sum|count)$/, '');
    const labels = out.get(family) ?? new Map<string, Set<string>>();
    out.set(family, labels);
    for (const [, name, value] of match[2]!.matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)) {
      const values = labels.get(name!) ?? new Set<string>();
      values.add(value!);
      labels.set(name!, values);
    }
  }
  return out;
}

const allowed = (set: LabelSet, value: string): boolean => (set instanceof RegExp ? set.test(value) : set.includes(value));

describe('bounded label values under traffic', () => {
  it('stay within their sets', async () => {
    const chat = { model: 'llm', messages: [{ role: 'user', content: 'Tell me something about label cardinality, briefly. '.repeat(3) }] };
    const requests: Array<Promise<{ status: number }>> = [];
    for (let i = 0; i < 8; i++) {
      requests.push(post('/v1/chat/completions', { ...chat, stream: i % 2 === 0 }));
      requests.push(post('/v1/completions', { model: 'llm', prompt: `count ${i}` }));
    }
    requests.push(post('/v1/chat/completions', chat, { 'x-sim-fault': 'status=503' }));
    requests.push(post('/v1/chat/completions', chat, { 'x-sim-fault': 'status=500' }));
    requests.push(post('/v1/chat/completions', { ...chat, stream: true, max_tokens: 10, ignore_eos: true }, { 'x-sim-fault': 'die-after=2' }));
    requests.push(post('/v1/embeddings', { model: 'llm', input: 'hello' }));
    requests.push(post('/v1/chat/completions', { ...chat, model: 'no-such-model' }));
    requests.push(post('/v1/chat/completions', { ...chat, model: 'llm' }, { authorization: 'Bearer sk-wrong-0000000000000000' }));
    requests.push(post('/v1/chat/completions', { model: 'llm' })); // invalid body
    requests.push(rawRequest(`${gateway.router.apiUrl}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } }));
    requests.push(rawRequest(`${gateway.router.apiUrl}/no/such/path`));
    const statuses = (await Promise.all(requests)).map((r) => r.status);
    expect(new Set(statuses)).toEqual(new Set([200, 503, 500, 404, 401, 400]));

    const values = labelValues(await adminMetrics(gateway));
    const outside: string[] = [];
    let checked = 0;
    for (const [family, labels] of Object.entries(BOUNDED_LABELS)) {
      for (const [label, set] of Object.entries(labels)) {
        for (const value of values.get(family)?.get(label) ?? []) {
          checked++;
          if (!allowed(set, value)) outside.push(`${family}{${label}="${value}"}`);
        }
      }
    }
    expect(outside).toEqual([]);
    // the traffic reached the labels it is meant to exercise
    expect([...(values.get('modelgate_upstream_attempts_total')?.get('outcome') ?? [])]).toEqual(expect.arrayContaining(['committed', 'upstream_503', 'upstream_500', 'connect']));
    expect([...(values.get('modelgate_response_ends_total')?.get('end') ?? [])]).toContain('upstream_broken');
    expect([...(values.get('modelgate_requests_total')?.get('route') ?? [])]).toEqual(expect.arrayContaining(['chat', 'completions', 'embeddings', 'models', 'other']));
    expect(checked).toBeGreaterThan(50);
  });
});
