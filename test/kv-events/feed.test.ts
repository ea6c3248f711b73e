/** A replica's event stream: sequence numbers, gaps, replays, restarts and staleness decide how far its index is trusted. */
import { describe, expect, it } from '@jest/globals';
import { ReplicaFeed, type Replay } from '../../src/kv-events/feed.js';
import { encodeBatch } from '../../src/sim/kv-events.js';

const stored = (hash: number, parent?: number): Uint8Array => encodeBatch(0, [{ hashes: [hash], parent, texts: ['x'.repeat(64)] }], [], 16);
const cleared = (): Uint8Array => encodeBatch(0, [], [], 16, true);

function feed(options: { replay?: Replay; now?: () => number } = {}): { feed: ReplicaFeed; gaps: boolean[] } {
  const gaps: boolean[] = [];
  const f = new ReplicaFeed({
    blockChars: 64,
    maxBlocks: 1000,
    readable: true,
    staleAfterMs: 1000,
    now: options.now ?? (() => 0),
    events: { onGap: (r) => gaps.push(r) },
    ...(options.replay ? { replay: options.replay } : {}),
  });
  f.connected();
  return { feed: f, gaps };
}

describe('ReplicaFeed', () => {
  it('is unknown until it hears the publisher, complete when it hears it from sequence 0', async () => {
    const { feed: f } = feed();
    expect(f.state()).toBe('unknown');
    await f.receive(0n, stored(1));
    await f.receive(1n, stored(2, 1));
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(2);
  });

  it('joining a running publisher without a replay socket is partial (what was stored before is missing)', async () => {
    const { feed: f } = feed();
    await f.receive(41n, stored(1));
    expect(f.state()).toBe('partial');
  });

  it('joining a running publisher with a replay socket catches up from 0 and is complete', async () => {
    const history = [stored(10), stored(11, 10), stored(12, 11)];
    const asked: bigint[] = [];
    const { feed: f } = feed({
      replay: (from) => {
        asked.push(from);
        return Promise.resolve(history.map((p, i) => [BigInt(i), p] as const).filter(([s]) => s >= from));
      },
    });
    await f.receive(3n, stored(13, 12));
    expect(asked).toEqual([0n]);
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(4);
  });

  it('joining with a replay that stops short of the live batch is unknown (a gap after what it applied), one that starts later partial', async () => {
    const history = [stored(10), stored(11, 10), stored(12, 11)];
    // batches 0 and 1 come back, 2 does not (the replay's bounds, or the publisher's buffer): its removals may be missing
    const { feed: short } = feed({ replay: () => Promise.resolve(history.slice(0, 2).map((p, i) => [BigInt(i), p] as const)) });
    await short.receive(3n, stored(13, 12));
    expect(short.state()).toBe('unknown');
    // the publisher's buffer starts after 0: nothing applied, what follows is a lower bound
    const { feed: later } = feed({ replay: () => Promise.resolve([[2n, history[2]!] as const]) });
    await later.receive(3n, stored(13, 12));
    expect(later.state()).toBe('partial');
  });

  it('a sequence gap makes the replica unknown until its engine clears its cache', async () => {
    const { feed: f, gaps } = feed();
    await f.receive(0n, stored(1));
    await f.receive(2n, stored(3)); // batch 1 lost
    expect(gaps).toEqual([false]);
    expect(f.state()).toBe('unknown');
    await f.receive(3n, stored(4)); // still applied, still not trusted
    expect(f.state()).toBe('unknown');
    await f.receive(4n, cleared());
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(0);
  });

  it('a gap a replay fills leaves the replica complete, the lost batch applied in order', async () => {
    const lost = stored(2, 1);
    const { feed: f, gaps } = feed({ replay: (from) => Promise.resolve(from === 1n ? [[1n, lost] as const] : []) });
    await f.receive(0n, stored(1));
    await f.receive(2n, stored(3, 2));
    expect(gaps).toEqual([true]);
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(3);
  });

  it('a replay that comes back short (its buffer moved on) leaves the gap: unknown', async () => {
    const { feed: f, gaps } = feed({ replay: () => Promise.resolve([[5n, stored(9)] as const]) });
    await f.receive(0n, stored(1));
    await f.receive(7n, stored(3));
    expect(gaps).toEqual([false]);
    expect(f.state()).toBe('unknown');
  });

  it('batches arriving during a replay are applied after it, in order', async () => {
    let answer: (v: ReadonlyArray<readonly [bigint, Uint8Array]>) => void = () => undefined;
    const { feed: f } = feed({ replay: () => new Promise((resolve) => (answer = resolve)) });
    await f.receive(0n, stored(1));
    const gap = f.receive(2n, stored(3, 2));
    await f.receive(3n, stored(4, 3)); // queued behind the replay
    expect(f.index.size).toBe(1);
    answer([[1n, stored(2, 1)]]);
    await gap;
    expect(f.index.size).toBe(4);
    expect(f.state()).toBe('complete');
  });

  it('a publisher that restarts (sequence 0 again) means a new engine: the index starts over, complete', async () => {
    const { feed: f } = feed();
    await f.receive(0n, stored(1));
    await f.receive(1n, stored(2));
    await f.receive(0n, stored(7));
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(1);
  });

  it('a publisher unreachable for staleAfterMs is stale (unknown); back in time, it is trusted again', async () => {
    let now = 0;
    const { feed: f } = feed({ now: () => now });
    await f.receive(0n, stored(1));
    f.disconnected();
    now = 999;
    expect(f.state()).toBe('complete');
    now = 1000;
    expect(f.state()).toBe('unknown');
    f.connected();
    expect(f.state()).toBe('complete');
  });

  it('skips a payload that is not a batch (or over the bounds) as a lost one: its sequence counts, the replica is unknown until its cache is cleared', async () => {
    const bad: string[] = [];
    const f = new ReplicaFeed({ blockChars: 64, maxBlocks: 10, readable: true, staleAfterMs: 1000, now: () => 0, events: { onBadPayload: (e) => bad.push(e.code) } });
    f.connected();
    await f.receive(0n, stored(1));
    expect(f.state()).toBe('complete');
    // a batch refused could have held removals: the index may hold blocks the engine evicted
    await f.receive(1n, Uint8Array.from([0xc1]));
    await f.receive(2n, stored(2, 1));
    expect(bad).toEqual(['KV_EVENTS_BAD_PAYLOAD']);
    expect(f.state()).toBe('unknown');
    await f.receive(3n, cleared());
    expect(f.state()).toBe('complete');
  });

  it('a bad payload inside the replay of a join is lost as a live one is: the replica is unknown, not complete (regression: the join overwrote it)', async () => {
    const bad: string[] = [];
    const history = [stored(10), Uint8Array.from([0xc1]), stored(12, 11)];
    const f = new ReplicaFeed({
      blockChars: 64,
      maxBlocks: 1000,
      readable: true,
      staleAfterMs: 1000,
      now: () => 0,
      replay: (from) => Promise.resolve(history.map((p, i) => [BigInt(i), p] as const).filter(([s]) => s >= from)),
      events: { onBadPayload: (e) => bad.push(e.code) },
    });
    f.connected();
    await f.receive(3n, stored(13, 12));
    expect(bad).toEqual(['KV_EVENTS_BAD_PAYLOAD']);
    expect(f.state()).toBe('unknown');
    await f.receive(4n, cleared());
    expect(f.state()).toBe('complete');
  });

  it('a replay of a join that holds a clear after its bad payload is complete: what was lost was cleared', async () => {
    const history = [stored(10), Uint8Array.from([0xc1]), cleared(), stored(12)];
    const { feed: f } = feed({ replay: (from) => Promise.resolve(history.map((p, i) => [BigInt(i), p] as const).filter(([s]) => s >= from)) });
    await f.receive(4n, stored(13, 12));
    expect(f.state()).toBe('complete');
    expect(f.index.size).toBe(2);
  });
});
