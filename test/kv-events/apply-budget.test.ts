/**
 * One replica's batches may take only a share of the event loop (feed.ts APPLY_BUDGET): a hostile
 * publisher sending heavy batches as fast as it likes, live or in a replay, gets a few read and the
 * rest skipped (the replica unknown, as after a lost batch); a busy real engine's traffic is read in
 * full. Regression: a publisher sending batches at the caps held the loop for seconds (1.3 s a batch).
 * The time a batch takes is the injected clock's, advanced by the reader (a real model's tokenizer)
 * per block read: counts and states, no wall-clock timing.
 */
import { beforeAll, describe, expect, it } from '@jest/globals';
import { encode } from '@msgpack/msgpack';
import { join } from 'node:path';
import { APPLY_BUDGET, ReplicaFeed, type Replay } from '../../src/kv-events/feed.js';
import { loadHfModel, type HfModel } from '../../src/kv-events/hf-tokenizer.js';

let model: HfModel;
beforeAll(async () => {
  model = await loadHfModel(join(process.cwd(), 'test/fixtures/hf-tokenizer'));
});

/** A batch of `blocks` 16-id blocks; `id` 128 is a byte-level token that decodes to U+FFFD alone (the costliest to read). */
function batch(first: number, blocks: number, id: number): Uint8Array {
  const hashes = Array.from({ length: blocks }, (_, i) => first + i);
  return encode([0, [['BlockStored', hashes, null, new Array<number>(blocks * 16).fill(id), 16]]]);
}

/** A feed whose clock the test moves, and which each block read advances by `msPerBlock`. */
function timedFeed(msPerBlock: number, replay?: Replay): { feed: ReplicaFeed; clock: { now: number }; applied: () => number; skipped: string[] } {
  const clock = { now: 0 };
  let applied = 0;
  const skipped: string[] = [];
  const feed = new ReplicaFeed({
    blockChars: 64,
    maxBlocks: 4096,
    readable: true,
    reader: {
      readBlock: (tail, ids) => {
        clock.now += msPerBlock;
        return model.readBlock(tail, ids);
      },
    },
    staleAfterMs: 1e12,
    now: () => clock.now,
    events: { onBatch: () => void applied++, onBadPayload: (err) => void skipped.push(err.reason) },
    ...(replay ? { replay } : {}),
  });
  feed.connected();
  return { feed, clock, applied: () => applied, skipped };
}

describe('the work budget of a replica feed', () => {
  it('a publisher sending heavy batches ten times a second for 30 s gets about a tenth of the loop; the rest is skipped and the replica is unknown', async () => {
    // 1,024 blocks at 0.32 ms each: a batch costs 328 ms, as one at the caps of U+FFFD ids did
    const { feed, clock, applied, skipped } = timedFeed(0.32);
    let spent = 0;
    for (let seq = 0; seq < 300; seq++) {
      const before = clock.now;
      await feed.receive(BigInt(seq), batch(seq * 1024, 1024, 128));
      spent += clock.now - before;
      clock.now = before + 100; // the next batch 100 ms later, however long this one took
    }
    const elapsed = 300 * 100;
    // what the budget allows over 30 s (its share, its burst, and the one batch that overdraws it)
    expect(spent).toBeLessThanOrEqual((elapsed * APPLY_BUDGET.perSecondMs) / 1000 + APPLY_BUDGET.burstMs + 328);
    expect(applied()).toBeLessThanOrEqual(11);
    expect(applied()).toBeGreaterThanOrEqual(9);
    expect(skipped).toHaveLength(300 - applied());
    expect(new Set(skipped)).toEqual(new Set(['over_budget']));
    expect(feed.state()).toBe('unknown');
  });

  it('a replay of heavy batches is read only as far as the budget goes: the join is unknown, not complete', async () => {
    const history = Array.from({ length: 28 }, (_, i) => [BigInt(i), batch(i * 1024, 1024, 128)] as const);
    const { feed, applied, skipped } = timedFeed(0.32, () => Promise.resolve(history));
    await feed.receive(28n, batch(28 * 1024, 1, 128));
    expect(applied()).toBe(1); // the first overdraws the burst; the rest of the replay (and the live batch) find it spent
    expect(skipped).toHaveLength(28);
    expect(feed.state()).toBe('unknown');
  });

  it('a busy engine (128 blocks a step, 20 steps a second, 24 µs a block: four times the cost measured) is read in full and stays complete', async () => {
    // 61 ms of each second: more than the burst over the 10 s, so the budget's rate is what lets it through
    const { feed, clock, applied, skipped } = timedFeed(0.024);
    for (let seq = 0; seq < 200; seq++) {
      const before = clock.now;
      await feed.receive(BigInt(seq), batch(seq * 128, 128, 72 + (seq % 20)));
      clock.now = before + 50;
    }
    expect(applied()).toBe(200);
    expect(skipped).toEqual([]);
    expect(feed.state()).toBe('complete');
  });
});
