/**
 * Two teams on one pool, through the router as users call it (the openai client, chat and Responses): with
 * `routing.prefix.isolateKeys`, one team's prompt is never a prefix-cache hit for the other — the
 * engine's `cached_tokens`, which would tell a guesser its guess was right, stays 0 for the other team
 * — while each team still reuses its own; without it (the default) the other team's same prompt hits.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { KEY, startTestRouter, type TestRouter } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

const OTHER_KEY = 'sk-team-b-0123456789';
const SYSTEM = 'You are the support bot of team A. Internal escalation code: 7731-ALPHA. Never reveal it. '.repeat(8);

let sim: SimServer;
let gateway: TestRouter<RunningRouter>;

beforeAll(async () => {
  sim = await startTestSim({ model: ['meta/llama'], name: 'only' });
  gateway = await startTestRouter({
    pools: [
      { name: 'shared', servedModelName: 'meta/llama', capabilities: ['chat', 'completions'], endpoints: [sim.url] },
      { name: 'isolated', servedModelName: 'meta/llama', capabilities: ['chat', 'completions', 'responses'], endpoints: [sim.url], routing: { prefix: { isolateKeys: true } } },
    ],
    deployments: [
      { id: 'shared', model: 'llama-shared', targets: [{ pool: 'shared' }] },
      { id: 'isolated', model: 'llama-isolated', targets: [{ pool: 'isolated' }] },
    ],
    keysYaml: `- name: team-a\n  key: ${KEY}\n- name: team-b\n  key: ${OTHER_KEY}\n`,
  });
});
afterAll(async () => {
  await gateway.close();
  await sim.close();
});

const client = (key: string): OpenAI => new OpenAI({ apiKey: key, baseURL: `${gateway.router.apiUrl}/v1`, maxRetries: 0 });

async function cached(key: string, model: string, question: string): Promise<number> {
  const answer = await client(key).chat.completions.create({
    model,
    messages: [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: question },
    ],
    max_tokens: 2,
  });
  return answer.usage?.prompt_tokens_details?.cached_tokens ?? -1;
}

describe('routing.prefix.isolateKeys', () => {
  it('keeps one team’s cached prompt from being a hit for another, and each team’s own still hits', async () => {
    expect(await cached(KEY, 'llama-isolated', 'first')).toBe(0);
    expect(await cached(KEY, 'llama-isolated', 'second')).toBeGreaterThan(0);
    // team B guesses team A's system prompt exactly: the engine holds it, but not under B's salt
    expect(await cached(OTHER_KEY, 'llama-isolated', 'first')).toBe(0);
    // B's own prompt is B's to reuse
    expect(await cached(OTHER_KEY, 'llama-isolated', 'again')).toBeGreaterThan(0);
  });

  it('on the Responses API too, whatever salt the client sends', async () => {
    // instructions neither team has sent yet (each team's own cache already holds SYSTEM, under its own salt)
    const ask = async (key: string, instructions: string, extra: object = {}): Promise<number> => {
      const params = { model: 'llama-isolated', instructions, input: 'hello', max_output_tokens: 2, ...extra } as OpenAI.Responses.ResponseCreateParamsNonStreaming;
      const answer = await client(key).responses.create(params);
      return answer.usage?.input_tokens_details?.cached_tokens ?? -1;
    };
    const [one, two] = [`Responses one: ${SYSTEM}`, `Responses two: ${SYSTEM}`];
    await ask(KEY, one);
    await ask(KEY, two);
    expect(await ask(KEY, one)).toBeGreaterThan(0);
    // team B sends A's instructions as they are, and with a salt of its choosing: no hit on A's cache either way
    expect(await ask(OTHER_KEY, one)).toBe(0);
    expect(await ask(OTHER_KEY, two, { cache_salt: 'any-guess' })).toBe(0);
  });

  it('by default (one cache for every key) the other team’s same prompt is a hit', async () => {
    const system = await cached(KEY, 'llama-shared', 'first');
    expect(system).toBeGreaterThanOrEqual(0);
    expect(await cached(OTHER_KEY, 'llama-shared', 'first')).toBeGreaterThan(0);
  });
});
