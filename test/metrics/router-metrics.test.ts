/**
 * RouterMetrics' series hygiene and buckets (issue 20, found on a real Prometheus 2.42): labelled
 * counters exist at 0 for known deployments and pools, the series of a deployment, pool or endpoint
 * leave with it, the prefix hit ratio counts whole prompts, the
 * histograms reach the default timeouts, and "ready" means "can take a request now".
 */
import { describe, expect, it } from '@jest/globals';
import { RouterMetrics, type MetricSources } from '../../src/metrics/metrics.js';
import { DURATION_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS } from '../../src/metrics/traffic.js';
import { HOLD_EVENTS, LIMIT_REASONS, RETRY_REASONS, SLO_RESULTS } from '../../src/metrics/labels.js';
import { RESILIENCE_DEFAULTS } from '../../src/resilience/settings.js';
import { RESUME_REASONS } from '../../src/core/types.js';
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
    for (const result of SLO_RESULTS) expect(text).toContain(`modelgate_goodput_requests_total{deployment="llm-prod",result="${result}"} 0`);
  });

  it('starts requests (code 200 per API the pool serves), retries, fallbacks, held requests, limit rejections and previous-response outcomes at 0', async () => {
    const metrics = new RouterMetrics(
      {
        ...sources(new Set()),
        routes: () => [{ deployment: 'llm-prod', pool: 'llm', apis: ['chat', 'completions'] }],
        fallbacks: () => [{ fromDeployment: 'llm-prod', fromPool: 'llm', toDeployment: 'llm-backup', toPool: 'backup' }],
        holdingPools: () => ['llm'],
      },
      { processMetrics: false },
    );
    metrics.observeDemand(() => [], true);
    metrics.observeLimits({ redis: false, keyMetrics: false });
    const text = await metrics.metrics();
    for (const route of ['chat', 'completions']) expect(text).toContain(`modelgate_requests_total{route="${route}",deployment="llm-prod",pool="llm",code="200"} 0`);
    expect(text).not.toContain('route="embeddings"');
    for (const reason of RETRY_REASONS) expect(text).toContain(`modelgate_retries_total{pool="llm",reason="${reason}"} 0`);
    expect(text).toContain('modelgate_fallbacks_total{from_deployment="llm-prod",from_pool="llm",to_deployment="llm-backup",to_pool="backup"} 0');
    for (const event of HOLD_EVENTS) expect(text).toContain(`modelgate_pool_held_requests_total{pool="llm",pool_namespace="",pool_name="llm",event="${event}"} 0`);
    for (const reason of LIMIT_REASONS) expect(text).toContain(`modelgate_limit_rejections_total{reason="${reason}"} 0`);
    expect(text).toContain('modelgate_previous_response_requests_total{outcome="pinned"} 0');
  });

  it("drops a removed key's series at the reload, and its request still under way does not bring them back", async () => {
    const metrics = new RouterMetrics(sources(new Set()), { processMetrics: false });
    const events = metrics.observeLimits({ redis: false, keyMetrics: true });
    events.keysNow?.(new Set(['a', 'b']));
    events.onAdmitted?.('a');
    events.onTokens?.('a', 13, 4);
    events.onBudget?.('a', { window: 'day', period: 'day:2026-11-29', limit: 1000, remaining: 1000, endsInMs: 3_600_000 });
    expect(await metrics.metrics()).toContain('modelgate_key_tokens_total{key="a",type="prompt"} 13');
    events.keysNow?.(new Set(['b'])); // key a revoked while one of its streams runs on
    expect(await metrics.metrics()).not.toContain('key="a"');
    events.onTokens?.('a', 0, 150); // that stream's tokens, and its end
    events.onAdmitted?.('a');
    events.onBudget?.('a', { window: 'day', period: 'day:2026-11-29', limit: 1000, remaining: 850, endsInMs: 3_600_000 });
    events.onBudgetSpent?.('a', { window: 'day', period: 'day:2026-11-29' }, 10);
    events.onRejected?.('a', 'requests');
    expect(await metrics.metrics()).not.toContain('key="a"');
    events.keysNow?.(new Set(['b', 'c'])); // a later reload
    const text = await metrics.metrics();
    expect(text).not.toContain('key="a"');
    expect(text).toContain('modelgate_limit_rejections_total{reason="requests"} 1'); // the router-wide count still counts it
  });

  it("starts a resumeStreams deployment's resumption counters at 0 before its first stream, and removes them when it leaves", async () => {
    let routes = [
      { deployment: 'resumes', pool: 'llm', resumable: true },
      { deployment: 'plain', pool: 'llm' },
    ];
    const metrics = new RouterMetrics({ ...sources(new Set()), routes: () => routes, deployments: () => routes.map((r) => r.deployment), pools: () => ['llm'] }, { processMetrics: false });
    let text = await metrics.metrics();
    for (const [result, reasons] of Object.entries(RESUME_REASONS))
      for (const reason of reasons) expect(text).toContain(`modelgate_stream_resumptions_total{deployment="resumes",result="${result}",reason="${reason}"} 0`);
    expect(text).not.toContain('modelgate_stream_resumptions_total{deployment="plain"');
    metrics.recordStreamResumption('resumes', 'resumed', 'upstream_broken');
    expect(metricSum(await metrics.metrics(), 'modelgate_stream_resumptions_total', { deployment: 'resumes' })).toBe(1);
    routes = [{ deployment: 'plain', pool: 'llm' }];
    text = await metrics.metrics();
    expect(text).not.toContain('deployment="resumes"');
  });

  it('removes the series of a deployment and of a pool once discovery no longer knows them, and keeps the unresolved ones', async () => {
    let deployments = ['llm-prod', 'old'];
    let pools = ['llm', 'old-pool'];
    const metrics = new RouterMetrics({ ...sources(new Set()), routes: () => [], deployments: () => deployments, pools: () => pools }, { processMetrics: false });
    metrics.recordRequest('chat', 'old', 'old-pool', 200, 0.1);
    metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 0.1);
    metrics.recordRequest('chat', '', '', 404, 0.001);
    metrics.recordTimeToFirstToken({ deployment: 'old', pool: 'old-pool' }, 0.05);
    metrics.recordRetry('old-pool', 'connect');
    metrics.recordFallback('llm-prod', 'old-pool', 'llm-prod', 'llm');
    metrics.recordGoodput('old', 'within');
    expect(await metrics.metrics()).toContain('modelgate_goodput_requests_total{deployment="old",result="within"} 1');
    deployments = ['llm-prod'];
    pools = ['llm'];
    const text = await metrics.metrics();
    expect(text).not.toContain('"old');
    expect(metricSum(text, 'modelgate_requests_total', { deployment: 'llm-prod' })).toBe(1);
    expect(metricSum(text, 'modelgate_requests_total', { deployment: '' })).toBe(1);
    expect(metricSum(text, 'modelgate_request_duration_seconds_count', { deployment: 'llm-prod' })).toBe(1);
  });

  it("counts a prompt's trailing partial block as its fraction of a miss, so hit / (hit + miss) is the share of the prompt cached", async () => {
    const metrics = new RouterMetrics(sources(new Set()), { processMetrics: false });
    metrics.recordPrefixBlocks('llm', 4, 4.5); // 4 full blocks cached, half a block more of prompt
    metrics.recordPrefixBlocks('llm', 0, 0.25); // a prompt shorter than one block
    const text = await metrics.metrics();
    expect(metricSum(text, 'modelgate_prefix_blocks_total', { result: 'hit' })).toBe(4);
    expect(metricSum(text, 'modelgate_prefix_blocks_total', { result: 'miss' })).toBeCloseTo(0.75);
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

  it("removes a deleted pool's KV-event and predicted-prefix series, and keeps those of pools still listed", async () => {
    let pools = ['llm', 'old-pool'];
    const metrics = new RouterMetrics({ ...sources(new Set()), routes: () => [], deployments: () => [], pools: () => pools }, { processMetrics: false });
    const kv = metrics.observeKvEvents(() => []);
    for (const pool of pools) {
      kv.predicted(pool, 'estimate', 1, 3); // every pick of a pool with the prefix scorer, kvEvents on or off
      kv.batch(pool, 2, 1, 1);
      kv.gap(pool, false);
      kv.badPayload(pool, 'malformed');
      kv.throttled(pool, 5);
    }
    expect(await metrics.metrics()).toContain('modelgate_prefix_predicted_blocks_total{pool="old-pool"');
    pools = ['llm'];
    const text = await metrics.metrics();
    expect(text).not.toContain('old-pool');
    for (const name of [
      'modelgate_prefix_predicted_blocks_total',
      'modelgate_kv_events_received_total',
      'modelgate_kv_events_gaps_total',
      'modelgate_kv_events_bad_payloads_total',
      'modelgate_kv_events_throttled_seconds_total',
    ])
      expect(metricSum(text, name, { pool: 'llm' })).toBeGreaterThan(0);
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

  it('forgets the attempt counts of endpoints that left when discovery drops them, before any scrape', async () => {
    const live = new Set(['http://a:8000', 'http://b:8000']);
    const metrics = new RouterMetrics(sources(live), { processMetrics: false });
    metrics.recordAttempt('llm', 'http://a:8000', 'committed');
    metrics.recordAttempt('llm', 'http://b:8000', 'committed');
    metrics.forgetEndpoints(new Set(['http://a:8000'])); // b left (a router nobody scrapes keeps nothing of it)
    const text = await metrics.metrics(); // b is listed again by the time of the scrape: its count started over
    expect(text).not.toContain('http://b:8000');
    expect(metricSum(text, 'modelgate_upstream_attempts_total', { endpoint: 'http://a:8000' })).toBe(1);
  });

  it('counts an endpoint that left and came back from 0, under the labels it has now', async () => {
    const live = new Set(['http://a:8000']);
    const metrics = new RouterMetrics(sources(live), { processMetrics: false });
    metrics.recordAttempt('llm', 'http://a:8000', 'committed');
    metrics.recordAttempt('llm', 'http://a:8000', 'committed');
    expect(await metrics.metrics()).toContain('modelgate_upstream_attempts_total{pool="llm",endpoint="http://a:8000",outcome="committed"} 2');
    metrics.recordAttempt('llm', 'http://a:8000', 'committed'); // after the scrape, before the endpoint left: goes with it
    live.delete('http://a:8000');
    expect(await metrics.metrics()).not.toContain('http://a:8000');
    live.add('http://a:8000');
    metrics.recordAttempt('other', 'http://a:8000', 'upstream_503');
    const text = await metrics.metrics();
    expect(text).toContain('modelgate_upstream_attempts_total{pool="other",endpoint="http://a:8000",outcome="upstream_503"} 1');
    expect(text).not.toContain('outcome="committed"');
  });

  it('shows every request counted before each scrape, the same counts again when nothing happened, and the seeded zeros untouched', async () => {
    const metrics = new RouterMetrics({ ...sources(new Set()), routes: () => [{ deployment: 'llm-prod', pool: 'llm', apis: ['chat', 'embeddings'] }] }, { processMetrics: false });
    const labels = { deployment: 'llm-prod', pool: 'llm' };
    for (let scrape = 1; scrape <= 3; scrape++) {
      metrics.recordRequest('chat', 'llm-prod', 'llm', 200, 0.1);
      metrics.recordRequest('chat', 'llm-prod', 'llm', 503, 0.1);
      metrics.recordTokens(labels, 100, 7);
      metrics.recordResponseEnd(labels, 'complete');
      metrics.recordGoodput('llm-prod', 'within');
      const text = await metrics.metrics();
      expect(await metrics.metrics()).toBe(text);
      expect(text).toContain(`modelgate_requests_total{route="chat",deployment="llm-prod",pool="llm",code="200"} ${scrape}`);
      expect(text).toContain(`modelgate_requests_total{route="chat",deployment="llm-prod",pool="llm",code="503"} ${scrape}`);
      expect(text).toContain('modelgate_requests_total{route="embeddings",deployment="llm-prod",pool="llm",code="200"} 0');
      expect(text).toContain(`modelgate_prompt_tokens_total{deployment="llm-prod",pool="llm"} ${100 * scrape}`);
      expect(text).toContain(`modelgate_completion_tokens_total{deployment="llm-prod",pool="llm"} ${7 * scrape}`);
      expect(text).toContain(`modelgate_response_ends_total{deployment="llm-prod",pool="llm",end="complete"} ${scrape}`);
      expect(text).toContain('modelgate_response_ends_total{deployment="llm-prod",pool="llm",end="client_gone"} 0');
      expect(text).toContain(`modelgate_goodput_requests_total{deployment="llm-prod",result="within"} ${scrape}`);
      expect(text).toContain('modelgate_goodput_requests_total{deployment="llm-prod",result="failed"} 0');
      expect(metricSum(await metrics.openMetrics(), 'modelgate_requests_total', { code: '200' })).toBe(scrape);
    }
  });

  it('counts a deployment that left and came back from 0, and seeds its zeros again', async () => {
    let deployments = ['llm-prod'];
    const metrics = new RouterMetrics(
      { ...sources(new Set()), routes: () => deployments.map((deployment) => ({ deployment, pool: 'llm' })), deployments: () => deployments, pools: () => ['llm'] },
      { processMetrics: false },
    );
    metrics.recordGoodput('llm-prod', 'within');
    metrics.recordTokens({ deployment: 'llm-prod', pool: 'llm' }, 10, 1);
    metrics.recordInterToken('llm-prod', 'llm', 0.02);
    expect(await metrics.metrics()).toContain('modelgate_goodput_requests_total{deployment="llm-prod",result="within"} 1');
    expect(await metrics.metrics()).toContain('modelgate_inter_token_latency_seconds_count{deployment="llm-prod",pool="llm"} 1');
    metrics.recordGoodput('llm-prod', 'within'); // pending when the deployment leaves
    deployments = [];
    expect(await metrics.metrics()).not.toContain('llm-prod');
    deployments = ['llm-prod'];
    expect(await metrics.metrics()).toContain('modelgate_goodput_requests_total{deployment="llm-prod",result="within"} 0');
    metrics.recordGoodput('llm-prod', 'within');
    metrics.recordInterToken('llm-prod', 'llm', 0.03);
    const text = await metrics.metrics();
    expect(text).toContain('modelgate_goodput_requests_total{deployment="llm-prod",result="within"} 1');
    expect(text).not.toContain('modelgate_prompt_tokens_total{deployment="llm-prod"');
    // the inter-token histogram (a HotHistogram) left with the deployment too: its series starts again
    expect(text).toContain('modelgate_inter_token_latency_seconds_count{deployment="llm-prod",pool="llm"} 1');
    expect(text).toContain('modelgate_inter_token_latency_seconds_sum{deployment="llm-prod",pool="llm"} 0.03');
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

describe('the demand gauges’ pool labels, for an HPA’s selector', () => {
  const demandOf = async (namespaced: boolean, pool: string): Promise<string> => {
    const metrics = new RouterMetrics(sources(new Set()), { processMetrics: false });
    metrics.observeDemand(() => [{ pool, inFlight: 2, waiting: 1, held: 0 }], namespaced);
    metrics.recordHold(pool, 'held');
    return metrics.metrics();
  };

  it('splits a Kubernetes pool key `namespace/name`', async () => {
    const text = await demandOf(true, 'team-a/llama');
    expect(text).toContain('modelgate_pool_demand_requests{pool="team-a/llama",pool_namespace="team-a",pool_name="llama"} 3');
    expect(text).toContain('modelgate_pool_held_requests_total{pool="team-a/llama",pool_namespace="team-a",pool_name="llama",event="held"} 1');
  });

  it('leaves a static pool’s name whole, a slash in it included (no namespace in static mode)', async () => {
    const text = await demandOf(false, 'meta-llama/Llama-3.1-8B');
    expect(text).toContain('modelgate_pool_demand_requests{pool="meta-llama/Llama-3.1-8B",pool_namespace="",pool_name="meta-llama/Llama-3.1-8B"} 3');
    expect(text).toContain('modelgate_pool_held_requests_total{pool="meta-llama/Llama-3.1-8B",pool_namespace="",pool_name="meta-llama/Llama-3.1-8B",event="held"} 1');
  });
});
