import { describe, expect, it } from '@jest/globals';
import { embed, parseEmbeddingRequest, toBase64 } from '../../src/sim/embeddings.js';
import { RequestError } from '../../src/sim/request-checks.js';

const limits = { models: ['e'], maxModelLen: 64, dimension: 32 };
const norm = (v: Float32Array): number => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

describe('simulated embeddings', () => {
  it('are deterministic unit vectors of the configured dimension', () => {
    const a = embed('text:hello', 32, 32);
    expect(a).toHaveLength(32);
    expect(norm(a)).toBeCloseTo(1, 5);
    expect(embed('text:hello', 32, 32)).toEqual(a);
    expect(embed('text:world', 32, 32)).not.toEqual(a);
  });

  it('truncate to `dimensions` and renormalise (Matryoshka style)', () => {
    const full = embed('text:hello', 32, 32);
    const short = embed('text:hello', 32, 8);
    expect(short).toHaveLength(8);
    expect(norm(short)).toBeCloseTo(1, 5);
    const scale = (short[0] ?? 0) / (full[0] ?? 1);
    short.forEach((x, i) => expect(x).toBeCloseTo((full[i] ?? 0) * scale, 5));
  });

  it('encode base64 as float32 little-endian bytes', () => {
    expect(toBase64(new Float32Array([1, -2, 0.5]))).toBe('AACAPwAAAMAAAAA/');
  });

  it('accept a string, strings, one token-id list or token-id lists', () => {
    const parse = (input: unknown): number[] => parseEmbeddingRequest({ model: 'e', input }, limits).inputs.map((i) => i.tokens);
    expect(parse('abcdefgh')).toEqual([2]);
    expect(parse(['abcd', 'abcdefgh'])).toEqual([1, 2]);
    expect(parse([1, 2, 3])).toEqual([3]);
    expect(parse([[1, 2], [3]])).toEqual([2, 1]);
  });

  it.each([
    [{ input: [] }, 'input'],
    [{ input: [[]] }, 'input[0]'],
    [{ input: [1.5] }, 'input[0]'],
    [{ input: 'x', encoding_format: 'hex' }, 'encoding_format'],
    [{ input: 'x', dimensions: 33 }, 'dimensions'],
    [{ input: 'x'.repeat(400) }, 'input_tokens'],
  ])('reject %j on param %s', (body, param) => {
    expect(() => parseEmbeddingRequest({ model: 'e', ...body }, limits)).toThrow(RequestError);
    try {
      parseEmbeddingRequest({ model: 'e', ...body }, limits);
    } catch (err) {
      expect((err as RequestError).error.param).toBe(param);
    }
  });
});
