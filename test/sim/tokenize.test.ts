/** vLLM's /tokenize and /detokenize on the simulator, and the reversible tokenizer behind them. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import { renderPrompt } from '../../src/sim/chat-request.js';
import { type SimServer } from '../../src/sim/server.js';
import { countTokens } from '../../src/sim/text.js';
import { detokenize, tokenize, tokenPieces } from '../../src/sim/tokenizer.js';
import { startTestSim } from '../helpers/sim.js';

let sim: SimServer;
beforeAll(async () => {
  sim = await startTestSim({ model: ['tok-sim'], maxModelLen: 4096 });
});
afterAll(() => sim.close());

async function post(path: string, body: object, headers: Record<string, string> = {}): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('the simulator’s tokenizer', () => {
  it('round-trips every string', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), (text) => detokenize(tokenize(text)) === text));
    fc.assert(fc.property(fc.string({ unit: 'binary' }), (text) => detokenize(tokenize(text)) === text));
  });

  it('counts ASCII text exactly as usage does', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary-ascii' }), (text) => tokenize(text).length === countTokens(text)));
  });

  it('gives each non-ASCII unit a token of its own', () => {
    expect(tokenPieces('abcdefg é!')).toEqual(['abcd', 'efg ', 'é', '!']);
  });
});

describe('/tokenize and /detokenize', () => {
  it('tokenize a prompt and detokenize it back, with vLLM’s fields', async () => {
    const prompt = 'Tokenize me, please — ünïcödé too.';
    const tokens = await post('/tokenize', { model: 'tok-sim', prompt, add_special_tokens: true });
    expect(tokens.status).toBe(200);
    expect(tokens.body).toEqual({ count: tokenize(prompt).length, max_model_len: 4096, tokens: tokenize(prompt), token_strs: null });
    const back = await post('/detokenize', { model: 'tok-sim', tokens: tokens.body.tokens as number[] });
    expect(back.body).toEqual({ prompt });
  });

  it('tokenize chat messages as the chat template renders them, and return token strings when asked', async () => {
    const messages = [{ role: 'user', content: 'Hi!' }];
    const withPrompt = await post('/tokenize', { messages });
    const without = await post('/tokenize', { messages, add_generation_prompt: false, return_token_strs: true });
    expect(withPrompt.body.tokens).toEqual(tokenize(renderPrompt(messages)));
    expect((without.body.token_strs as string[]).join('')).toBe(renderPrompt(messages, false));
    expect(without.body.count).toBeLessThan(withPrompt.body.count as number);
  });

  it('count a prompt the way completions bill it', async () => {
    const prompt = 'Count these words the same way.';
    const counted = await post('/tokenize', { prompt });
    const completion = await post('/v1/completions', { prompt: counted.body.tokens as number[], max_tokens: 1, echo: true });
    expect((completion.body.usage as { prompt_tokens: number }).prompt_tokens).toBe(counted.body.count);
    expect((completion.body.choices as Array<{ text: string }>)[0]!.text.startsWith(prompt)).toBe(true);
  });

  it.each([
    ['/tokenize', { prompt: 5 }, 400, 'prompt'],
    ['/tokenize', { prompt: 'x', model: 'other' }, 404, 'model'],
    ['/detokenize', { tokens: [1, -2] }, 400, 'tokens'],
    ['/detokenize', { tokens: 'abc' }, 400, 'tokens'],
  ])('%s refuses %j', async (path, body, status, param) => {
    const res = await post(path, body);
    expect(res.status).toBe(status);
    expect(res.body.error).toMatchObject({ param, code: status });
  });

  it('apply an injected fault, and 405 on GET', async () => {
    expect((await post('/tokenize', { prompt: 'x' }, { 'x-sim-fault': 'status=503' })).status).toBe(503);
    expect((await fetch(`${sim.url}/detokenize`)).status).toBe(405);
  });
});
