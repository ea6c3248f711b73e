/** Which pools' replicas said they do not serve the pool's servedModelName, for the status page and the ModelPool status. */
import { describe, expect, it } from '@jest/globals';
import { ServedModelWatch } from '../../src/wiring/served-model-watch.js';

const pool = { name: 'llm', servedModelName: 'Llama-3-8B' };
const A = 'http://10.0.0.1:8000';
const B = 'http://10.0.0.2:8000';

function watch(): { w: ServedModelWatch; changes: () => number; tick: (ms: number) => void } {
  let now = Date.UTC(2030, 0, 2, 3, 4, 5);
  let changes = 0;
  const w = new ServedModelWatch(
    () => now,
    () => (changes += 1),
  );
  return { w, changes: () => changes, tick: (ms) => (now += ms) };
}

describe('ServedModelWatch', () => {
  it('keeps, per pool, the replicas that said so, the latest one and when; a replica saying it again moves no status write', () => {
    const { w, changes, tick } = watch();
    expect(w.of(pool)).toBeUndefined();
    w.seen(pool, A);
    tick(1_000);
    w.seen(pool, B);
    tick(1_000);
    w.seen(pool, A);
    expect(w.of(pool)).toEqual({ at: Date.UTC(2030, 0, 2, 3, 4, 7), replica: A, replicas: [A, B] });
    expect(changes()).toBe(2); // a first answer from each replica; not the repeat
    expect(w.of({ ...pool, name: 'other' })).toBeUndefined();
  });

  it("clears a replica when it answers the pool (a committed attempt), and the pool's record with its last replica", () => {
    const { w, changes } = watch();
    w.seen(pool, A);
    w.seen(pool, B);
    w.attempted('llm', A, 'upstream_503'); // not an answer of the model
    w.attempted('other', A, 'committed'); // another pool on the same replica, its name right: says nothing of this pool's
    w.attempted('llm', 'http://10.0.0.9:8000', 'committed'); // a replica that never said so
    w.attempted('llm', A, 'committed', true); // the pool's LoRA adapter answered: says nothing of its base model's name
    expect(w.of(pool)?.replicas).toEqual([A, B]);
    expect(changes()).toBe(2);
    w.attempted('llm', A, 'committed');
    expect(w.of(pool)).toMatchObject({ replica: B, replicas: [B] });
    w.attempted('llm', B, 'committed');
    expect(w.of(pool)).toBeUndefined();
    expect(w.size).toBe(0);
    expect(changes()).toBe(4);
  });

  it('forgets a pool whose servedModelName changed (the slip mended), one discovery no longer lists, and replicas their pool no longer lists', () => {
    const { w, changes } = watch();
    w.seen(pool, A);
    w.seen(pool, B);
    w.seen({ name: 'gone', servedModelName: 'x' }, A);
    w.seen({ name: 'renamed', servedModelName: 'Llama-3-8B' }, A);
    expect(w.of({ name: 'renamed', servedModelName: 'llama-3-8b' })).toBeUndefined(); // read under the new name: nothing
    const before = changes();
    w.retain([pool, { name: 'renamed', servedModelName: 'llama-3-8b' }], (name) => (name === 'llm' ? [{ id: B }] : [{ id: A }]));
    expect(w.of(pool)?.replicas).toEqual([B]);
    expect(w.size).toBe(1);
    expect(changes()).toBe(before + 1);
    w.retain([pool], () => [{ id: B }]);
    expect(changes()).toBe(before + 1); // nothing dropped: no write asked for
  });

  it('a new servedModelName starts a new record: what replicas said of the old one is dropped', () => {
    const { w } = watch();
    w.seen(pool, A);
    const renamed = { ...pool, servedModelName: 'llama-3-8b' };
    w.seen(renamed, B);
    expect(w.of(renamed)?.replicas).toEqual([B]);
    expect(w.of(pool)).toBeUndefined();
  });
});
