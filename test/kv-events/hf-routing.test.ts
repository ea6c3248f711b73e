/**
 * Exact KV-event prefix routing with a model's own tokenizer (`kvEvents.tokenizer: huggingface`), over
 * real sockets: simulators started with `--tokenizer-dir` render chats with the model's template and
 * publish vLLM's events with its token ids; `modelgate serve --config FILE`, started as users start it,
 * reads the same tokenizer files, renders each request with the template and routes it to the replica
 * whose engine holds its blocks — blocks the router never sent there itself.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { KEY, metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const TOKENIZER_DIR = join(process.cwd(), 'test/fixtures/hf-tokenizer');

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

// One loopback /24 and one port pair per test file run: other suites running at once do not collide.
const NET = `127.${60 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
const PORT = 20_000 + Math.floor(Math.random() * 20_000) * 2;

async function sim(hostByte: number, name: string): Promise<SimServer> {
  const s = await startTestSim({ host: `${NET}.${hostByte}`, name, kvEventsPort: PORT, kvEventsReplayPort: PORT + 1, kvEventsTopic: 'kv-events', tokenizerDir: TOKENIZER_DIR });
  cleanups.push(() => s.close());
  return s;
}

/** `modelgate serve` over `sims`, the pool reading events with the fixture's tokenizer (given relative to the config file). */
async function serve(sims: SimServer[]): Promise<ServedRouter> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-kv-hf-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
  const kvEvents = {
    enabled: true,
    endpoint: `tcp://{host}:${PORT}`,
    replayEndpoint: `tcp://{host}:${PORT + 1}`,
    topic: 'kv-events',
    tokenizer: 'huggingface',
    tokenizerDir: relative(dir, TOKENIZER_DIR),
  };
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    auth: { keysFile: 'keys.yaml' },
    pools: [{ name: 'chat', servedModelName: 'sim-model', capabilities: ['chat', 'completions'], endpoints: sims.map((s) => s.url), routing: { kvEvents } }],
    deployments: [{ id: 'chat', model: 'chat', targets: [{ pool: 'chat' }] }],
  };
  await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
  const served = await serveRouter(join(dir, 'modelgate.yaml'));
  cleanups.push(() => served.stop());
  return served;
}

const metric = async (served: ServedRouter, name: string, labels: Record<string, string> = {}): Promise<number> => metricSum((await rawRequest(`${served.admin}/metrics`)).body, name, labels);

const conversation = (topic: string): OpenAI.ChatCompletionMessageParam[] => [
  { role: 'system', content: `You are the ${topic} desk of a hardware café — süß, 寿司 and 🛠 included. Keep answers short, name the aisle. `.repeat(6) },
  {
    role: 'user',
    content: [
      { type: 'text', text: `Where do I find ${topic}?` },
      { type: 'text', text: 'Price in €, please.' },
    ],
  },
];

describe('KV-event prefix routing with the model’s tokenizer (huggingface)', () => {
  it("routes an OpenAI client's chat and completions to the replica whose engine holds them, though the router never sent them there", async () => {
    const a = await sim(1, 'a');
    const b = await sim(2, 'b');
    const served = await serve([a, b]);
    await waitFor(async () => (await metric(served, 'modelgate_kv_events_connected_replicas')) === 2, 'the router subscribed', 10_000);

    // b's engine runs the conversation, a's a completions prompt: straight to them, around the router
    const paint = conversation('paint');
    expect((await rawRequest(`${b.url}/v1/chat/completions`, { body: { model: 'sim-model', messages: paint, max_tokens: 2 } })).status).toBe(200);
    const story = 'Once upon a time, in a workshop full of sawdust and ünusual tools, a carpenter kept a ledger. '.repeat(5);
    expect((await rawRequest(`${a.url}/v1/completions`, { body: { model: 'sim-model', prompt: story, max_tokens: 2 } })).status).toBe(200);
    await waitFor(async () => (await metric(served, 'modelgate_kv_events_replicas', { pool: 'chat', state: 'complete' })) === 2, 'both replicas complete', 10_000);
    await waitFor(async () => (await metric(served, 'modelgate_kv_events_received_total', { pool: 'chat', type: 'block_stored' })) >= 2, 'both stores heard', 10_000);

    const client = new OpenAI({ baseURL: `${served.api}/v1`, apiKey: KEY, maxRetries: 0 });
    const { response: first } = await client.chat.completions.create({ model: 'chat', messages: paint, max_tokens: 2 }).withResponse();
    expect(first.headers.get('x-sim-replica')).toBe('b');
    // the first pick already matched b's blocks, from the events
    const hits = await metric(served, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'events', result: 'hit' });
    expect(hits).toBeGreaterThan(10);
    for (let i = 0; i < 3; i++) {
      const { response } = await client.chat.completions.create({ model: 'chat', messages: paint, max_tokens: 2 }).withResponse();
      expect(response.headers.get('x-sim-replica')).toBe('b');
    }
    const { response: completion } = await client.completions.create({ model: 'chat', prompt: story, max_tokens: 2 }).withResponse();
    expect(completion.headers.get('x-sim-replica')).toBe('a');
    expect(await metric(served, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'events', result: 'hit' })).toBeGreaterThan(hits + 10);
  });
});
