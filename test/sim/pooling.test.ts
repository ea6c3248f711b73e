/** vLLM's rerank and score routes on the simulator, over plain fetch. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { relevance } from '../../src/sim/pooling.js';
import { type SimServer } from '../../src/sim/server.js';
import { countTokens } from '../../src/sim/text.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
beforeAll(async () => {
  sim = await startTestSim({ model: ['rerank-sim'] });
});
afterAll(() => sim.close());

async function post(path: string, body: object): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

interface RerankResult {
  index: number;
  document: { text: string; multi_modal: null };
  relevance_score: number;
}

const documents = ['The capital of France is Paris.', 'Bananas are yellow.', 'Paris is a city in France with a river.'];

describe('relevance', () => {
  it('is the cosine of the word sets: 1 for the same words, 0 for none shared', () => {
    expect(relevance('Paris France', 'france, paris!')).toBe(1);
    expect(relevance('Paris', 'Bananas')).toBe(0);
    expect(relevance('', 'anything')).toBe(0);
    expect(relevance('capital of France', 'The capital of France is Paris.')).toBeCloseTo(3 / Math.sqrt(3 * 6), 10);
  });
});

describe('rerank', () => {
  it.each(['/rerank', '/v1/rerank', '/v2/rerank'])('ranks the documents best first on %s', async (path) => {
    const res = await post(path, { model: 'rerank-sim', query: 'capital of France', documents });
    expect(res.status).toBe(200);
    expect(res.body.id).toMatch(/^rerank-/);
    expect(res.body.model).toBe('rerank-sim');
    const results = res.body.results as RerankResult[];
    expect(results.map((r) => r.index)).toEqual([0, 2, 1]);
    expect(results[0]!.document).toEqual({ text: documents[0], multi_modal: null });
    for (const r of results) expect(r.relevance_score).toBe(relevance('capital of France', documents[r.index]!));
    const tokens = documents.reduce((sum, d) => sum + countTokens('capital of France') + countTokens(d), 0);
    expect(res.body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
  });

  it('cuts to top_n and accepts documents as {text} objects', async () => {
    const res = await post('/v1/rerank', { query: 'Paris', documents: documents.map((text) => ({ text })), top_n: 1 });
    expect((res.body.results as RerankResult[]).map((r) => r.index)).toEqual([0]);
  });

  it.each([
    ['no query', { documents }, 400, 'query'],
    ['no documents', { query: 'q', documents: [] }, 400, 'documents'],
    ['an unknown model', { query: 'q', documents, model: 'x' }, 404, 'model'],
  ])('refuses %s', async (_name, body, status, param) => {
    const res = await post('/rerank', body);
    expect(res.status).toBe(status);
    expect(res.body.error).toMatchObject({ param, code: status });
  });
});

describe('score', () => {
  it('scores one text_1 against every text_2 (1:N) in vLLM’s list shape', async () => {
    const res = await post('/score', { model: 'rerank-sim', text_1: 'Paris France', text_2: documents });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ object: 'list', model: 'rerank-sim' });
    expect(res.body.id).toMatch(/^score-/);
    const data = res.body.data as Array<{ index: number; object: string; score: number }>;
    expect(data.map((d) => [d.index, d.object])).toEqual([
      [0, 'score'],
      [1, 'score'],
      [2, 'score'],
    ]);
    expect(data.map((d) => d.score)).toEqual(documents.map((d) => relevance('Paris France', d)));
    expect(res.body.usage).toMatchObject({ completion_tokens: 0, total_tokens: (res.body.usage as { prompt_tokens: number }).prompt_tokens });
  });

  it('pairs N:N, under the newer queries/documents names too', async () => {
    const pairs = { text_1: ['Paris', 'yellow fruit'], text_2: ['Paris is nice', 'Bananas are yellow'] };
    const byText = await post('/v1/score', pairs);
    const byQueries = await post('/v1/score', { queries: pairs.text_1, documents: pairs.text_2 });
    expect((byText.body.data as Array<{ score: number }>).map((d) => d.score)).toEqual([relevance('Paris', 'Paris is nice'), relevance('yellow fruit', 'Bananas are yellow')]);
    expect(byQueries.body.data).toEqual(byText.body.data);
  });

  it('refuses lengths that are neither 1:1, 1:N nor N:N, and a request without both sides', async () => {
    expect((await post('/score', { text_1: ['a', 'b'], text_2: ['a', 'b', 'c'] })).status).toBe(400);
    expect((await post('/score', { text_1: 'a' })).body.error).toMatchObject({ param: 'text_1', code: 400 });
  });
});
