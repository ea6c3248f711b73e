/**
 * Diagnostic preload for the router process (procs.ts adds `--import` of this file to its NODE_OPTIONS
 * when BENCH_ROUTER_GC_LOG=DIR is set; `--trace-gc` is not allowed in NODE_OPTIONS): every GC pause
 * with its wall-clock start, kind and duration, as JSON lines in DIR/gc-PID.jsonl.
 */
import { appendFileSync } from 'node:fs';
import { constants, performance, PerformanceObserver } from 'node:perf_hooks';

const file = `${process.env.BENCH_ROUTER_GC_LOG ?? '.'}/gc-${process.pid}.jsonl`;
const KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
let buffered: string[] = [];
const flush = (): void => {
  if (buffered.length === 0) return;
  appendFileSync(file, `${buffered.join('\n')}\n`);
  buffered = [];
};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0;
    buffered.push(JSON.stringify({ at: Math.round(performance.timeOrigin + e.startTime), kind: KINDS[kind] ?? String(kind), ms: Math.round(e.duration * 1000) / 1000 }));
  }
}).observe({ entryTypes: ['gc'] });
setInterval(flush, 1000).unref();
process.on('exit', flush);
