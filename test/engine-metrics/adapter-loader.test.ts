/** AdapterLoader on fake time with a scripted engine: bounds, one load per replica and adapter, vLLM's answers, deadlines. */
import { describe, expect, it } from '@jest/globals';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { isAbortError } from '../../src/core/clock.js';
import { RouterError } from '../../src/core/errors.js';
import { type Endpoint, type PoolSpec, type RoutingSettings } from '../../src/core/types.js';
import { AdapterLoader, type AdapterLoadResult } from '../../src/engine-metrics/adapter-loader.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

const endpoint = (id: string): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}.local:8000`), weight: 1 });

function pool(adapter: string, lora: Partial<RoutingSettings['lora']> = {}, backendKey?: string): PoolSpec {
  return {
    name: 'p',
    engine: 'vllm',
    servedModelName: adapter,
    capabilities: ['chat'],
    resilience: RESILIENCE_DEFAULTS,
    routing: { ...ROUTING_DEFAULTS, lora: { ...ROUTING_DEFAULTS.lora, loadOnDemand: true, ...lora } },
    adapter: { name: adapter, path: `/adapters/${adapter}`, baseModel: 'base' },
    ...(backendKey ? { backendKey } : {}),
  };
}

/** An engine whose answers the test gives, one pending POST at a time. */
function scripted() {
  const time = new FakeTime();
  const posts: Array<{ url: string; body: unknown; headers: Record<string, string>; answer: (status: number, text: string) => void; fail: (err: Error) => void }> = [];
  const results: Array<[string, AdapterLoadResult, string | undefined]> = [];
  const loader = new AdapterLoader({
    scheduler: time,
    post: (url, body, headers) =>
      new Promise((resolve, reject) => {
        posts.push({ url: url.href, body: JSON.parse(body) as unknown, headers, answer: (status, text) => resolve({ status, text }), fail: reject });
      }),
    onLoad: (_pool, adapter, ep, result, message) => results.push([`${ep}/${adapter}`, result, message]),
  });
  return { time, posts, results, loader };
}

describe('AdapterLoader', () => {
  it("POSTs vLLM's body to /v1/load_lora_adapter with the pool's backend key, and resolves on success", async () => {
    const { posts, loader, results } = scripted();
    const done = loader.ensure(pool('x', {}, 'secret'), endpoint('r0'), false);
    await flush();
    expect(posts.map((p) => [p.url, p.body, p.headers.authorization])).toEqual([['http://r0.local:8000/v1/load_lora_adapter', { lora_name: 'x', lora_path: '/adapters/x' }, 'Bearer secret']]);
    posts[0]?.answer(200, "Success: LoRA adapter 'x' added successfully.");
    await done;
    expect(results).toEqual([['r0/x', 'loaded', undefined]]);
  });

  it('does nothing for a replica known to hold the adapter', async () => {
    const { posts, loader } = scripted();
    await loader.ensure(pool('x'), endpoint('r0'), true);
    expect(posts).toHaveLength(0);
  });

  it('makes one load per replica and adapter: every request needing it waits for that one (held or not)', async () => {
    const { posts, loader } = scripted();
    const first = loader.ensure(pool('x'), endpoint('r0'), false);
    const second = loader.ensure(pool('x'), endpoint('r0'), true);
    await flush();
    expect(posts).toHaveLength(1);
    posts[0]?.answer(200, 'Success');
    await Promise.all([first, second]);
    expect(loader.size).toBe(0);
  });

  it('counts "has already been loaded" as success', async () => {
    const { posts, loader, results } = scripted();
    const done = loader.ensure(pool('x'), endpoint('r0'), false);
    await flush();
    posts[0]?.answer(400, JSON.stringify({ error: { message: "The lora adapter 'x' has already been loaded.", type: 'InvalidUserInput', code: 400 } }));
    await done;
    expect(results[0]?.[1]).toBe('already_loaded');
  });

  it("fails with ADAPTER_LOAD_FAILED and the engine's message on another answer", async () => {
    const { posts, loader } = scripted();
    const done = loader.ensure(pool('x'), endpoint('r0'), false);
    await flush();
    posts[0]?.answer(404, JSON.stringify({ object: 'error', message: 'No adapter found for /adapters/x', type: 'NotFoundError', code: 404 }));
    const err = (await done.catch((e: unknown) => e)) as RouterError;
    expect(err).toBeInstanceOf(RouterError);
    expect(err.code).toBe('ADAPTER_LOAD_FAILED');
    expect(err.status).toBe(502);
    expect(err.message).toContain('the engine answered 404: No adapter found for /adapters/x');
  });

  it('fails when the engine cannot be reached', async () => {
    const { posts, loader } = scripted();
    const done = loader.ensure(pool('x'), endpoint('r0'), false);
    await flush();
    posts[0]?.fail(new Error('connect ECONNREFUSED'));
    await expect(done).rejects.toThrow(/could not be reached \(connect ECONNREFUSED\)/);
  });

  it('bounds loads per replica and per pool; the rest wait their turn, in order', async () => {
    const { posts, loader } = scripted();
    const settings = { maxLoadsPerReplica: 1, maxConcurrentLoads: 2 };
    const a = loader.ensure(pool('a', settings), endpoint('r0'), false);
    const b = loader.ensure(pool('b', settings), endpoint('r0'), false); // same replica: waits
    const c = loader.ensure(pool('c', settings), endpoint('r1'), false);
    const d = loader.ensure(pool('d', settings), endpoint('r2'), false); // the pool's two turns are taken: waits
    await flush();
    expect(posts.map((p) => (p.body as { lora_name: string }).lora_name)).toEqual(['a', 'c']);
    posts[0]?.answer(200, 'ok');
    await a;
    await flush();
    expect(posts.map((p) => (p.body as { lora_name: string }).lora_name)).toEqual(['a', 'c', 'b']);
    posts[1]?.answer(200, 'ok');
    posts[2]?.answer(200, 'ok');
    await Promise.all([b, c]);
    await flush();
    posts[3]?.answer(200, 'ok');
    await d;
  });

  it('gives up after loadTimeoutMs, waiting for a turn or for the engine', async () => {
    const { posts, loader, time, results } = scripted();
    const settings = { maxLoadsPerReplica: 1, loadTimeoutMs: 1000 };
    const slow = loader.ensure(pool('a', settings), endpoint('r0'), false);
    const queued = loader.ensure(pool('b', settings), endpoint('r0'), false);
    const outcomes = Promise.allSettled([slow, queued]);
    await time.advance(1000);
    const [first, second] = await outcomes;
    expect(first.status === 'rejected' && String(first.reason)).toMatch(/did not answer within 1000 ms/);
    expect(second.status === 'rejected' && String(second.reason)).toMatch(/no turn to load within 1000 ms/);
    expect(results.map(([, result]) => result)).toEqual(['timeout', 'timeout']);
    expect(posts).toHaveLength(1);
  });

  it('lets a request leave (its client gone) while the load goes on for the others', async () => {
    const { posts, loader } = scripted();
    const controller = new AbortController();
    const leaving = loader.ensure(pool('x'), endpoint('r0'), false, controller.signal);
    const staying = loader.ensure(pool('x'), endpoint('r0'), false);
    controller.abort();
    expect(isAbortError(await leaving.catch((e: unknown) => e))).toBe(true);
    await flush();
    posts[0]?.answer(200, 'ok');
    await staying;
  });
});
