/**
 * A labelled counter that is cheap to increment on the request path.
 *
 * Why: under load (non-streamed chat, 32 in flight) the router allocated ~64 KB per request, and
 * prom-client's `Counter.inc` with labels was ~2.4 KB of it: each call builds a label-hash string,
 * validates the labels with `Object.keys` and returns a `{ labelHash }` object, and a request makes
 * about nine such calls. Here each label set has a cell, found through nested `Map`s keyed by the
 * label values (no string built, nothing allocated once the cell exists); an increment adds to the
 * cell, and the counter's documented `collect()` hook, which prom-client runs before it reads the
 * values (`registry.metrics()`, `getMetricsAsJSON()`, `metric.get()`), hands the cells' sums to
 * prom-client. What the exposition shows is the same as with one `inc` per event:
 *
 * - series appear in the order their label sets were first counted or seeded (cells flush in that order);
 * - `seed` makes a series at 0 (prom-client's `inc(labels, 0)`) that stays 0 until its first event;
 * - `removeWhere` drops the cell with the series, so a flush cannot bring a removed series back and a
 *   later event starts it again from 0;
 * - sums are bit-for-bit the ones of one `inc` per event: increments are batched only while every
 *   partial sum is exact in a double (integers up to 2^53, or multiples of 2^-12 — a prompt's blocks
 *   at a power-of-two block size — up to 2^41). A cell past that counts each event with its own
 *   `inc` from then on, as floating-point addition is not associative.
 *
 * Label values are the cells' keys, so a label takes its values as one type (the status code always
 * as a number, say); the label objects given to prom-client hold them as strings.
 */
import { Counter } from './prom.js';
import type { Registry } from 'prom-client';

type Value = string | number;
/** One to four label values. */
type Values = readonly [Value, Value?, Value?, Value?];
/** The type of the label value at `I`, or void (the argument left out) past the last label. */
type At<V extends Values, I extends number> = `${I}` extends keyof V ? V[I] : void;

interface Cell<L extends string> {
  /** What prom-client gets: the label names in their declared order, the values as strings. */
  readonly labels: Readonly<Record<L, string>>;
  /** The label values as given, the path to this cell. */
  readonly keys: readonly (Value | void)[];
  /** Counted since the last flush. */
  pending: number;
  /** The series' value once flushed (while batching: exact). */
  total: number;
  /** prom-client has the series. */
  created: boolean;
  /** Past the exact range: each increment goes to prom-client at once. */
  direct: boolean;
}

/** One level of the tree: label value → the next level, or a cell at the last label. */
type Level = Map<Value | void, Level | Cell<string>>;

/** A multiple of 2^-12 (a prompt's length in blocks at a block size up to 4096 characters that is a power of two). */
const GRAIN = 4096;
/** Sums of multiples of 2^-12 below 2^41 need at most 53 bits: exact. */
const FRACTION_LIMIT = 2 ** 41;

export interface HotCounterConfiguration<L extends string> {
  name: string;
  help: string;
  /** One to four label names, in the order the exposition shows them and `inc` takes their values. */
  labelNames: readonly L[];
  registers: Registry[];
}

/**
 * `V`: the label values' types, in `labelNames` order, e.g. `[route: Route, deployment: string, pool: string, code: number]`.
 */
export class HotCounter<L extends string, V extends Values> {
  /** The prom-client counter (registered, flushed before each read). */
  readonly counter: Counter<L>;
  private readonly names: readonly L[];
  private readonly root: Level = new Map();
  /** Every cell, in the order its series was first counted or seeded. */
  private readonly cells = new Set<Cell<L>>();

  constructor(config: HotCounterConfiguration<L>) {
    if (config.labelNames.length < 1 || config.labelNames.length > 4) throw new Error(`${config.name}: a hot counter takes one to four labels`);
    this.names = config.labelNames;
    const flush = (): void => this.flush();
    this.counter = new Counter({ name: config.name, help: config.help, labelNames: config.labelNames, registers: config.registers, collect: flush });
  }

  /** Adds `value` to the series of these label values (taken one by one: no array on the request path). */
  inc(value: number, a: V[0], b: At<V, 1>, c: At<V, 2>, d: At<V, 3>): void {
    const cell = this.cell(a, b, c, d);
    if (!cell.direct) {
      const total = cell.total + value;
      const exact = value >= 0 && (Number.isInteger(value) && Number.isInteger(cell.total) ? total <= Number.MAX_SAFE_INTEGER : Number.isInteger(value * GRAIN) && total < FRACTION_LIMIT);
      if (exact) {
        cell.total = total;
        cell.pending += value;
        return;
      }
      // every earlier cell first, so that series keep the order they were counted in
      this.flush();
      cell.direct = true;
    }
    this.counter.inc(cell.labels, value);
  }

  /** Makes the series of these label values exist (at 0 until its first event). */
  seed(a: V[0], b: At<V, 1>, c: At<V, 2>, d: At<V, 3>): void {
    this.cell(a, b, c, d);
  }

  /** Removes every series whose labels `gone` says left, with its cell. */
  removeWhere(gone: (labels: Readonly<Record<L, string>>) => boolean): void {
    for (const cell of this.cells) {
      if (!gone(cell.labels)) continue;
      this.cells.delete(cell);
      drop(this.root, cell.keys, 0);
      this.counter.remove(cell.labels);
    }
  }

  /** Hands the pending sums to prom-client, creating the series of new cells (at 0 when seeded). */
  private flush(): void {
    for (const cell of this.cells) {
      if (cell.created && cell.pending === 0) continue;
      this.counter.inc(cell.labels, cell.pending);
      cell.pending = 0;
      cell.created = true;
    }
  }

  private cell(a: Value, b: Value | void, c: Value | void, d: Value | void): Cell<L> {
    const last = this.names.length - 1;
    let level = this.root;
    for (let i = 0; i < last; i++) {
      const key = i === 0 ? a : i === 1 ? b : c;
      let next = level.get(key) as Level | undefined;
      if (!next) level.set(key, (next = new Map()));
      level = next;
    }
    const key = last === 0 ? a : last === 1 ? b : last === 2 ? c : d;
    let cell = level.get(key) as Cell<L> | undefined;
    if (!cell) {
      const keys = [a, b, c, d].slice(0, last + 1);
      const labels = {} as Record<L, string>;
      for (let i = 0; i <= last; i++) labels[this.names[i] as L] = String(keys[i]);
      cell = { labels, keys, pending: 0, total: 0, created: false, direct: false };
      level.set(key, cell);
      this.cells.add(cell);
    }
    return cell;
  }
}

/** Removes the cell at `keys` from the tree, and the levels it leaves empty. */
function drop(level: Level, keys: readonly (Value | void)[], i: number): void {
  const key = keys[i];
  if (i === keys.length - 1) {
    level.delete(key);
    return;
  }
  const next = level.get(key) as Level | undefined;
  if (!next) return;
  drop(next, keys, i + 1);
  if (next.size === 0) level.delete(key);
}
