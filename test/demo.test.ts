/** `modelgate demo` (what `npm start` runs), driven the way the README tells a newcomer to. */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import OpenAI from 'openai';
import { DEMO_CHAT_MODEL, DEMO_EMBEDDING_MODEL, DEMO_KEY, demoInstructions, startDemo, type RunningDemo } from '../src/demo.js';

let demo: RunningDemo;
beforeAll(async () => {
  demo = await startDemo({ port: 0, adminPort: 0, logLevel: 'silent' });
});
afterAll(() => demo.close());

describe('modelgate demo', () => {
  it('serves chat and embeddings to the openai client with the printed key', async () => {
    const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${demo.router.apiUrl}/v1`, maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: DEMO_CHAT_MODEL, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 5 });
    expect(chat.choices[0]!.message.content).toMatch(/\w/);
    const embedding = await client.embeddings.create({ model: DEMO_EMBEDDING_MODEL, input: 'Hello!' });
    expect(embedding.data[0]!.embedding).toHaveLength(384);
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(['default', DEMO_CHAT_MODEL, 'text-embedding-3-small']));
  });

  it('prints the base URL, the key and a curl line', () => {
    const text = demoInstructions(demo);
    expect(text).toContain(`${demo.router.apiUrl}/v1`);
    expect(text).toContain(DEMO_KEY);
    expect(text).toContain(`curl -s ${demo.router.apiUrl}/v1/chat/completions`);
  });
});
