/**
 * What becomes of spans the collector never takes: the batch processor gets the standard OTEL_BSP_*
 * settings (this SDK's processor reads none itself), every sampled span is either handed to the
 * exporter or counted as dropped for a full queue, and the log says the whole loss.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { batchSettings, createTracing } from '../../src/tracing/otel.js';
import { exportWatch } from '../../src/wiring/log-watches.js';
import { waitFor } from '../helpers/sim.js';
import { startRefusingCollector } from '../helpers/collector.js';
import { captureLogs as captureLines } from '../helpers/router.js';

/** A logger, and its lines parsed. */
function captureLogs(): { logs: () => Array<Record<string, unknown>>; logger: ReturnType<typeof captureLines>['logger'] } {
  const { logs, logger } = captureLines();
  return { logs: () => logs.map((line) => JSON.parse(line) as Record<string, unknown>), logger };
}

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

describe('batchSettings', () => {
  it('reads the OTEL_BSP_* variables, keeps the defaults for unset or invalid ones, and never batches more than the queue holds', () => {
    expect(batchSettings({})).toEqual({ scheduledDelayMillis: 5000, exportTimeoutMillis: 30_000, maxQueueSize: 2048, maxExportBatchSize: 512 });
    expect(batchSettings({ OTEL_BSP_SCHEDULE_DELAY: '250', OTEL_BSP_EXPORT_TIMEOUT: '1000', OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '500' })).toEqual({
      scheduledDelayMillis: 250,
      exportTimeoutMillis: 1000,
      maxQueueSize: 100,
      maxExportBatchSize: 100,
    });
    expect(batchSettings({ OTEL_BSP_SCHEDULE_DELAY: 'soon', OTEL_BSP_MAX_QUEUE_SIZE: '-1', OTEL_BSP_EXPORT_TIMEOUT: '1.5', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: ' ' })).toEqual(batchSettings({}));
  });
});

describe('spans the collector does not take', () => {
  it('are each either handed to the exporter or counted dropped for a full queue, and the log says them all', async () => {
    const refusing = await startRefusingCollector();
    closers.push(() => refusing.close());
    const endpoint = refusing.url;
    let exported = 0;
    let full = 0;
    const { logs, logger } = captureLogs();
    const watch = exportWatch(logger);
    const tracing = createTracing(
      { endpoint, sampleRatio: 1, serviceName: 'test' },
      {
        exported: (ok, spans, error) => ((exported += spans), watch.exported(ok, spans, error)),
        queueFull: (spans) => ((full += spans), watch.queueFull(spans)),
      },
      // a queue of 4, batches of 2: twenty spans ended at once overflow it
      { OTEL_BSP_MAX_QUEUE_SIZE: '4', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2', OTEL_BSP_SCHEDULE_DELAY: '10' },
    );
    for (let i = 0; i < 20; i++) tracing.start('chat m', {}, 0).end({});
    // the last batches go at shutdown, which the collector refuses too (the router's shutdown goes on)
    await tracing.shutdown().catch(() => undefined);
    await waitFor(() => exported + full === 20, 'every span exported or counted dropped');
    expect(refusing.batches()).toBeGreaterThan(0);
    expect(full).toBeGreaterThan(0);
    const warned = logs().filter((l) => l.msg === 'trace export failed: spans are dropped until the collector takes them again');
    expect(warned).toHaveLength(1);
    // then the collector takes spans again: the whole loss is said (a full queue's drops before the
    // first failed export were said on their own, at once)
    watch.exported(true, 1);
    const said = logs().filter((l) => l.msg === 'trace export works again' || String(l.msg).startsWith('trace spans dropped'));
    expect(said.at(-1)?.msg).toBe('trace export works again');
    expect(said.reduce((n, l) => n + Number(l.dropped), 0)).toBe(20);
  });

  it('says spans dropped for a full queue while export works at most once a minute, with how many', () => {
    const { logs, logger } = captureLogs();
    let now = 0;
    const watch = exportWatch(logger, () => now);
    watch.queueFull(1);
    watch.exported(true, 2);
    watch.queueFull(3);
    now = 59_999;
    watch.queueFull(1);
    now = 60_000;
    watch.queueFull(1);
    const said = logs().filter((l) => String(l.msg).startsWith('trace spans dropped'));
    expect(said.map((l) => l.dropped)).toEqual([1, 5]);
    expect(logs().some((l) => l.msg === 'trace export works again')).toBe(false);
  });
});
