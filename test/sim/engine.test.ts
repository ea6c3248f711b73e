import { describe, expect, it } from '@jest/globals';
import { promptBlockHashes, QueueFullError, SimEngine, type EngineConfig, type Sequence } from '../../src/sim/engine.js';
import { FakeTime, flush } from '../helpers/fake-time.js';

const latency = { ttftOverheadMs: 10, prefillMsPerToken: 1, itlMs: 5, loadFactor: 3, jitter: 0 };

function engine(overrides: Partial<EngineConfig> = {}): { engine: SimEngine; time: FakeTime } {
  const time = new FakeTime();
  const config: EngineConfig = { maxNumSeqs: 2, maxWaiting: 2, blockSize: 4, kvCacheBlocks: 8, latency, ...overrides };
  return { engine: new SimEngine(config, { clock: time, sleep: time.sleep, rng: () => 0.5 }), time };
}

/** Resolves-or-not probe for a promise without awaiting it. */
function track<T>(promise: Promise<T>): { done: boolean; value?: T; error?: unknown } {
  const state: { done: boolean; value?: T; error?: unknown } = { done: false };
  promise.then(
    (value) => Object.assign(state, { done: true, value }),
    (error: unknown) => Object.assign(state, { done: true, error }),
  );
  return state;
}

describe('SimEngine scheduling', () => {
  it('runs up to maxNumSeqs at once, queues the rest FIFO and refuses beyond the queue', async () => {
    const { engine: e } = engine();
    const a = await e.acquire();
    const b = await e.acquire();
    const c = track(e.acquire());
    const d = track(e.acquire());
    expect(() => e.acquire()).toThrow(QueueFullError);
    expect([e.numRunning, e.numWaiting]).toEqual([2, 2]);
    a.finish('stop');
    await flush();
    expect([c.done, d.done]).toEqual([true, false]);
    b.finish('stop');
    await flush();
    expect(d.done).toBe(true);
    expect([e.numRunning, e.numWaiting]).toEqual([2, 0]);
  });

  it('drops a queued request whose client left and counts it as aborted', async () => {
    const { engine: e } = engine({ maxNumSeqs: 1 });
    const running = await e.acquire();
    const controller = new AbortController();
    const queued = track(e.acquire(controller.signal));
    controller.abort();
    await flush();
    expect((queued.error as Error).name).toBe('AbortError');
    expect(e.numWaiting).toBe(0);
    expect(e.stats.finished.abort).toBe(1);
    running.finish('stop');
    expect(e.numRunning).toBe(0);
  });

  it('counts a finish once, whatever is called after', async () => {
    const { engine: e } = engine();
    const seq = await e.acquire();
    seq.finish('length');
    seq.finish('abort');
    expect(e.stats.finished).toEqual({ stop: 0, length: 1, abort: 0, error: 0 });
  });
});

describe('SimEngine latency model', () => {
  it('prefills in overhead + tokens × per-token cost, and decodes one token per ITL', async () => {
    const { engine: e, time } = engine();
    const seq = await e.acquire();
    const prefill = track(seq.prefill(20, [], 0));
    await time.advance(29);
    expect(prefill.done).toBe(false);
    await time.advance(1);
    expect(prefill.value).toBe(0);
    const step = track(seq.decode(1));
    await time.advance(4);
    expect(step.done).toBe(false);
    await time.advance(1);
    expect(step.done).toBe(true);
    expect(e.stats.ttft.sum).toBeCloseTo(0.03, 6);
  });

  it('slows prefill and decode linearly with the batch, up to loadFactor when full', async () => {
    const { engine: e } = engine({ maxNumSeqs: 3 });
    expect(e.loadMultiplier()).toBe(1);
    const first = await e.acquire();
    expect(e.loadMultiplier()).toBe(1);
    await e.acquire();
    expect(e.loadMultiplier()).toBe(2);
    await e.acquire();
    expect(e.loadMultiplier()).toBe(3);
    expect(e.scaleDelay(5)).toBe(15);
    first.finish('stop');
    expect(e.loadMultiplier()).toBe(2);
  });

  it('adds the extra slow-start delay on top of the prefill', async () => {
    const { engine: e, time } = engine();
    const seq = await e.acquire();
    const prefill = track(seq.prefill(0, [], 100));
    await time.advance(109);
    expect(prefill.done).toBe(false);
    await time.advance(1);
    expect(prefill.done).toBe(true);
  });

  it('stops waiting as soon as the request is aborted', async () => {
    const { engine: e, time } = engine();
    const seq: Sequence = await e.acquire();
    const controller = new AbortController();
    const prefill = track(seq.prefill(1000, [], 0, controller.signal));
    controller.abort();
    await flush();
    expect((prefill.error as Error).name).toBe('AbortError');
    expect(time.pendingTimers).toBe(0);
  });
});

describe('SimEngine prefix cache', () => {
  const prompt = 'abcd'.repeat(4 * 5); // 20 tokens = 5 blocks of 4 tokens

  it('serves leading blocks seen before from cache, so the prefill is shorter', async () => {
    const { engine: e, time } = engine();
    const hashes = promptBlockHashes(prompt, 4);
    expect(hashes).toHaveLength(5);
    const first = await e.acquire();
    const cold = track(first.prefill(20, hashes, 0));
    await time.advance(30);
    expect(cold.value).toBe(0);
    first.finish('stop');

    const second = await e.acquire();
    const warm = track(second.prefill(20, hashes, 0));
    await time.advance(11);
    // at most promptTokens - 1 come from cache: the last token is always computed
    expect(warm.value).toBe(19);
    expect(e.stats.prefixQueries).toBe(40);
    expect(e.stats.prefixHits).toBe(19);
  });

  it('matches only a common leading prefix: a changed first block means no hit', () => {
    const { engine: e } = engine();
    e.storePrefix(promptBlockHashes(prompt, 4));
    expect(e.matchPrefix(promptBlockHashes('Xbcd' + prompt.slice(4), 4))).toBe(0);
    // blocks are 4 tokens × 4 characters: the first two blocks (32 characters) are shared
    expect(e.matchPrefix(promptBlockHashes(prompt.slice(0, 32) + 'z'.repeat(48), 4))).toBe(8);
  });

  it('evicts the least recently used blocks beyond kvCacheBlocks', () => {
    const { engine: e } = engine({ kvCacheBlocks: 5 });
    const a = promptBlockHashes(prompt, 4);
    const b = promptBlockHashes('wxyz'.repeat(12), 4);
    e.storePrefix(a);
    e.storePrefix(b.slice(0, 3));
    expect(e.matchPrefix(a)).toBe(0); // a's first blocks were the oldest and went first
    expect(e.matchPrefix(b)).toBe(12);
  });

  it('reports KV usage from the tokens running requests hold', async () => {
    const { engine: e, time } = engine();
    const seq = await e.acquire();
    const prefill = track(seq.prefill(10, [], 0));
    expect(e.kvCacheUsage()).toBeCloseTo(3 / 8); // 10 tokens → 3 blocks of 4, held from the start of the prefill (as vLLM allocates them)
    await time.advance(20);
    expect(prefill.done).toBe(true);
    expect(e.kvCacheUsage()).toBeCloseTo(3 / 8);
    seq.finish('stop');
    expect(e.kvCacheUsage()).toBe(0);
  });
});
