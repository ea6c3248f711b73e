/**
 * Embeddings for the simulator: deterministic unit vectors (same input, same vector), Matryoshka-style
 * `dimensions`, and `encoding_format: base64` as float32 little-endian bytes, as vLLM and TEI send it.
 */
import { vllmError } from './errors.js';
import { createRng, gaussian, hash53 } from './prng.js';
import { asObject, fail, optionalInt, RequestError, servedModel, type Body } from './request-checks.js';
import { countTokens } from './text.js';

export interface EmbeddingLimits {
  models: readonly string[];
  maxModelLen: number;
  dimension: number;
}

export interface EmbeddingInput {
  /** What the vector is derived from: the text, or the token ids. */
  key: string;
  tokens: number;
}

export interface EmbeddingJob {
  model: string;
  inputs: EmbeddingInput[];
  promptTokens: number;
  encoding: 'float' | 'base64';
  dimensions: number;
}

function isTokenIds(value: unknown): value is number[] {
  return Array.isArray(value) && value.length > 0 && value.every((t) => Number.isInteger(t) && (t as number) >= 0);
}

function parseInputs(input: unknown): EmbeddingInput[] {
  if (typeof input === 'string') return [{ key: `text:${input}`, tokens: countTokens(input) }];
  if (!Array.isArray(input) || input.length === 0) {
    return fail('input must be a string, a non-empty list of strings, or a non-empty list of token-id lists.', 'input');
  }
  if (isTokenIds(input)) return [{ key: `ids:${input.join(',')}`, tokens: input.length }];
  return input.map((item: unknown, i) => {
    if (typeof item === 'string') return { key: `text:${item}`, tokens: countTokens(item) };
    if (isTokenIds(item)) return { key: `ids:${item.join(',')}`, tokens: item.length };
    return fail(`input[${i}] must be a string or a non-empty list of non-negative integer token ids.`, `input[${i}]`);
  });
}

export function parseEmbeddingRequest(raw: unknown, limits: EmbeddingLimits): EmbeddingJob {
  const body: Body = asObject(raw);
  const model = servedModel(body, limits.models);
  const inputs = parseInputs(body.input);
  for (const item of inputs) {
    if (item.tokens > limits.maxModelLen) {
      fail(
        `This model's maximum context length is ${limits.maxModelLen} tokens. However, you requested ${item.tokens} tokens in the input for embedding generation. Please reduce the length of the input.`,
        'input_tokens',
      );
    }
  }
  const encoding = body.encoding_format ?? 'float';
  if (encoding !== 'float' && encoding !== 'base64') fail('encoding_format must be "float" or "base64".', 'encoding_format');
  const dimensions = optionalInt(body, 'dimensions', 1) ?? limits.dimension;
  if (dimensions > limits.dimension) {
    throw new RequestError(vllmError(400, 'BadRequestError', `dimensions must be at most ${limits.dimension} for this model, got ${dimensions}.`, 'dimensions'));
  }
  return { model, inputs, promptTokens: inputs.reduce((s, i) => s + i.tokens, 0), encoding, dimensions };
}

/** The unit vector for `key`, truncated to `dimensions` and renormalised, as float32. */
export function embed(key: string, fullDimension: number, dimensions: number): Float32Array {
  const rng = createRng(hash53(key));
  const full = new Float64Array(fullDimension);
  for (let i = 0; i < fullDimension; i++) full[i] = gaussian(rng);
  let norm = 0;
  for (let i = 0; i < dimensions; i++) norm += (full[i] ?? 0) ** 2;
  norm = Math.sqrt(norm) || 1;
  const out = new Float32Array(dimensions);
  for (let i = 0; i < dimensions; i++) out[i] = (full[i] ?? 0) / norm;
  return out;
}

/** Standard base64 of the vector's float32 little-endian bytes. */
export function toBase64(vector: Float32Array): string {
  const buf = Buffer.allocUnsafe(vector.length * 4);
  for (let i = 0; i < vector.length; i++) buf.writeFloatLE(vector[i] ?? 0, i * 4);
  return buf.toString('base64');
}

export function embeddingBody(id: string, created: number, job: EmbeddingJob, fullDimension: number): string {
  return JSON.stringify({
    id,
    object: 'list',
    created,
    model: job.model,
    data: job.inputs.map((input, index) => {
      const vector = embed(input.key, fullDimension, job.dimensions);
      return { index, object: 'embedding', embedding: job.encoding === 'base64' ? toBase64(vector) : Array.from(vector) };
    }),
    usage: { prompt_tokens: job.promptTokens, total_tokens: job.promptTokens, completion_tokens: 0, prompt_tokens_details: null },
  });
}
