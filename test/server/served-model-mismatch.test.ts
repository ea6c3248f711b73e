/**
 * A pool whose `servedModelName` its engines do not serve (a case slip: the pool says `Llama-3-8B`, vLLM
 * was started with `--served-model-name llama-3-8b`), end to end: `modelgate serve --config FILE` (as
 * users start it) in front of simulator replicas started with their own `--model`, driven by the
 * official `openai` SDK and raw requests. Every request used to get the engine's 404 "The model
 * `Llama-3-8B` does not exist.", naming a model the client never sent, and the operator saw only an
 * `upstream_404` count.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim, waitFor } from '../helpers/sim.js';

const KEY = 'sk-served-0123456789';
/** What the engines serve, and the pool's slip of it. */
const SERVED = 'llama-3-8b';
const SLIP = 'Llama-3-8B';

let dir: string;
/** Two replicas serving `llama-3-8b`. */
let lower: SimServer[];
/** A replica already restarted with the pool's name (a rolling update half done). */
let renamed: SimServer;
/** The only replica of a pool that is mended mid-test: restarted on its port with the pool's name. */
let mendable: SimServer;
let router: ServedRouter;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-served-'));
  lower = await Promise.all([0, 1].map((i) => startTestSim({ model: [SERVED], name: `lower-${i}` })));
  renamed = await startTestSim({ model: [SLIP], name: 'renamed' });
  mendable = await startTestSim({ model: [SERVED], name: 'mendable' });
  await writeFile(join(dir, 'keys.yaml'), `- { name: tester, key: ${KEY} }\n`);
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    auth: { keysFile: 'keys.yaml' },
    pools: [
      // every replica serves another name than the pool's
      { name: 'misnamed', servedModelName: SLIP, capabilities: ['chat', 'messages'], endpoints: lower.map((s) => s.url) },
      // one replica does, one does not
      { name: 'rolling', servedModelName: SLIP, endpoints: [lower[0]?.url, renamed.url] },
      // the same replicas, the name right
      { name: 'right', servedModelName: SERVED, endpoints: lower.map((s) => s.url) },
      // mended mid-test
      { name: 'mended', servedModelName: SLIP, endpoints: [mendable.url] },
    ],
    deployments: [
      { id: 'llama', model: 'llama', targets: [{ pool: 'misnamed' }] },
      { id: 'llama-rolling', model: 'llama-rolling', targets: [{ pool: 'rolling' }] },
      { id: 'llama-right', model: 'llama-right', targets: [{ pool: 'right' }] },
      { id: 'llama-saved', model: 'llama-saved', targets: [{ pool: 'misnamed' }], fallbacks: ['llama-right'] },
      { id: 'llama-mended', model: 'llama-mended', targets: [{ pool: 'mended' }] },
    ],
  };
  await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
  router = await serveRouter(join(dir, 'modelgate.yaml'));
}, 30_000);

afterAll(async () => {
  await router?.stop();
  await Promise.all([...(lower ?? []), ...(renamed ? [renamed] : []), ...(mendable ? [mendable] : [])].map((s) => s.close()));
  await rm(dir, { recursive: true, force: true });
});

const chat = (model: string, stream = false): Promise<Awaited<ReturnType<typeof rawRequest>>> =>
  rawRequest(`${router.api}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: { model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, stream },
  });

const metrics = async (): Promise<string> => (await rawRequest(`${router.admin}/metrics`)).body;

/** The warning lines about a replica without its pool's model, for `pool`. */
const warnings = (pool: string): Array<Record<string, unknown>> => router.logs.filter((l) => l.level === 40 && l.pool === pool && l.servedModelName !== undefined);

describe('a pool whose servedModelName its engines do not serve', () => {
  it('answers 502 served_model_mismatch in the OpenAI envelope, naming neither name, with x-should-retry: false, after trying every replica', async () => {
    const before = metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'misnamed', outcome: 'served_model_mismatch' });
    for (const stream of [false, true]) {
      const res = await chat('llama', stream);
      expect(res.status).toBe(502);
      expect(res.headers['x-should-retry']).toBe('false');
      const body = JSON.parse(res.body) as { error: { message: string; type: string; param: unknown; code: string } };
      expect(body.error).toEqual({ message: expect.stringContaining('misconfigured'), type: 'server_error', param: null, code: 'served_model_mismatch' });
      expect(res.body.toLowerCase()).not.toContain(SERVED);
    }
    // both replicas tried, each request
    const after = metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'misnamed', outcome: 'served_model_mismatch' });
    expect(after - before).toBe(4);
    expect(metricSum(await metrics(), 'modelgate_retries_total', { pool: 'misnamed', reason: 'served_model_mismatch' })).toBeGreaterThanOrEqual(2);
  });

  it("answers Anthropic's envelope on /v1/messages", async () => {
    const res = await rawRequest(`${router.api}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': KEY, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: { model: 'llama', max_tokens: 4, messages: [{ role: 'user', content: 'hello' }] },
    });
    expect(res.status).toBe(502);
    expect(JSON.parse(res.body)).toEqual({ type: 'error', error: { type: 'api_error', message: expect.stringContaining('misconfigured') } });
    expect(res.body.toLowerCase()).not.toContain(SERVED);
  });

  it('the official SDK does not retry it: two attempts per call (one per replica), not six', async () => {
    const client = new OpenAI({ apiKey: KEY, baseURL: `${router.api}/v1` }); // the default maxRetries: 2
    const before = metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'misnamed' });
    const err = await client.chat.completions.create({ model: 'llama', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('served_model_mismatch');
    expect(metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'misnamed' }) - before).toBe(2);
  });

  it('the operator gets one warning per replica however many requests, naming the pool, replica, its servedModelName and what the engine said', async () => {
    await Promise.all(Array.from({ length: 8 }, () => chat('llama')));
    const lines = warnings('misnamed');
    expect(lines.map((l) => l.endpoint).sort()).toEqual(lower.map((s) => s.url).sort());
    for (const line of lines) {
      expect(line.servedModelName).toBe(SLIP);
      expect(String(line.said)).toContain(SLIP);
      expect(String(line.msg)).toContain('servedModelName');
    }
    const access = router.logs.filter((l) => l.model === 'llama' && l.failure !== undefined);
    expect(access.length).toBeGreaterThan(0);
    expect(access.every((l) => l.failure === 'served_model_mismatch')).toBe(true);
  });

  it('does not take the replicas out: the next requests are still told the deployment is misconfigured, not no_ready_replica', async () => {
    for (let i = 0; i < 12; i++) {
      const res = await chat('llama');
      expect(JSON.parse(res.body)).toMatchObject({ error: { code: 'served_model_mismatch' } });
    }
  });

  it('moves on to a fallback deployment that serves the model', async () => {
    const res = await chat('llama-saved');
    expect(res.status).toBe(200);
  });

  it('in a rolling update, a replica serving the name answers every request', async () => {
    for (let i = 0; i < 6; i++) {
      const res = await chat('llama-rolling');
      expect(res.status).toBe(200);
      expect(res.headers['x-sim-replica']).toBe('renamed');
    }
  });

  it('a pool with the right name is unaffected: 200 from the same replicas, no warning, no mismatch counted', async () => {
    for (let i = 0; i < 4; i++) expect((await chat('llama-right')).status).toBe(200);
    expect(warnings('right')).toEqual([]);
    expect(metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'right', outcome: 'served_model_mismatch' })).toBe(0);
    expect(metricSum(await metrics(), 'modelgate_upstream_attempts_total', { pool: 'right', outcome: 'committed' })).toBeGreaterThanOrEqual(4);
  });

  it("the status page's JSON shows each pool whose replicas said so, from which and when, and a mended pool's clears once it answers", async () => {
    type Mismatch = { seenAt: string; replica: string; replicas: string[] } | null;
    const pools = async (): Promise<Map<string, Mismatch>> => {
      const status = JSON.parse((await rawRequest(`${router.admin}/status.json`)).body) as { pools: Array<{ name: string; servedModelMismatch: Mismatch }> };
      return new Map(status.pools.map((p) => [p.name, p.servedModelMismatch]));
    };
    const before = Date.now();
    expect((await chat('llama-mended')).status).toBe(502);
    expect((await chat('llama')).status).toBe(502); // both replicas tried
    const seen = await pools();
    expect(seen.get('mended')).toEqual({ seenAt: expect.any(String), replica: mendable.url, replicas: [mendable.url] });
    expect(Date.parse(seen.get('mended')?.seenAt ?? '')).toBeGreaterThanOrEqual(before - 1_000);
    expect(seen.get('misnamed')?.replicas).toEqual(lower.map((s) => s.url).sort());
    expect(seen.get('right')).toBeNull();

    // the engine is restarted with the pool's name on its address: the pool's next answer clears it
    const port = Number(new URL(mendable.url).port);
    await mendable.close();
    mendable = await startTestSim({ model: [SLIP], name: 'mended', port });
    await waitFor(async () => (await chat('llama-mended')).status === 200, 'the mended replica to answer');
    const after = await pools();
    expect(after.get('mended')).toBeNull();
    expect(after.get('misnamed')?.replicas).toHaveLength(2); // another pool's answer clears nothing of this one
  });
});
