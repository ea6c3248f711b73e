/** The `lora` scorer and the router's record of adapter placements: pure, as a table of scenarios. */
import { describe, expect, it } from '@jest/globals';
import { AdapterPlacements, adapterScore, addLoraScores, HELD_SCORE, placementOf } from '../../src/balancer/lora.js';
import { schedule } from '../../src/balancer/scheduler.js';
import { ROUTING_DEFAULTS } from '../../src/balancer/settings.js';
import { type EngineLoad, type Endpoint, type LoraLoad } from '../../src/core/types.js';

const ep = (id: string): Endpoint => ({ id, pool: 'p', url: new URL(`http://${id}:8000`), weight: 1 });
const lora = (running: string[], waiting: string[] = [], maxLora = 2): LoraLoad => ({ running, waiting, maxLora });
const sample = (l: LoraLoad | undefined, queued = 0): EngineLoad => ({ waiting: queued, running: 0, at: 0, localAtSample: 0, ...(l ? { lora: l } : {}) });

describe('adapterScore', () => {
  it.each([
    ['running on the replica', lora(['x']), 0, 0, HELD_SCORE],
    ['waiting on the replica', lora([], ['x']), 0, 0, HELD_SCORE],
    ["sent there lately (the router's record)", lora(['a', 'b']), 1, 0, HELD_SCORE],
    // it answered lately that it lacks the adapter: an older sample listing it is not believed
    ['listed by its sample, but it answered since that it lacks it (its slot counted taken)', lora(['x']), -1, 0, 0.45],
    ['two free slots of two', lora([]), 0, 0, 0.6],
    ['one free slot of two', lora(['a']), 0, 0, 0.45],
    ['one free slot, taken since the sample by an adapter the router sent', lora(['a']), 0, 1, 0],
    ['no free slot', lora(['a', 'b']), 0, 0, 0],
    ['a waiting adapter takes a slot too', lora(['a'], ['b']), 0, 0, 0],
    ['no sample, nothing sent there', undefined, 0, 0, 0.6],
    ['no sample, two other adapters sent there', undefined, 0, 2, 0.4],
  ])('%s', (_name, load, held, unreported, expected) => {
    expect(adapterScore('x', load, held, unreported)).toBeCloseTo(expected, 10);
  });

  it('names placements by score', () => {
    expect([placementOf(1), placementOf(0.45), placementOf(0)]).toEqual(['held', 'free_slot', 'no_slot']);
  });
});

describe('the lora scorer in a profile', () => {
  const settings = ROUTING_DEFAULTS;
  const pick = (engine: Array<EngineLoad | undefined>, local: number[], held: number[] = [], unreported: number[] = []): string | undefined => {
    const candidates = engine.map((_, i) => ep(`r${i}`));
    const load = new Float64Array(local);
    const out = new Float64Array(candidates.length);
    addLoraScores(candidates, candidates.length, engine, load, { adapter: 'x', held, unreported }, settings, out, 1);
    // the whole default profile, as the picker runs it
    const decision = schedule(candidates, local, engine, {}, settings, () => 0);
    expect(decision).toBeDefined();
    return decision?.endpoint.id;
  };

  it('scores nothing for a base-model request', () => {
    const out = new Float64Array([1, 2]);
    addLoraScores([ep('a'), ep('b')], 2, [undefined, undefined], [0, 0], undefined, settings, out, 10);
    expect([...out]).toEqual([1, 2]);
  });

  it('prefers the replica holding the adapter over an idle one, by more than a few requests of load', () => {
    const out = new Float64Array(2);
    addLoraScores([ep('a'), ep('b')], 2, [sample(lora(['x'])), sample(lora([]))], [3, 0], { adapter: 'x', held: [0, 0], unreported: [0, 0] }, settings, out, 10);
    expect(out[0]).toBe(10);
    expect(out[1]).toBeCloseTo(6);
    expect(pick([sample(lora(['x'])), sample(lora([]))], [0, 0])).toBe('r1'); // `schedule` alone knows no adapter: ties by load
  });

  it('prefers a free slot over a full replica, and the most free slots first (spreading adapters)', () => {
    const out = new Float64Array(3);
    const engine = [sample(lora(['a', 'b'])), sample(lora(['a'])), sample(lora([]))];
    addLoraScores([ep('a'), ep('b'), ep('c')], 3, engine, [0, 0, 0], { adapter: 'x', held: [0, 0, 0], unreported: [0, 0, 0] }, settings, out, 1);
    expect(out[2]).toBeGreaterThan(out[1] as number);
    expect(out[1]).toBeGreaterThan(out[0] as number);
  });

  it('lets a hot adapter spill: holding it stops counting past the load guard', () => {
    const gap = settings.lora.maxLoadGap;
    const out = new Float64Array(2);
    addLoraScores([ep('a'), ep('b')], 2, [sample(lora(['x'])), sample(lora([]))], [gap + 1, 0], { adapter: 'x', held: [0, 0], unreported: [0, 0] }, settings, out, 1);
    expect(out[0]).toBeLessThan(out[1] as number);
    const within = new Float64Array(2);
    addLoraScores([ep('a'), ep('b')], 2, [sample(lora(['x'])), sample(lora([]))], [gap, 0], { adapter: 'x', held: [0, 0], unreported: [0, 0] }, settings, within, 1);
    expect(within[0]).toBe(HELD_SCORE);
  });

  it('without engine samples, falls back on the record: held first, then the replica with the fewest other adapters', () => {
    const out = new Float64Array(3);
    addLoraScores([ep('a'), ep('b'), ep('c')], 3, [undefined, undefined, undefined], [0, 0, 0], { adapter: 'x', held: [0, 1, 0], unreported: [0, 1, 3] }, settings, out, 1);
    expect(out[1]).toBe(HELD_SCORE);
    expect(out[0]).toBeGreaterThan(out[2] as number);
  });
});

describe('AdapterPlacements', () => {
  it('remembers where each adapter went, and when', () => {
    const record = new AdapterPlacements();
    record.record('x', 'r1', 100, 1000);
    record.record('y', 'r1', 200, 1000);
    expect(record.holds('x', 'r1', 99)).toBe(true);
    expect(record.holds('x', 'r1', 100)).toBe(false); // sent at or before the cut-off: forgotten
    expect(record.holds('x', 'r2', 0)).toBe(false);
    expect(record.unreported('r1', 0, undefined)).toBe(2);
    expect(record.unreported('r1', 150, undefined)).toBe(1);
    expect(record.unreported('r1', 0, lora(['y']))).toBe(1); // the engine already shows y
    record.forget('x', 'r1');
    expect(record.holds('x', 'r1', 0)).toBe(false);
  });

  it("counts an adapter held only while it is among the engine's last max_lora adapters there", () => {
    const record = new AdapterPlacements();
    record.record('x', 'r1', 100, 1000);
    record.record('y', 'r1', 200, 1000);
    expect(record.holds('x', 'r1', 0, lora([], [], 2))).toBe(true); // x and y fit two slots
    expect(record.holds('x', 'r1', 0, lora([], [], 1))).toBe(false); // y evicted it
    expect(record.holds('x', 'r1', 0, lora(['z'], [], 2))).toBe(false); // z, sent by another router, took the other slot
    expect(record.holds('y', 'r1', 0, lora(['z'], [], 2))).toBe(true);
    expect(record.holds('x', 'r1', 0, lora(['y', 'x'], [], 2))).toBe(true); // the engine still runs it
  });

  it('sweeps out old entries as new ones come in, so the record stays bounded', () => {
    const record = new AdapterPlacements();
    for (let i = 0; i < 1024 * 4; i++) record.record(`a${i % 16}`, `r${i}`, i, 10);
    expect(record.size).toBeLessThan(1100);
    record.retain(new Set());
    expect(record.size).toBe(0);
  });
});
