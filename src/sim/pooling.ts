/**
 * vLLM's cross-encoder routes: rerank (`/rerank`, `/v1/rerank`, `/v2/rerank`, Jina/Cohere style) and
 * score (`/score`, `/v1/score`, with text_1/text_2 or the newer queries/documents, queries/items and
 * data_1/data_2). A pair's score is the cosine of the two texts' word sets: deterministic, in [0, 1].
 * Each request prefills all its pairs in one engine slot, like embeddings.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { newId, readJsonBody, sendJson, unixNow } from './http-io.js';
import { asObject, fail, optionalInt, servedModel, type Body } from './request-checks.js';
import { inSlot, poolingPass, type InferenceContext } from './slots.js';
import { countTokens } from './text.js';

interface Pair {
  query: string;
  document: string;
}

const words = (text: string): Set<string> => new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []);

/** How relevant `document` is to `query`: shared words over the geometric mean of both word counts. */
export function relevance(query: string, document: string): number {
  const q = words(query);
  const d = words(document);
  if (q.size === 0 || d.size === 0) return 0;
  let shared = 0;
  for (const w of q) if (d.has(w)) shared += 1;
  return shared / Math.sqrt(q.size * d.size);
}

/** Prompt tokens of the pairs; each pair must fit the context, as one cross-encoder input. */
function pairTokens(pairs: Pair[], maxModelLen: number): number {
  let total = 0;
  for (const pair of pairs) {
    const tokens = countTokens(pair.query) + countTokens(pair.document);
    if (tokens > maxModelLen)
      fail(`This model's maximum context length is ${maxModelLen} tokens. However, you requested ${tokens} tokens in the input. Please reduce the length of the input.`, 'input_tokens');
    total += tokens;
  }
  return total;
}

function texts(value: unknown, field: string): string[] {
  if (typeof value === 'string') return [value];
  const list: unknown[] = Array.isArray(value) ? value : [];
  const out = list.map((item) => (typeof item === 'object' && item !== null ? (item as Body).text : item));
  if (out.length === 0 || !out.every((t): t is string => typeof t === 'string')) fail(`${field} must be a string or a non-empty list of strings.`, field);
  return out;
}

/** The two sides of a score request, under whichever names the request uses. */
function scoreSides(body: Body): [string[], string[]] {
  for (const [a, b] of [
    ['queries', 'documents'],
    ['queries', 'items'],
    ['data_1', 'data_2'],
    ['text_1', 'text_2'],
  ] as const) {
    if (body[a] !== undefined && body[b] !== undefined) return [texts(body[a], a), texts(body[b], b)];
  }
  return fail('text_1 and text_2 (or queries and documents) are required.', 'text_1');
}

export async function handleScore(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = asObject(await readJsonBody(req, ctx.options.maxBodyBytes));
  const model = servedModel(body, ctx.options.model);
  const [left, right] = scoreSides(body);
  if (left.length !== 1 && left.length !== right.length) fail('Input lengths must be either 1:1, 1:N or N:N');
  const pairs = right.map((document, i) => ({ query: left[left.length === 1 ? 0 : i] ?? '', document }));
  const promptTokens = pairTokens(pairs, ctx.options.maxModelLen);
  await inSlot(ctx, req, res, { stream: false }, async (run) => {
    if (!(await poolingPass(run, promptTokens))) return;
    const data = pairs.map((p, index) => ({ index, object: 'score', score: relevance(p.query, p.document) }));
    const usage = { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0, prompt_tokens_details: null };
    sendJson(res, 200, JSON.stringify({ id: `score-${newId()}`, object: 'list', created: unixNow(), model, data, usage }));
  });
}

export async function handleRerank(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = asObject(await readJsonBody(req, ctx.options.maxBodyBytes));
  const model = servedModel(body, ctx.options.model);
  if (typeof body.query !== 'string') fail('query must be a string.', 'query');
  const query = body.query;
  const documents = texts(body.documents, 'documents');
  const topN = optionalInt(body, 'top_n', 0) ?? 0;
  const pairs = documents.map((document) => ({ query, document }));
  const promptTokens = pairTokens(pairs, ctx.options.maxModelLen);
  await inSlot(ctx, req, res, { stream: false }, async (run) => {
    if (!(await poolingPass(run, promptTokens))) return;
    // vLLM always returns the documents (it has no `return_documents`), best first, cut to top_n when set.
    const results = documents
      .map((text, index) => ({ index, document: { text, multi_modal: null }, relevance_score: relevance(query, text) }))
      .sort((a, b) => b.relevance_score - a.relevance_score)
      .slice(0, topN > 0 ? topN : undefined);
    sendJson(res, 200, JSON.stringify({ id: `rerank-${newId()}`, model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens }, results }));
  });
}
