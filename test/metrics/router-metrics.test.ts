/**
 * RouterMetrics' series hygiene and buckets (issue 20, found on a real Prometheus 2.42): labelled
 * counters exist at 0 for known deployments and pools, an endpoint's series leave with it, the
 * histograms reach the default timeouts, and "ready" means "can take a request now".
 */
import { describe, expect, it } from '@jest/globals';
import { RouterMetrics, type MetricSources } from '../../src/metrics/metrics.js';
import { DURATION_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS } from '../../src/metrics/traffic.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { metricSum } from '../helpers/router.js';

function sources(live: Set<string>): MetricSources {
  return {
    inFlight: () => [],
    readyEndpoints: () => [],
    deploymentReadyEndpoints: () => [],
    queueLimits: () => [{ pool: 'llm', limit: 64 }],
    routes: () => [{ deployment: 'llm-prod', pool: 'llm' }],
    pools: () => ['llm'],
    liveEndpoints: () => live,
  };
}

describe('RouterMetrics', () => {
  it('starts the response-end, rejection, prefix and engine-scrape counters of known deployments and pools at 0 (rate() then sees their first event)', async () => {
    const text = await new RouterMetrics(sources(new Set()), { processMetrics: false }).metrics();
    for (const end of ['complete', 'client_gone', 'upstream_broken', 'idle_timeout', 'deadline'])
      expect(text).toContain(`modelgate_response_ends_total{deployment="llm-prod",pool="llm",end="${end}"} 0`);
    for (const reason of ['queue_full', 'queue_timeout', 'shed', 'no_replica_timeout']) expect(text).toContain(`modelgate_rejected_requests_total{pool="llm",reason="${reason}"} 0`);
    expect(text).toContain('modelgate_prefix_blocks_total{pool="llm",result="hit"} 0');
    expect(text).toContain('modelgate_prefix_blocks_total{pool="llm",result="miss"} 0');
    expect(text).toContain('modelgate_engine_scrapes_total{pool="llm",result="error"} 0');
  });

  it('keeps counting on top of the zeros', async () => {
    const metrics = new RouterMetrics(sources(new Set()), { processMetrics: false });
    await metrics.metrics();
    metrics.recordRejected('llm', 'queue_timeout');
    metrics.recordPrefixBlocks('llm', 0, 3);
    const text = await metrics.metrics();
    expect(metricSum(text, 'modelgate_rejected_requests_total', { reason: 'queue_timeout' })).toBe(1);
    expect(metricSum(text, 'modelgate_prefix_blocks_total', { result: 'miss' })).toBe(3);
    expect(metricSum(text, 'modelgate_prefix_blocks_total', { result: 'hit' })).toBe(0);
  });

  it('removes the attempts series of an endpoint that left, and keeps those of endpoints still listed', async () => {
    const live = new Set(['http://a:8000', 'http://b:8000']);
    const metrics = new RouterMetrics(sources(live), { processMetrics: false });
    metrics.recordAttempt('llm', 'http://a:8000', 'committed');
    metrics.recordAttempt('llm', 'http://b:8000', 'committed');
    metrics.recordAttempt('llm', 'http://b:8000', 'connect');
    expect(await metrics.metrics()).toContain('endpoint="http://b:8000"');
    live.delete('http://b:8000');
    const text = await metrics.metrics();
    expect(text).not.toContain('http://b:8000');
    expect(metricSum(text, 'modelgate_upstream_attempts_total', { endpoint: 'http://a:8000' })).toBe(1);
  });

  it('shows an empty queue of a pool with a concurrency limit as 0, not as a missing series', async () => {
    const metrics = new RouterMetrics(sources(new Set()), { processMetrics: false });
    metrics.observeResilience({ breakers: () => [], queues: () => [] });
    expect(await metrics.metrics()).toContain('modelgate_queue_depth{pool="llm"} 0');
  });
});

describe('histogram buckets', () => {
  it('reach the default first-byte timeout (TTFT) and total timeout (duration), and resolve inter-token gaps of a few ms', () => {
    expect(TTFT_BUCKETS.at(-1)).toBeGreaterThanOrEqual(RESILIENCE_DEFAULTS.timeouts.firstByteMs / 1000);
    expect(DURATION_BUCKETS.at(-1)).toBeGreaterThanOrEqual(RESILIENCE_DEFAULTS.timeouts.totalMs / 1000);
    expect(ITL_BUCKETS.filter((b) => b < 0.01).length).toBeGreaterThanOrEqual(3);
    for (const buckets of [TTFT_BUCKETS, DURATION_BUCKETS, ITL_BUCKETS]) expect([...buckets].sort((a, b) => a - b)).toEqual(buckets);
  });
});
