/**
 * One replica's batches may take only a share of the event loop (feed.ts APPLY_BUDGET): a batch that
 * finds the budget spent waits for it to refill, and the feed reads nothing meanwhile (ZMQ keeps a few
 * messages for it and drops the rest: a gap, as for any lagging subscriber). A hostile publisher
 * sending heavy batches as fast as it likes, live or in a replay, gets a tenth of the loop; a busy real
 * engine's traffic is read as it comes; a burst (a slow read, a long replay at a join) is read late,
 * not lost. Regression: a publisher sending batches at the caps held the loop for seconds (1.3 s a
 * batch); then, skipping batches over the budget left a healthy replica unknown until its engine restarted.
 * The time a batch takes is the injected clock's, advanced by the reader (a real model's tokenizer)
 * per block read, and by the feed's waits: counts, states and clock time, no wall-clock timing.
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

/** A feed whose clock the test moves, which each block read advances by `msPerBlock` and each wait by its length. */
function timedFeed(msPerBlock: number | (() => number), replay?: Replay): { feed: ReplicaFeed; clock: { now: number }; applied: () => number; waited: number[]; reading: () => number } {
  const clock = { now: 0 };
  let applied = 0;
  let reading = 0;
  const waited: number[] = [];
  const feed = new ReplicaFeed({
    blockChars: 64,
    maxBlocks: 4096,
    readable: true,
    reader: {
      readBlock: (tail, ids) => {
        const ms = typeof msPerBlock === 'number' ? msPerBlock : msPerBlock();
        clock.now += ms;
        reading += ms;
        return model.readBlock(tail, ids);
      },
    },
    staleAfterMs: 1e12,
    now: () => clock.now,
    events: { onBatch: () => void applied++, onThrottled: (ms) => void waited.push(ms) },
    sleep: (ms) => {
      clock.now += ms;
      return Promise.resolve();
    },
    ...(replay ? { replay } : {}),
  });
  feed.connected();
  return { feed, clock, applied: () => applied, waited, reading: () => reading };
}

describe('the work budget of a replica feed', () => {
  it('a publisher sending heavy batches as fast as it can gets a tenth of the loop: each batch waits its turn', async () => {
    // 1,024 blocks at 0.32 ms each: a batch costs 328 ms, as one at the caps of U+FFFD ids did
    const { feed, clock, applied, waited, reading } = timedFeed(0.32);
    for (let seq = 0; seq < 40; seq++) await feed.receive(BigInt(seq), batch(seq * 1024, 1024, 128));
    expect(applied()).toBe(40);
    // over the whole time, reading took its share: a tenth, plus the burst and the one batch that overdraws it
    expect(reading()).toBeLessThanOrEqual((clock.now * APPLY_BUDGET.perSecondMs) / 1000 + APPLY_BUDGET.burstMs + 328);
    expect(waited.length).toBeGreaterThanOrEqual(38); // all but the first, which the burst let through
    expect(feed.state()).toBe('complete'); // nothing lost here: what ZMQ drops meanwhile shows as a gap
  });

  it('a replay of heavy batches at a join is read in full, at the budget’s pace: the join is complete', async () => {
    const history = Array.from({ length: 28 }, (_, i) => [BigInt(i), batch(i * 1024, 1024, 128)] as const);
    const { feed, clock, applied, reading } = timedFeed(0.32, () => Promise.resolve(history));
    await feed.receive(28n, batch(28 * 1024, 1, 128));
    expect(applied()).toBe(29);
    expect(feed.state()).toBe('complete');
    expect(reading()).toBeLessThanOrEqual((clock.now * APPLY_BUDGET.perSecondMs) / 1000 + APPLY_BUDGET.burstMs + 328);
  });

  it('one slow read (a 300 ms pause) delays the next batch a little and loses nothing: the replica stays complete', async () => {
    const cost = { ms: 0.006 };
    const { feed, clock, applied, waited } = timedFeed(() => cost.ms);
    await feed.receive(0n, batch(0, 1, 72));
    clock.now += 1000;
    cost.ms = 300; // the process paused while this block was read
    await feed.receive(1n, batch(16, 1, 72));
    cost.ms = 0.006;
    for (let seq = 2; seq < 600; seq++) {
      await feed.receive(BigInt(seq), batch(seq * 16, 16, 72 + (seq % 20)));
      clock.now += 1000; // an engine step a second, for ten minutes
    }
    expect(applied()).toBe(600);
    expect(waited).toHaveLength(1); // the batch after the pause waited for the budget, once
    expect(feed.state()).toBe('complete');
  });

  it('a busy engine (128 blocks a step, 20 steps a second, 24 µs a block: four times the cost measured) is read as it comes', async () => {
    // 61 ms of each second: more than the burst over the 10 s, so the budget's rate is what lets it through
    const { feed, clock, applied, waited } = timedFeed(0.024);
    for (let seq = 0; seq < 200; seq++) {
      const before = clock.now;
      await feed.receive(BigInt(seq), batch(seq * 128, 128, 72 + (seq % 20)));
      clock.now = before + 50;
    }
    expect(applied()).toBe(200);
    expect(waited).toEqual([]);
    expect(feed.state()).toBe('complete');
  });
});
