/**
 * The Responses API's records shared through Redis (`limits.redis`): two router processes
 * (`modelgate serve`, as users start it) in front of two replicas, driven with the official openai
 * client. A response made through one router is pinned to its replica and refused to other keys by
 * the other router too, and by a router started after it was made; with Redis gone, a router that
 * does not know an id passes it on and counts it `unchecked`.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Redis } from 'ioredis';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { type SimServer } from '../../src/sim/server.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { metricSum } from '../helpers/router.js';
import { serveRouter, type ServedRouter } from '../helpers/serve.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

const TEAM_A = 'sk-team-a-0123456789';
const TEAM_B = 'sk-team-b-0123456789';

let dir: string;
let redis: RedisServer;
let sims: SimServer[];
const routers: ServedRouter[] = [];
/** An engine held by hand (pool `hand`): a stream's first event at once, its last when the test says. */
let hand: RecordingUpstream;
let finishStream: () => void = () => undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'modelgate-shared-responses-'));
  redis = await startRedisServer();
  sims = await Promise.all([1, 2].map((n) => startTestSim({ model: ['meta/llama'], name: `replica-${n}`, ttftMs: 0, itlMs: 0 })));
  let answers = 0;
  hand = await startUpstream((req, res) => {
    const response = (status: string) => ({ id: `resp_hand${++answers}`, object: 'response', status, model: 'hand/model', output: [] });
    if (!(JSON.parse(req.body) as { stream?: boolean }).stream) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(response('completed')));
      return;
    }
    const started = response('in_progress');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: response.created\ndata: ${JSON.stringify({ type: 'response.created', sequence_number: 0, response: started })}\n\n`);
    finishStream = () => res.end(`event: response.completed\ndata: ${JSON.stringify({ type: 'response.completed', sequence_number: 1, response: { ...started, status: 'completed' } })}\n\n`);
  });
  await writeFile(join(dir, 'keys.yaml'), `- { name: team-a, key: ${TEAM_A} }\n- { name: team-b, key: ${TEAM_B} }\n`);
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    log: { level: 'info' },
    auth: { keysFile: 'keys.yaml' },
    pools: [
      { name: 'llama', servedModelName: 'meta/llama', capabilities: ['responses'], endpoints: sims.map((s) => s.url) },
      { name: 'hand', servedModelName: 'hand/model', capabilities: ['responses'], endpoints: [hand.url] },
    ],
    deployments: [
      { id: 'llama-prod', model: 'llama', targets: [{ pool: 'llama' }] },
      { id: 'hand', model: 'hand', targets: [{ pool: 'hand' }] },
    ],
    // raised from the 50 ms default, as in the shared-limits suite: a loaded 2-core CI machine's Redis is sometimes slower
    limits: { redis: { url: redis.url, timeoutMs: 1000 } },
  };
  await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
  for (let i = 0; i < 2; i++) routers.push(await serveRouter(join(dir, 'modelgate.yaml')));
}, 60_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  await Promise.all((sims ?? []).map((s) => s.close()));
  await hand?.close();
  await redis?.stop();
  await rm(dir, { recursive: true, force: true });
});

const client = (router: ServedRouter, key: string): OpenAI => new OpenAI({ apiKey: key, baseURL: `${router.api}/v1`, maxRetries: 0 });

/** A Responses API call through `router` as `key`: the response's id and the replica that answered. */
async function respond(router: ServedRouter, key: string, params: Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, 'model'>): Promise<{ id: string; replica: string | null }> {
  const { data, response } = await client(router, key)
    .responses.create({ model: 'llama', max_output_tokens: 3, ...params })
    .withResponse();
  return { id: data.id, replica: response.headers.get('x-sim-replica') };
}

async function outcomes(router: ServedRouter, outcome: string): Promise<number> {
  return metricSum(await (await fetch(`${router.admin}/metrics`)).text(), 'modelgate_previous_response_requests_total', { outcome });
}

async function redisErrors(router: ServedRouter, op: string): Promise<number> {
  return metricSum(await (await fetch(`${router.admin}/metrics`)).text(), 'modelgate_limits_redis_errors_total', { op });
}

async function refused(router: ServedRouter, key: string, previous: string): Promise<unknown> {
  return client(router, key)
    .responses.create({ model: 'llama', input: 'what did they say?', previous_response_id: previous })
    .catch((e: unknown) => e);
}

describe('Responses API records shared by every router through Redis', () => {
  it('a conversation that alternates between the routers stays on the replica that holds it', async () => {
    const first = await respond(routers[0]!, TEAM_A, { input: 'Start a conversation' });
    expect(first.replica).toMatch(/^replica-/);
    let previous = first.id;
    // each turn is sent the moment the answer before it came, through the other router: the answer's
    // last bytes waited for its record in Redis (without that, some turn missed it on a busy machine)
    const turns = 60;
    for (let turn = 0; turn < turns; turn++) {
      const next = await respond(routers[(turn + 1) % 2]!, TEAM_A, { input: `turn ${turn}`, previous_response_id: previous });
      expect({ turn, replica: next.replica }).toEqual({ turn, replica: first.replica });
      previous = next.id;
    }
    // the even turns went through the second router, which never saw the ids it was asked about
    expect(await outcomes(routers[1]!, 'pinned')).toBe(turns / 2);
    expect(await outcomes(routers[1]!, 'unknown')).toBe(0);
  });

  it("an answer's last bytes wait for its record: with Redis holding writes back, the follow-up through the other router still finds it", async () => {
    const admin = new Redis(redis.url, { lazyConnect: true });
    try {
      await admin.connect();
      // Redis serves reads and holds every write for 300 ms: the record's write included (the limit is 1000 ms here)
      await admin.call('CLIENT', 'PAUSE', '300', 'WRITE');
      const [pinned, unknown] = [await outcomes(routers[1]!, 'pinned'), await outcomes(routers[1]!, 'unknown')];
      const first = await respond(routers[0]!, TEAM_A, { input: 'written late' });
      const next = await respond(routers[1]!, TEAM_A, { input: 'and now?', previous_response_id: first.id });
      expect(next.replica).toBe(first.replica);
      // found, not routed by chance to the same replica
      expect([await outcomes(routers[1]!, 'pinned'), await outcomes(routers[1]!, 'unknown')]).toEqual([pinned + 1, unknown]);
    } finally {
      await admin.call('CLIENT', 'UNPAUSE').catch(() => undefined);
      admin.disconnect();
    }
  });

  it("another key cannot continue a response made through the other router: the router's 404, as for an id that does not exist", async () => {
    const mine = await respond(routers[0]!, TEAM_A, { input: 'a private conversation' });
    const err = await refused(routers[1]!, TEAM_B, mine.id);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).param).toBe('previous_response_id');
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).message).toContain(`Response with id '${mine.id}' not found.`);
    expect(await outcomes(routers[1]!, 'other_key')).toBe(1);
  });

  it('a router started after the response was made knows it too: pinned for its key, refused to the other', async () => {
    const mine = await respond(routers[0]!, TEAM_A, { input: 'made before the new router started' });
    const late = await serveRouter(join(dir, 'modelgate.yaml'));
    routers.push(late);
    expect(await refused(late, TEAM_B, mine.id)).toBeInstanceOf(OpenAI.NotFoundError);
    expect((await respond(late, TEAM_A, { input: 'go on', previous_response_id: mine.id })).replica).toBe(mine.replica);
    expect(await outcomes(late, 'other_key')).toBe(1);
    expect(await outcomes(late, 'pinned')).toBe(1);
  });

  it('Redis holds each record under a hash of the id (never the id itself), expiring after responsesTtlHours (168 by default)', async () => {
    const mine = await respond(routers[0]!, TEAM_A, { input: 'what Redis keeps' });
    const reader = new Redis(redis.url, { lazyConnect: true });
    try {
      await reader.connect();
      const keys = await reader.keys('modelgate:resp:*');
      expect(keys.filter((k) => k.includes(mine.id))).toEqual([]);
      const values = await Promise.all(keys.map((k) => reader.get(k)));
      expect(values.filter((v) => v?.includes(mine.id))).toEqual([]);
      const key = `modelgate:resp:${createHash('sha256').update(mine.id).digest('base64url')}`;
      expect(keys).toContain(key);
      const [pool, endpoint, owner] = JSON.parse((await reader.get(key)) ?? 'null') as [string, string, string];
      expect({ pool, owner }).toEqual({ pool: 'llama', owner: 'team-a' });
      expect(sims.map((s) => s.url)).toContain(endpoint);
      const ttl = await reader.ttl(key);
      expect(ttl).toBeGreaterThan(167 * 3600);
      expect(ttl).toBeLessThanOrEqual(168 * 3600);
    } finally {
      reader.disconnect();
    }
  });

  it('a stream begun while Redis was away is recorded once it is whole: the follow-up through the other router finds it', async () => {
    const before = { pinned: await outcomes(routers[1]!, 'pinned'), failed: await redisErrors(routers[0]!, 'record') };
    await redis.stop();
    const stream = await client(routers[0]!, TEAM_A).responses.create({ model: 'hand', input: 'begun without Redis', stream: true });
    const events = stream[Symbol.asyncIterator]();
    const created = await events.next(); // the router read the id and could not write its record: no connection
    const id = (created.value as OpenAI.Responses.ResponseCreatedEvent).response.id;
    expect(await redisErrors(routers[0]!, 'record')).toBe(before.failed + 1);
    await redis.restart();
    // a router is back on Redis once it can look up an id it does not hold (`unknown`, not `unchecked`)
    for (const router of routers.slice(0, 2)) {
      const unknown = await outcomes(router, 'unknown');
      await waitFor(
        async () => {
          await client(router, TEAM_A).responses.create({ model: 'hand', input: 'probe', previous_response_id: 'resp_nobody' });
          return (await outcomes(router, 'unknown')) > unknown;
        },
        'the routers back on Redis',
        15_000,
      );
    }
    finishStream();
    for (let next = await events.next(); !next.done; next = await events.next());
    await client(routers[1]!, TEAM_A).responses.create({ model: 'hand', input: 'and then?', previous_response_id: id });
    expect(await outcomes(routers[1]!, 'pinned')).toBe(before.pinned + 1);
  }, 30_000);

  it('with Redis gone: a router that made the id still refuses it to another key; one that does not know it passes it on, counted unchecked', async () => {
    const mine = await respond(routers[0]!, TEAM_A, { input: 'made just before Redis went away' });
    await redis.stop();
    expect(await refused(routers[0]!, TEAM_B, mine.id)).toBeInstanceOf(OpenAI.NotFoundError);
    // the second router cannot check it: the request goes on, routed as usual, and the engine answers for it
    // (the simulator, like vLLM, holds it only on the replica that made it: 404 from the other one)
    const before = await outcomes(routers[1]!, 'unchecked');
    await refused(routers[1]!, TEAM_B, mine.id);
    expect(await outcomes(routers[1]!, 'unchecked')).toBe(before + 1);
  });
});
