/**
 * Exact prefix routing from KV-cache events, over real sockets: simulators publish vLLM's ZMQ/msgpack
 * events, a real router subscribes, and its picks follow what the engines hold — also blocks the router
 * never sent (a request that went around it). A publisher that goes away turns the replica stale and
 * the estimate answers again; a lost batch is a gap, filled by a replay or, without one, trusted again
 * only after the engine clears its cache. Each simulator has its own loopback address, so every one
 * publishes on the same port, as pods do.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { type RunningRouter } from '../../src/main.js';
import { createRng } from '../../src/sim/prng.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest, type RawResponse } from '../helpers/http.js';
import { adminMetrics, KEY, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { serveRouter } from '../helpers/serve.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

// One loopback /24 and one port pair per test file run: other suites running at once do not collide.
const NET = `127.${60 + Math.floor(Math.random() * 150)}.${1 + Math.floor(Math.random() * 250)}`;
const PORT = 20_000 + Math.floor(Math.random() * 20_000) * 2;

async function sim(hostByte: number, name: string, replay: boolean): Promise<SimServer> {
  const s = await startTestSim({ host: `${NET}.${hostByte}`, name, kvEventsPort: PORT, kvEventsReplayPort: replay ? PORT + 1 : 0, kvEventsTopic: 'kv-events' });
  cleanups.push(() => s.close());
  return s;
}

const kvEvents = (replay: boolean): object => ({
  kvEvents: { enabled: true, endpoint: `tcp://{host}:${PORT}`, replayEndpoint: replay ? `tcp://{host}:${PORT + 1}` : '', topic: 'kv-events', tokenizer: 'simulator', staleAfterMs: 300 },
});

async function router(pools: Array<{ name: string; sims: SimServer[]; replay: boolean }>): Promise<TestRouter<RunningRouter>> {
  const g = await startTestRouter({
    pools: pools.map((p) => ({ name: p.name, servedModelName: 'sim-model', endpoints: p.sims.map((s) => s.url), routing: kvEvents(p.replay) })),
    deployments: pools.map((p) => ({ id: p.name, model: p.name, targets: [{ pool: p.name }] })),
    random: createRng(11),
  });
  cleanups.push(() => g.close());
  return g;
}

const conversation = (topic: string): object[] => [
  { role: 'system', content: `You are the ${topic} desk of a hardware store. Keep answers short, name the aisle. `.repeat(8) },
  { role: 'user', content: `Where do I find ${topic}?` },
];

function viaRouter(g: TestRouter<RunningRouter>, model: string, messages: object[]): Promise<RawResponse> {
  return rawRequest(`${g.router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model, messages, max_tokens: 2 } });
}

/** A request straight to one replica, around the router (its estimate never hears of it). */
async function direct(s: SimServer, messages: object[]): Promise<void> {
  const res = await rawRequest(`${s.url}/v1/chat/completions`, { body: { model: 'sim-model', messages, max_tokens: 2 } });
  expect(res.status).toBe(200);
}

const metric = async (g: TestRouter<RunningRouter>, name: string, labels: Record<string, string> = {}): Promise<number> => metricSum(await adminMetrics(g), name, labels);

/** ZMQ PUB drops what it sends before a subscriber is connected: wait for the router's subscriptions first. */
const subscribed = (g: TestRouter<RunningRouter>, replicas: number): Promise<void> =>
  waitFor(async () => (await metric(g, 'modelgate_kv_events_connected_replicas')) === replicas, 'the router subscribed', 10_000);

describe('KV-event prefix routing', () => {
  it('sends a prompt to the replica whose engine holds it, though the router never sent it there; a killed publisher falls back to the estimate', async () => {
    const a = await sim(1, 'a', true);
    const b = await sim(2, 'b', true);
    const g = await router([{ name: 'chat', sims: [a, b], replay: true }]);
    await subscribed(g, 2);
    const paint = conversation('paint');
    await direct(b, paint);
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_replicas', { pool: 'chat', state: 'complete' })) === 1, 'b reported complete');

    for (let i = 0; i < 6; i++) {
      const res = await viaRouter(g, 'chat', paint);
      expect(res.status).toBe(200);
      expect(res.headers['x-sim-replica']).toBe('b');
    }
    expect(await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'events', result: 'hit' })).toBeGreaterThan(6 * 5);
    expect(await metric(g, 'modelgate_kv_events_received_total', { pool: 'chat', type: 'block_stored' })).toBeGreaterThan(0);

    // b's publisher dies (its HTTP side serves on): after staleAfterMs b is routed by the estimate
    b.kvEvents?.close();
    // (a never published: it has been unknown from the start)
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_replicas', { pool: 'chat', state: 'unknown' })) === 2, 'b stale');
    const glue = conversation('glue');
    await direct(b, glue); // b holds it, but nothing tells the router any more
    const before = await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'estimate' });
    const res = await viaRouter(g, 'chat', glue);
    expect(res.status).toBe(200);
    const after = await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'estimate' });
    const predictedHits = await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'chat', source: 'estimate', result: 'hit' });
    expect(after - before).toBeGreaterThan(5); // the estimate answered, for every block of the prompt
    // and it could not know b holds the prompt: whichever replica got it, the estimate predicted no hit
    expect(predictedHits).toBe(0);
  });

  it('a lost batch is a gap: a replay fills it; without a replay socket the replica is routed by the estimate until its cache is cleared', async () => {
    const withReplay = await sim(3, 'r', true);
    const noReplay = await sim(4, 'n', false);
    const g = await router([
      { name: 'replayed', sims: [withReplay], replay: true },
      { name: 'plain', sims: [noReplay], replay: false },
    ]);
    await subscribed(g, 2);
    await direct(withReplay, conversation('nails'));
    await direct(noReplay, conversation('nails'));
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_replicas', { state: 'complete' })) === 2, 'both complete');

    withReplay.kvEvents?.loseNext();
    noReplay.kvEvents?.loseNext();
    for (const topic of ['screws', 'bolts']) {
      await direct(withReplay, conversation(topic));
      await direct(noReplay, conversation(topic));
    }
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_gaps_total')) === 2, 'two gaps');
    expect(await metric(g, 'modelgate_kv_events_gaps_total', { pool: 'replayed', recovered: 'true' })).toBe(1);
    expect(await metric(g, 'modelgate_kv_events_gaps_total', { pool: 'plain', recovered: 'false' })).toBe(1);
    expect(await metric(g, 'modelgate_kv_events_replicas', { pool: 'replayed', state: 'complete' })).toBe(1);
    expect(await metric(g, 'modelgate_kv_events_replicas', { pool: 'plain', state: 'unknown' })).toBe(1);

    // the picks say the same: 'screws' (stored in the lost batch) is an events hit on the replayed replica
    await viaRouter(g, 'replayed', conversation('screws'));
    expect(await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'replayed', source: 'events', result: 'hit' })).toBeGreaterThan(5);
    await viaRouter(g, 'plain', conversation('screws'));
    expect(await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'plain', source: 'events' })).toBe(0);

    // vLLM's POST /reset_prefix_cache: AllBlocksCleared, after which the index is exact again
    expect((await rawRequest(`${noReplay.url}/reset_prefix_cache`, { method: 'POST' })).status).toBe(200);
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_replicas', { pool: 'plain', state: 'complete' })) === 1, 'plain complete after the clear');
    expect(await metric(g, 'modelgate_kv_events_received_total', { pool: 'plain', type: 'all_blocks_cleared' })).toBe(1);
  });

  it('a router joining a running engine whose replay holds a bad batch routes it by the estimate, not as complete (regression: the join said complete)', async () => {
    const s = await sim(7, 's', true);
    // published before the router listens: the router's join replays them from 0, batch 1 corrupt
    await direct(s, conversation('saws'));
    s.kvEvents?.corruptNext();
    await direct(s, conversation('drills'));
    await direct(s, conversation('hammers'));
    const g = await router([{ name: 'joined', sims: [s], replay: true }]);
    await subscribed(g, 1);
    await direct(s, conversation('pliers')); // the first batch the router hears, past 0: a join
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_bad_payloads_total', { pool: 'joined' })) === 1, 'the bad batch seen in the replay');
    await waitFor(async () => (await metric(g, 'modelgate_kv_events_received_total', { pool: 'joined', type: 'block_stored' })) > 0, 'the replay applied');
    expect(await metric(g, 'modelgate_kv_events_replicas', { pool: 'joined', state: 'unknown' })).toBe(1);
    await viaRouter(g, 'joined', conversation('saws'));
    expect(await metric(g, 'modelgate_prefix_predicted_blocks_total', { pool: 'joined', source: 'events' })).toBe(0);
  });

  it('works in `modelgate serve --config FILE`, as users start it: an OpenAI client is routed to the replica its engine says holds the prompt', async () => {
    const a = await sim(5, 'a', false);
    const b = await sim(6, 'b', false);
    const dir = await mkdtemp(join(tmpdir(), 'modelgate-kv-events-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
    const config = {
      server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'chat', servedModelName: 'sim-model', endpoints: [a.url, b.url], routing: kvEvents(false) }],
      deployments: [{ id: 'chat', model: 'chat', targets: [{ pool: 'chat' }] }],
    };
    await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
    const served = await serveRouter(join(dir, 'modelgate.yaml'));
    cleanups.push(() => served.stop());
    const servedMetric = async (name: string, labels: Record<string, string> = {}): Promise<number> => metricSum((await rawRequest(`${served.admin}/metrics`)).body, name, labels);
    await waitFor(async () => (await servedMetric('modelgate_kv_events_connected_replicas')) === 2, 'the served router subscribed', 10_000);

    const tools = conversation('tools');
    await direct(a, tools);
    await waitFor(async () => (await servedMetric('modelgate_kv_events_replicas', { state: 'complete' })) === 1, 'a reported complete', 10_000);
    const client = new OpenAI({ baseURL: `${served.api}/v1`, apiKey: KEY, maxRetries: 0 });
    for (let i = 0; i < 4; i++) {
      const { response } = await client.chat.completions.create({ model: 'chat', messages: tools as OpenAI.ChatCompletionMessageParam[], max_tokens: 2 }).withResponse();
      expect(response.headers.get('x-sim-replica')).toBe('a');
    }
  });
});
