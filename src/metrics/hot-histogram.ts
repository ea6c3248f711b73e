/**
 * A histogram with two labels that is cheap enough to observe at every token of a stream (the
 * inter-token latency).
 *
 * Why: prom-client's `observe` checks the labels (`Object.keys`), builds a hash string and two objects
 * per call. At a stream's 16 content events that was 3% of the router's CPU a stream under the overhead
 * benchmark's streams (`--cpu-prof`), and a router carrying thousands of streams at tens of tokens a
 * second observes hundreds of thousands of gaps a second. Here the series of a pair of label values
 * is found through two `Map`s keyed by the values (nothing allocated once it exists), and an
 * observation adds to prom-client's own record of the series exactly what prom-client's `observe`
 * adds: the value to `sum`, one to `count`, one to the first bucket whose upper bound is at least the
 * value (none above the last: `+Inf` is the count). What a scrape shows is prom-client's, bit for bit.
 *
 * prom-client internals, used only here (test/metrics/hot-histogram.test.ts pins them against a plain
 * Histogram fed the same values): a series' record is the object `zero(labels)` stores in the
 * histogram's `hashMap`, found by its `labels` object, with `bucketValues` keyed by upper bound, `sum`
 * and `count`. A series leaves only through {@link HotHistogram.removeWhere}; nothing may reset the
 * histogram or remove a series behind this class's back (its record would no longer be read).
 */
import { Histogram } from './prom.js';
import type { Registry } from 'prom-client';

/** prom-client's record of one series (lib/histogram.js `createBaseValues`). */
interface SeriesRecord {
  labels: object;
  bucketValues: Record<number, number>;
  sum: number;
  count: number;
}

interface Series<L extends string> {
  readonly labels: Readonly<Record<L, string>>;
  readonly record: SeriesRecord;
}

export interface HotHistogramConfiguration<L extends string> {
  name: string;
  help: string;
  /** Two label names, in the order the exposition shows them and `observe` takes their values. */
  labelNames: readonly [L, L];
  /** Upper bounds, ascending. */
  buckets: readonly number[];
  registers: Registry[];
}

export class HotHistogram<L extends string> {
  /** The prom-client histogram (registered; its series are written here). */
  readonly histogram: Histogram<L>;
  private readonly name: string;
  private readonly names: readonly [L, L];
  private readonly bounds: readonly number[];
  private readonly root = new Map<string, Map<string, Series<L>>>();

  constructor(config: HotHistogramConfiguration<L>) {
    if (config.buckets.some((b, i) => i > 0 && b <= config.buckets[i - 1]!)) throw new Error(`${config.name}: buckets must ascend`);
    this.name = config.name;
    this.names = config.labelNames;
    this.bounds = [...config.buckets];
    this.histogram = new Histogram({ name: config.name, help: config.help, labelNames: config.labelNames, buckets: [...config.buckets], registers: config.registers });
  }

  /** One observation for the series of these label values. */
  observe(a: string, b: string, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`${this.name}: not a finite number: ${value}`);
    let level = this.root.get(a);
    if (!level) this.root.set(a, (level = new Map<string, Series<L>>()));
    let series = level.get(b);
    if (!series) level.set(b, (series = this.create(a, b)));
    const { record } = series;
    record.sum += value;
    record.count += 1;
    const { bounds } = this;
    for (let i = 0; i < bounds.length; i++) {
      const bound = bounds[i]!;
      if (value <= bound) {
        record.bucketValues[bound]! += 1;
        return;
      }
    }
  }

  /** Removes every series whose labels `gone` says left. */
  removeWhere(gone: (labels: Readonly<Record<L, string>>) => boolean): void {
    for (const [a, level] of this.root) {
      for (const [b, series] of level) {
        if (!gone(series.labels)) continue;
        level.delete(b);
        this.histogram.remove(series.labels);
      }
      if (level.size === 0) this.root.delete(a);
    }
  }

  private create(a: string, b: string): Series<L> {
    const labels = { [this.names[0]]: a, [this.names[1]]: b } as Record<L, string>;
    this.histogram.zero(labels);
    const records = (this.histogram as unknown as { hashMap: Record<string, SeriesRecord> }).hashMap;
    const record = Object.values(records).find((r) => r.labels === labels);
    if (!record || typeof record.sum !== 'number' || typeof record.bucketValues !== 'object') throw new Error(`${this.name}: prom-client keeps its series differently than this version expects`);
    return { labels, record };
  }
}
