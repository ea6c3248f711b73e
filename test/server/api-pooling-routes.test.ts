/**
 * vLLM's pooling and tokenizer APIs through a listening router, against simulator replicas: rerank on
 * its three paths, score on its two, tokenize and detokenize. What the engine received is read from a
 * recording proxy in front of the reranker's replica (path and exact body); the simulator accepts only
 * its own model name, so a 200 also proves `model` was rewritten to the pool's servedModelName.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { startTap, type Tap, type Tapped } from '../helpers/tap.js';

let reranker: SimServer;
let llm: SimServer;
let tap: Tap;
let g: TestRouter<RunningRouter>;

beforeAll(async () => {
  reranker = await startTestSim({ model: ['BAAI/bge-reranker-v2-m3'], name: 'rerank-0' });
  llm = await startTestSim({ model: ['served/llm'], name: 'llm-0' });
  tap = await startTap(reranker.url);
  g = await startTestRouter({
    pools: [
      { name: 'reranker', servedModelName: 'BAAI/bge-reranker-v2-m3', capabilities: ['rerank', 'score'], endpoints: [tap.url] },
      { name: 'llm', servedModelName: 'served/llm', capabilities: ['chat', 'tokenize'], endpoints: [llm.url] },
    ],
    deployments: [
      { id: 'reranker', model: 'bge-reranker', aliases: ['rr'], targets: [{ pool: 'reranker' }] },
      { id: 'llm', model: 'llm-model', aliases: ['default'], targets: [{ pool: 'llm' }] },
    ],
  });
});
afterAll(async () => {
  await g.close();
  await tap.close();
  await Promise.all([reranker.close(), llm.close()]);
});

/** POSTs `text` (JSON as written) to the router and returns the answer and, for the reranker, what its engine got. */
async function post(path: string, body: object | string): Promise<{ res: RawResponse; json: Record<string, unknown>; sent: Tapped | undefined }> {
  const before = tap.posts().length;
  const res = await rawRequest(`${g.router.apiUrl}${path}`, { headers: { authorization: `Bearer ${KEY}` }, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const json = res.body.startsWith('{') ? (JSON.parse(res.body) as Record<string, unknown>) : {};
  return { res, json, sent: tap.posts()[before] };
}

const DOCS = ['Paris is the capital of France.', 'Bananas grow on trees.', 'France has good cheese.'];
type RerankAnswer = { model: string; usage: { prompt_tokens: number; total_tokens: number }; results: Array<{ index: number; relevance_score: number; document: { text: string } }> };
type ScoreAnswer = { object: string; model: string; usage: { prompt_tokens: number }; data: Array<{ index: number; object: string; score: number }> };

describe('rerank', () => {
  it.each(['/v1/rerank', '/rerank', '/v2/rerank'])('%s reaches the engine at the same path, with model set to the served name and the rest of the body as written', async (path) => {
    const text = `{"model":"bge-reranker","query":"capital of France","documents":${JSON.stringify(DOCS)},"top_n":2,"priority":0}`;
    const { res, json, sent } = await post(path, text);
    expect(res.status).toBe(200);
    expect(res.headers['x-sim-replica']).toBe('rerank-0');
    expect(sent?.url).toBe(path);
    expect(sent?.body.toString('utf8')).toBe(text.replace('"model":"bge-reranker"', '"model":"BAAI/bge-reranker-v2-m3"'));
    const answer = json as unknown as RerankAnswer;
    expect(answer.model).toBe('BAAI/bge-reranker-v2-m3');
    expect(answer.results.map((r) => r.index)).toEqual([0, 2]);
    expect(answer.results[0]!.relevance_score).toBeGreaterThan(answer.results[1]!.relevance_score);
    expect(answer.results[0]!.document.text).toBe(DOCS[0]);
    expect(answer.usage.prompt_tokens).toBeGreaterThan(0);
  });

  it.each([
    ['an alias', 'rr'],
    ['the deployment id', 'reranker'],
  ])('serves the model asked for by %s, rewritten to the served name', async (_what, model) => {
    const { res, json, sent } = await post('/v1/rerank', { model, query: 'cells', documents: ['the cell', 'a rock'] });
    expect(res.status).toBe(200);
    expect((JSON.parse(sent!.body.toString('utf8')) as { model: string }).model).toBe('BAAI/bge-reranker-v2-m3');
    expect((json as unknown as RerankAnswer).results[0]).toMatchObject({ index: 0, document: { text: 'the cell' } });
  });

  it('forwards the path without the client’s query string', async () => {
    const { res, sent } = await post('/v2/rerank?api-version=2&model=other', { model: 'rr', query: 'q', documents: ['q'] });
    expect(res.status).toBe(200);
    expect(sent?.url).toBe('/v2/rerank');
  });

  it('takes Cohere-style {text} documents and passes them on untouched', async () => {
    const { res, json, sent } = await post('/v2/rerank', { model: 'rr', query: 'cheese', documents: [{ text: 'no match here' }, { text: 'cheese from France' }] });
    expect(res.status).toBe(200);
    expect((JSON.parse(sent!.body.toString('utf8')) as { documents: unknown }).documents).toEqual([{ text: 'no match here' }, { text: 'cheese from France' }]);
    expect((json as unknown as RerankAnswer).results[0]!.index).toBe(1);
  });
});

describe('score', () => {
  it.each(['/v1/score', '/score'])('%s scores text pairs at the path the client called', async (path) => {
    const { res, json, sent } = await post(path, { model: 'bge-reranker', text_1: 'the capital of France', text_2: ['Paris is the capital of France', 'bananas are yellow'] });
    expect(res.status).toBe(200);
    expect(sent?.url).toBe(path);
    const answer = json as unknown as ScoreAnswer;
    expect(answer).toMatchObject({ object: 'list', model: 'BAAI/bge-reranker-v2-m3' });
    expect(answer.data.map((d) => [d.index, d.object])).toEqual([
      [0, 'score'],
      [1, 'score'],
    ]);
    expect(answer.data[0]!.score).toBeGreaterThan(0.5);
    expect(answer.data[1]!.score).toBe(0);
  });

  it('takes the queries/documents naming as well', async () => {
    const { res, json } = await post('/v1/score', { model: 'rr', queries: 'red apple', documents: ['a red apple', 'a green pear'] });
    expect(res.status).toBe(200);
    expect((json as unknown as ScoreAnswer).data.map((d) => d.score > 0)).toEqual([true, false]);
  });
});

describe('tokenize and detokenize', () => {
  it('round-trips a prompt through the router: tokenize, then detokenize gives the text back', async () => {
    const prompt = 'The quick brown fox jumps over the lazy dog — twice, naïvely.';
    const tok = await post('/tokenize', { model: 'llm-model', prompt, return_token_strs: true });
    expect(tok.res.status).toBe(200);
    expect(tok.res.headers['x-sim-replica']).toBe('llm-0');
    const { tokens, count, token_strs: strs } = tok.json as { tokens: number[]; count: number; token_strs: string[] };
    expect(count).toBe(tokens.length);
    expect(count).toBeGreaterThan(5);
    expect(strs.join('')).toBe(prompt);
    const detok = await post('/detokenize', { model: 'default', tokens });
    expect(detok.res.status).toBe(200);
    expect(detok.json).toEqual({ prompt });
  });

  it('tokenizes chat messages with the template', async () => {
    const plain = await post('/tokenize', { model: 'llm-model', prompt: 'hello there' });
    const chat = await post('/tokenize', { model: 'llm-model', messages: [{ role: 'user', content: 'hello there' }] });
    expect(chat.res.status).toBe(200);
    expect((chat.json as { count: number }).count).toBeGreaterThan((plain.json as { count: number }).count);
  });
});

describe('metrics', () => {
  it('count rerank, score, tokenize and detokenize requests by route, and prompt tokens from rerank and score usage', async () => {
    const requestsOf = (text: string, route: string): number => metricSum(text, 'modelgate_requests_total', { route, code: '200' });
    const ROUTES = ['rerank', 'score', 'tokenize', 'detokenize'];
    const before = await adminMetrics(g);
    let prompt = 0;
    for (const path of ['/v1/rerank', '/rerank', '/v2/rerank']) {
      const { json } = await post(path, { model: 'rr', query: 'alpha beta', documents: ['alpha', 'beta gamma', 'delta'] });
      prompt += (json as unknown as RerankAnswer).usage.prompt_tokens;
    }
    for (const path of ['/v1/score', '/score']) {
      const { json } = await post(path, { model: 'rr', text_1: 'one two three', text_2: 'two three four' });
      prompt += (json as unknown as ScoreAnswer).usage.prompt_tokens;
    }
    const { json } = await post('/tokenize', { model: 'llm-model', prompt: 'count me' });
    await post('/detokenize', { model: 'llm-model', tokens: (json as { tokens: number[] }).tokens });
    await post('/detokenize', { model: 'llm-model', tokens: [1, 2] });
    expect(prompt).toBeGreaterThan(0);

    const expected: Record<string, number> = { rerank: 3, score: 2, tokenize: 1, detokenize: 2 };
    let after = '';
    await waitFor(async () => {
      after = await adminMetrics(g);
      return ROUTES.every((route) => requestsOf(after, route) - requestsOf(before, route) >= (expected[route] ?? 0));
    }, 'the requests to be counted');
    for (const route of ROUTES) expect([route, requestsOf(after, route) - requestsOf(before, route)]).toEqual([route, expected[route]]);
    expect(metricSum(after, 'modelgate_requests_total', { route: 'rerank', deployment: 'reranker', pool: 'reranker' })).toBeGreaterThanOrEqual(3);
    const tokens = (text: string, deployment: string): number => metricSum(text, 'modelgate_prompt_tokens_total', { deployment });
    expect(tokens(after, 'reranker') - tokens(before, 'reranker')).toBe(prompt);
    // tokenize and detokenize answers carry no usage: no prompt tokens are counted for them
    expect(tokens(after, 'llm') - tokens(before, 'llm')).toBe(0);
  });
});
