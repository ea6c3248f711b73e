/**
 * LoRA-aware routing end to end: `modelgate serve --config FILE` (as users start it) in front of
 * simulator replicas that serve adapters on one base model, driven by the official `openai` SDK.
 * Which replica answered is read from the simulator's `x-sim-replica` header.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim } from '../helpers/sim.js';
import { replyWith, startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

const KEY = 'sk-lora-0123456789';
const BASE = 'meta/llama';

let dir: string;
let fleet: SimServer[];
let bare: SimServer;
/** Two replicas of one pool, only the first of which knows adapter p. */
let partial: SimServer[];
let refusing: RecordingUpstream;
/** Two replicas that both hold adapter agent-v1 and answer the Responses API. */
let agents: SimServer[];
let router: ServedRouter;
let client: OpenAI;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-lora-'));
  // every replica knows adapters a, b and c, with one slot each: a request for a non-resident adapter waits for its load
  fleet = await Promise.all([0, 1, 2].map((i) => startTestSim({ model: [BASE], name: `lora-${i}`, loraAdapters: ['a', 'b', 'c'], maxLora: 1, loraLoadMs: 50 })));
  bare = await startTestSim({ model: [BASE], name: 'bare', loraLoadMs: 10 });
  partial = await Promise.all([startTestSim({ model: [BASE], name: 'has-p', loraAdapters: ['p'] }), startTestSim({ model: [BASE], name: 'lacks-p' })]);
  // an engine that refuses every adapter load, as vLLM does for a path it cannot find
  agents = await Promise.all([0, 1].map((i) => startTestSim({ model: [BASE], name: `agents-${i}`, loraAdapters: ['agent-v1'] })));
  refusing = await startUpstream(replyWith(404, JSON.stringify({ object: 'error', message: 'No adapter found for /adapters/ghost', type: 'NotFoundError', param: null, code: 404 })));
  await writeFile(join(dir, 'keys.yaml'), `- { name: tester, key: ${KEY} }\n`);
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    auth: { keysFile: 'keys.yaml' },
    routing: { engineMetrics: { intervalMs: 100 } },
    pools: [
      { name: 'llama', servedModelName: BASE, endpoints: fleet.map((s) => s.url) },
      { name: 'llama-dynamic', servedModelName: BASE, endpoints: [bare.url], routing: { lora: { loadOnDemand: true } } },
      { name: 'llama-refusing', servedModelName: BASE, endpoints: [refusing.url], routing: { lora: { loadOnDemand: true } } },
      { name: 'llama-partial', servedModelName: BASE, endpoints: partial.map((s) => s.url) },
      { name: 'llama-agents', servedModelName: BASE, capabilities: ['responses'], endpoints: agents.map((s) => s.url), routing: { lora: { loadOnDemand: true } } },
    ],
    deployments: [
      { id: 'llama', model: 'llama', targets: [{ pool: 'llama' }] },
      { id: 'support-bot', model: 'support-bot', targets: [{ pool: 'llama' }], adapter: { name: 'a' } },
      { id: 'legal-bot', model: 'legal-bot', targets: [{ pool: 'llama' }], adapter: { name: 'b' } },
      { id: 'sql-bot', model: 'sql-bot', targets: [{ pool: 'llama' }], adapter: { name: 'c' } },
      { id: 'fresh-bot', model: 'fresh-bot', targets: [{ pool: 'llama-dynamic' }], adapter: { name: 'fresh', path: '/adapters/fresh' } },
      { id: 'ghost-bot', model: 'ghost-bot', targets: [{ pool: 'llama-refusing' }], adapter: { name: 'ghost', path: '/adapters/ghost' } },
      { id: 'p-bot', model: 'p-bot', targets: [{ pool: 'llama-partial' }], adapter: { name: 'p' } },
      { id: 'agent-bot', model: 'agent-bot', targets: [{ pool: 'llama-agents' }], adapter: { name: 'agent-v1' } },
    ],
  };
  await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
  router = await serveRouter(join(dir, 'modelgate.yaml'));
  client = new OpenAI({ apiKey: KEY, baseURL: `${router.api}/v1`, maxRetries: 0 });
}, 30_000);

afterAll(async () => {
  await router?.stop();
  await Promise.all([...(fleet ?? []), ...(bare ? [bare] : []), ...(partial ?? []), ...(agents ?? [])].map((s) => s.close()));
  await refusing?.close();
  await rm(dir, { recursive: true, force: true });
});

async function ask(model: string): Promise<{ replica: string | null; model: string }> {
  const { data, response } = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }).withResponse();
  return { replica: response.headers.get('x-sim-replica'), model: data.model };
}

const metrics = async (): Promise<string> => (await fetch(`${router.admin}/metrics`)).text();

describe('LoRA adapters through the router', () => {
  it('lists each adapter deployment with its base model as parent, like vLLM', async () => {
    const models = await client.models.list();
    const byId = new Map(models.data.map((m) => [m.id, m as unknown as Record<string, unknown>]));
    expect(byId.get('support-bot')).toMatchObject({ object: 'model', owned_by: 'modelgate', root: 'a', parent: 'llama' });
    expect(byId.get('fresh-bot')).toMatchObject({ root: 'fresh', parent: BASE }); // no base deployment on its pool: the served base model
    expect(byId.get('llama')).not.toHaveProperty('parent');
    expect(await client.models.retrieve('legal-bot')).toMatchObject({ root: 'b', parent: 'llama' });
  });

  it('gives every adapter a replica of its own and sends its requests back there', async () => {
    const homes = new Map<string, Set<string | null>>();
    for (let round = 0; round < 3; round++) {
      for (const model of ['support-bot', 'legal-bot', 'sql-bot']) {
        const answer = await ask(model);
        expect(answer.model).toBe({ 'support-bot': 'a', 'legal-bot': 'b', 'sql-bot': 'c' }[model]); // the engine got the adapter's name
        if (!homes.has(model)) homes.set(model, new Set());
        homes.get(model)?.add(answer.replica);
      }
    }
    expect([...homes.values()].map((replicas) => replicas.size)).toEqual([1, 1, 1]);
    expect(new Set([...homes.values()].map((replicas) => [...replicas][0])).size).toBe(3);
    const text = await metrics();
    expect(metricSum(text, 'modelgate_lora_placements_total', { pool: 'llama', placement: 'free_slot' })).toBe(3);
    expect(metricSum(text, 'modelgate_lora_placements_total', { pool: 'llama', placement: 'held' })).toBe(6);
    // one adapter load at most per replica: none of them had to swap adapters back and forth
    expect(fleet.reduce((n, s) => n + s.lora.stats().loads, 0)).toBeLessThanOrEqual(3);
  });

  it('still serves the base model from the same pool', async () => {
    expect((await ask('llama')).model).toBe(BASE);
  });

  it('loads an adapter on demand on a replica that lacks it, once', async () => {
    expect(bare.lora.stats().registered).toEqual([]);
    expect((await ask('fresh-bot')).model).toBe('fresh');
    expect((await ask('fresh-bot')).model).toBe('fresh');
    expect(bare.lora.stats().registered).toEqual(['fresh']);
    expect(metricSum(await metrics(), 'modelgate_lora_adapter_loads_total', { pool: 'llama-dynamic', result: 'loaded' })).toBe(1);
  });

  it('sends an adapter’s requests to the replica that has it, however many land first on one that answers 404 for it', async () => {
    const replicas: Array<string | null> = [];
    for (let i = 0; i < 12; i++) replicas.push((await ask('p-bot')).replica);
    expect(new Set(replicas)).toEqual(new Set(['has-p'])); // every one answered (ask throws on a 404 or 503)
  });

  it('loads it again when the engine lost it (an unload, a restart): the 404 is not the client’s, the router forgets it had it', async () => {
    expect((await ask('fresh-bot')).model).toBe('fresh'); // loaded (the test before, or now)
    const loaded = metricSum(await metrics(), 'modelgate_lora_adapter_loads_total', { pool: 'llama-dynamic', result: 'loaded' });
    const unload = await fetch(`${bare.url}/v1/unload_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'fresh' }) });
    expect(unload.status).toBe(200);
    expect(bare.lora.stats().registered).toEqual([]);
    // the engine answers 404 for it; the router loads it again on that replica and the request is answered
    expect((await ask('fresh-bot')).model).toBe('fresh');
    expect(bare.lora.stats().registered).toEqual(['fresh']);
    expect(metricSum(await metrics(), 'modelgate_lora_adapter_loads_total', { pool: 'llama-dynamic', result: 'loaded' })).toBe(loaded + 1);
    expect((await ask('fresh-bot')).model).toBe('fresh');
  });

  it("answers a failed load with a clear 502 adapter_load_failed, the engine's reason in the message", async () => {
    const err = (await client.chat.completions.create({ model: 'ghost-bot', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(502);
    expect(err.code).toBe('adapter_load_failed');
    expect(err.type).toBe('server_error');
    expect(err.message).toContain('Could not load the LoRA adapter `ghost` on a replica: the engine answered 404: No adapter found for /adapters/ghost');
    expect(metricSum(await metrics(), 'modelgate_lora_adapter_loads_total', { pool: 'llama-refusing', result: 'failed' })).toBe(1);
    // the load was the only call: the request itself never reached the engine
    expect(refusing.requests.map((r) => [r.method, r.url, JSON.parse(r.body) as unknown])).toEqual([['POST', '/v1/load_lora_adapter', { lora_name: 'ghost', lora_path: '/adapters/ghost' }]]);
  });

  it("a previous_response_id that names the adapter is the client's unknown id: the engine's 404 is passed on, no other replica is tried", async () => {
    for (const id of ['agent-v1', 'The model `agent-v1` does not exist.']) {
      const err = (await client.responses.create({ model: 'agent-bot', input: 'hi', previous_response_id: id }).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect(err.status).toBe(404);
      expect(err.message).toContain(`Response with id '${id}' not found.`);
    }
    const text = await metrics();
    // one engine request for each: before, each 404 was taken for the replica lacking the adapter, so
    // each request went to both replicas (a load first on each) and was answered 503 no_ready_replica
    expect(metricSum(text, 'modelgate_upstream_attempts_total', { pool: 'llama-agents' })).toBe(2);
    // a conversation on the adapter still continues on its replica
    const first = await client.responses.create({ model: 'agent-bot', input: 'hi' }).withResponse();
    const next = await client.responses.create({ model: 'agent-bot', input: 'and?', previous_response_id: first.data.id }).withResponse();
    expect(next.response.headers.get('x-sim-replica')).toBe(first.response.headers.get('x-sim-replica'));
  });
});
