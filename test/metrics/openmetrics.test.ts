/**
 * The OpenMetrics exposition and the latency histograms' exemplars (issue 20): a scraper that prefers
 * OpenMetrics gets it, with a sampled trace's id on the duration and TTFT buckets; every other scraper
 * gets the classic text, unchanged — also after an OpenMetrics scrape (prom-client's own OpenMetrics
 * rendering renames the counters in place, which is why the router renders it itself).
 */
import { describe, expect, it } from '@jest/globals';
import { RouterMetrics, type MetricSources } from '../../src/metrics/metrics.js';
import { prefersOpenMetrics } from '../../src/metrics/openmetrics.js';
import { promtool } from '../helpers/prometheus.js';

const sources: MetricSources = {
  inFlight: () => [],
  readyEndpoints: () => [],
  deploymentReadyEndpoints: () => [],
  queueLimits: () => [],
  routes: () => [{ deployment: 'llm-prod', pool: 'llm', apis: ['chat'] }],
  pools: () => ['llm'],
  liveEndpoints: () => new Set(),
};
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const labels = { deployment: 'llm-prod', pool: 'llm' };

describe('prefersOpenMetrics', () => {
  it.each([
    ['application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1', true], // Prometheus 2.42
    ['application/openmetrics-text; version=1.0.0', true],
    ['text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5', false],
    ['application/openmetrics-text;q=0', false],
    ['text/plain', false],
    ['*/*', false],
    [undefined, false],
  ])('%s → %s', (accept, expected) => {
    expect(prefersOpenMetrics(accept)).toBe(expected);
  });
});

describe('exemplars', () => {
  it("puts a sampled trace's id on the bucket its duration and TTFT fell in, in the OpenMetrics text only", async () => {
    const metrics = new RouterMetrics(sources, { processMetrics: false, exemplars: true });
    metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 0.2, TRACE);
    metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 3); // not sampled: counted, no exemplar
    metrics.recordTimeToFirstToken(labels, 0.04, TRACE);
    const open = await metrics.openMetrics();
    const exemplarLines = open.split('\n').filter((l) => l.includes(' # {'));
    expect(exemplarLines).toEqual([
      expect.stringMatching(new RegExp(`^modelgate_request_duration_seconds_bucket\\{le="0.25",route="chat",deployment="llm-prod",pool="llm"\\} 1 # \\{trace_id="${TRACE}"\\} 0.2 \\d+(\\.\\d+)?$`)),
      expect.stringMatching(new RegExp(`^modelgate_time_to_first_token_seconds_bucket\\{le="0.05",deployment="llm-prod",pool="llm"\\} 1 # \\{trace_id="${TRACE}"\\} 0.04 \\d+(\\.\\d+)?$`)),
    ]);
    expect(open).toContain('modelgate_request_duration_seconds_count{route="chat",deployment="llm-prod",pool="llm"} 2');
    const classic = await metrics.metrics();
    expect(classic).not.toContain('trace_id');
    expect(classic).toContain('modelgate_request_duration_seconds_count{route="chat",deployment="llm-prod",pool="llm"} 2');
  });

  it('names counter families without `_total` in OpenMetrics, and leaves the classic text as it was after an OpenMetrics scrape', async () => {
    const metrics = new RouterMetrics(sources, { processMetrics: true, exemplars: true });
    metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 0.2, TRACE);
    const before = await metrics.metrics();
    const open = await metrics.openMetrics();
    expect(open).toContain('# TYPE modelgate_requests counter');
    expect(open).toContain('modelgate_requests_total{route="chat",deployment="llm-prod",pool="llm",code="200"} 1');
    expect(open.endsWith('\n# EOF\n')).toBe(true);
    expect(open.slice(0, -1).split('\n')).not.toContain(''); // OpenMetrics allows no blank line
    const after = await metrics.metrics();
    expect(after).toContain('# TYPE modelgate_requests_total counter');
    const ours = (text: string): string[] => text.split('\n').filter((line) => line.includes('modelgate_')); // Node's own series move between scrapes
    expect(ours(after)).toEqual(ours(before));
    expect(await promtool(['check', 'metrics'], after)).toEqual({ code: 0, output: '' });
  });

  it('ignores a trace id when exemplars are off (tracing off): plain histograms, classic observations', async () => {
    const metrics = new RouterMetrics(sources, { processMetrics: false });
    metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 0.2, TRACE);
    metrics.recordTimeToFirstToken(labels, 0.04, TRACE);
    const open = await metrics.openMetrics();
    expect(open).not.toContain('trace_id');
    expect(open).toContain('modelgate_time_to_first_token_seconds_count{deployment="llm-prod",pool="llm"} 1');
  });
});
