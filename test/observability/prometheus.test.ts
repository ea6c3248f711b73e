/**
 * The dashboard and the alert rules proven on a real Prometheus (Debian's `prometheus` package, as
 * .ci/run installs it): a router in front of two simulated engines, Prometheus scraping its admin
 * /metrics every second with the shipped rule file loaded, scripted traffic, then every dashboard
 * query evaluated through Prometheus' HTTP API, promtool's linters over the rules and the router's
 * exposition, no alert on a healthy run, the health-check alert for a replica whose /health fails,
 * the breaker alert for a replica killed under traffic, and a traced request's trace id stored as an
 * exemplar of the latency histograms (Prometheus scrapes OpenMetrics, exemplar storage on).
 *
 * The rules' `for:` durations (minutes) cannot be overridden, so the killed replica is shown by the
 * alert's expression matching through the query API and the rule manager holding the alert as
 * pending; waiting out `for:` is left to the rule's own semantics.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { buildConfig } from '../../src/config/load.js';
import { startRouter, type RunningRouter } from '../../src/main.js';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { promtool, startPrometheus, until, type PrometheusServer, type QueryAnswer } from '../helpers/prometheus.js';
import { captureLogs, KEY } from '../helpers/router.js';
import { startTestSim } from '../helpers/sim.js';

const RULES = fileURLToPath(new URL('../../charts/modelgate/alerts/modelgate.rules.yaml', import.meta.url));
const DASHBOARD = fileURLToPath(new URL('../../charts/modelgate/dashboards/modelgate.json', import.meta.url));
/** Grafana's `$__rate_interval` for a 1 s scrape, wide enough to still hold the scripted traffic when the panels are read. */
const RATE_INTERVAL = '1m';
/** How long a query may take to show what the traffic fed it (scrapes and evaluations run every second). */
const SHOWS_WITHIN_MS = 10_000;

/**
 * Panels that stay empty in this setup by design, with the reason. Every other panel must answer.
 * Keyed by panel title and refId.
 */
const EMPTY_HERE: Record<string, string> = {
  'Queue wait p95 and rejections/A': 'no request waits in a queue: the pool has capacity to spare for the scripted traffic',
  'Shed requests and fallbacks per second/B': 'one pool, no fallback deployment: nothing can fall back',
  'Redis up and router count/A': 'Redis-only: limits.redis is not set',
  'Redis up and router count/B': 'Redis-only: limits.redis is not set',
  'Redis up and router count/C': 'Redis-only: limits.redis is not set',
  'Redis round trip p99 and errors/A': 'Redis-only: limits.redis is not set',
  'Redis round trip p99 and errors/B': 'Redis-only: limits.redis is not set',
  'Requests per key by outcome/A': 'opt-in limits.keyMetrics is off',
  'Tokens per second per key/A': 'opt-in limits.keyMetrics is off',
  'Token budget remaining per key/A': 'opt-in limits.keyMetrics is off (and no key has a budget)',
  'Watch health/A': 'Kubernetes mode only: this router discovers statically',
  'Seconds since last full list/A': 'Kubernetes mode only',
  'Watch restarts and status writer/A': 'Kubernetes mode only',
  'Watch restarts and status writer/B': 'Kubernetes mode only (the status-writer Lease)',
};

interface Panel {
  title: string;
  type: string;
  targets?: Array<{ expr: string; refId: string }>;
}
const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[] };
const rules = parse(readFileSync(RULES, 'utf8')) as { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> };
const alertExpr = (alert: string): string => rules.groups.flatMap((g) => g.rules).find((r) => r.alert === alert)?.expr ?? '';

let simA: SimServer;
let simB: SimServer;
let router: RunningRouter;
let dir: string;
let prometheus: PrometheusServer;
let otlp: http.Server;

/** The trace ids of the requests the client sent sampled (tracing.sampleRatio is 0: only these are kept). */
const TRACED = ['4bf92f3577b34da6a3ce929d0e0e4736', '0af7651916cd43dd8448eb211c80319c'];
const traceparent = (traceId: string): string => `00-${traceId}-00f067aa0ba902b7-01`;

beforeAll(async () => {
  simA = await startTestSim({ model: ['served/llm'], itlMs: 1, outputMin: 4, outputMax: 8 });
  simB = await startTestSim({ model: ['served/llm'], itlMs: 1, outputMin: 4, outputMax: 8 });
  // an OTLP receiver that takes the spans and drops them: the exemplars, not the spans, are tested here
  otlp = http.createServer((req, res) => req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}')));
  await new Promise<void>((resolve) => otlp.listen(0, '127.0.0.1', resolve));
  dir = await mkdtemp(join(tmpdir(), 'modelgate-prom-test-'));
  await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
  const config = buildConfig(
    {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      // traces kept only when the client sampled them: their ids become exemplars
      tracing: { enabled: true, sampleRatio: 0, endpoint: `http://127.0.0.1:${(otlp.address() as AddressInfo).port}/v1/traces` },
      resilience: {
        maxConcurrencyPerReplica: 8,
        // a killed replica's breaker opens at its first failed request, well before two failed health checks eject it
        breaker: { failureThreshold: 1, cooldownMs: 3_000 },
        healthCheck: { enabled: true, intervalMs: 1_000, unhealthyThreshold: 2, healthyThreshold: 1 },
      },
      pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat', 'completions', 'embeddings'], endpoints: [simA.url, simB.url] }],
      deployments: [{ id: 'llm-prod', model: 'llm', targets: [{ pool: 'llm' }] }],
    },
    dir,
  );
  // Node's process metrics on, as users run it: promtool lints them too
  router = await startRouter(config, { logger: captureLogs().logger, processMetrics: true });
  prometheus = await startPrometheus({ targets: [new URL(router.adminUrl).host], ruleFiles: [RULES], features: ['exemplar-storage'] });
  await until(async () => ((await value(prometheus.query('up'))) === 1 ? true : undefined), 'a first scrape of the router', SHOWS_WITHIN_MS);
  // two waves, each scraped: a series a wave creates has its first sample, and the next wave's increase, in every rate() window
  for (let wave = 0; wave < 2; wave++) {
    await scriptedTraffic(TRACED[wave]!);
    await scraped();
  }
}, 60_000);

/** Resolves once Prometheus holds, from two scrapes in a row, the request count the router reports now. */
async function scraped(): Promise<void> {
  const answered = metricValue(await exposition(), 'modelgate_requests_total');
  await until(async () => ((await value(prometheus.query('sum(modelgate_requests_total offset 1s)'))) === answered ? true : undefined), 'Prometheus to scrape the traffic', SHOWS_WITHIN_MS);
}

afterAll(async () => {
  await prometheus?.stop();
  await router?.close();
  await simA?.close();
  await simB?.close();
  await new Promise((resolve) => otlp?.close(resolve));
  if (dir) await rm(dir, { recursive: true, force: true });
});

const chat = (body: object, key = KEY, headers: Record<string, string> = {}): Promise<{ status: number }> =>
  rawRequest(`${router.apiUrl}/v1/chat/completions`, { headers: { authorization: `Bearer ${key}`, ...headers }, body });
const PREFIX = 'You are a careful assistant. Answer briefly and precisely, citing nothing. '.repeat(6);

/** Streams and plain answers on three APIs, shared prompt prefixes (prefix hits), a 404 for an unknown model, a 401, and one stream the client traced. */
async function scriptedTraffic(traceId: string): Promise<void> {
  const requests: Array<Promise<{ status: number }>> = [];
  requests.push(chat({ model: 'llm', stream: true, messages: [{ role: 'user', content: 'traced' }] }, KEY, { traceparent: traceparent(traceId) }));
  for (let i = 0; i < 12; i++) {
    requests.push(chat({ model: 'llm', stream: i % 2 === 0, messages: [{ role: 'user', content: `${PREFIX} question ${i}` }] }));
    requests.push(rawRequest(`${router.apiUrl}/v1/completions`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'llm', prompt: `${PREFIX} ${i}`, stream: i % 3 === 0 } }));
  }
  requests.push(rawRequest(`${router.apiUrl}/v1/embeddings`, { headers: { authorization: `Bearer ${KEY}` }, body: { model: 'llm', input: 'hello' } }));
  requests.push(chat({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }));
  requests.push(chat({ model: 'llm', messages: [{ role: 'user', content: 'hi' }] }, 'sk-wrong-key-0000000000'));
  const statuses = (await Promise.all(requests)).map((r) => r.status);
  expect(statuses.filter((s) => s === 200)).toHaveLength(statuses.length - 2);
}

async function exposition(): Promise<string> {
  return (await rawRequest(`${router.adminUrl}/metrics`)).body;
}

function metricValue(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

/** The single sample's value of an answer (undefined when there is none, or several). */
async function value(answer: Promise<QueryAnswer>): Promise<number | undefined> {
  const a = await answer;
  return a.ok && a.result.length === 1 ? Number(a.result[0]!.value[1]) : undefined;
}

/** The dashboard's query as Grafana sends it with every variable at "All". */
const asGrafanaSends = (expr: string): string => expr.replaceAll('$__rate_interval', RATE_INTERVAL).replaceAll('$deployment', '.*').replaceAll('$pool', '.*');

describe('on a real Prometheus', () => {
  it('promtool accepts the rule file', async () => {
    const { code, output } = await promtool(['check', 'rules', RULES]);
    expect({ code, output }).toEqual({ code: 0, output: expect.stringContaining('SUCCESS') });
  });

  it('promtool runs the rules over their full `for:`: a cycling breaker, half the engine scrapes failing, and queue timeouts alert; a healthy queue does not', async () => {
    const { code, output } = await promtool(['test', 'rules', fileURLToPath(new URL('modelgate.rules.test.yaml', import.meta.url))]);
    expect({ code, output }).toEqual({ code: 0, output: expect.stringContaining('SUCCESS') });
  });

  it("promtool's linter finds nothing in the router's exposition (Node's process metrics included)", async () => {
    const text = await exposition();
    expect(text).toContain('nodejs_heap_size_used_bytes');
    expect(await promtool(['check', 'metrics'], text)).toEqual({ code: 0, output: '' });
  });

  it('answers every dashboard query under traffic (the allow-listed panels aside, each with its reason)', async () => {
    const targets = dashboard.panels.filter((p) => p.type !== 'row').flatMap((p) => (p.targets ?? []).map((t) => ({ key: `${p.title}/${t.refId}`, expr: asGrafanaSends(t.expr) })));
    expect(targets.length).toBeGreaterThan(30);
    for (const key of Object.keys(EMPTY_HERE)) expect(targets.map((t) => t.key)).toContain(key); // no stale entry
    const failures: string[] = [];
    const stillEmpty: string[] = [];
    let waiting: Array<{ key: string; expr: string }> = [];
    for (const { key, expr } of targets) {
      const answer = await prometheus.query(expr);
      if (!answer.ok) failures.push(`${key}: ${answer.error}`);
      else if (key in EMPTY_HERE) {
        if (answer.result.length > 0) stillEmpty.push(`${key} answers: drop it from EMPTY_HERE`);
      } else if (answer.result.length === 0) waiting.push({ key, expr });
    }
    // a series the last requests created may need another scrape or two before rate() sees it
    await until(
      async () => {
        const answers = await Promise.all(waiting.map(async (t) => ({ ...t, answer: await prometheus.query(t.expr) })));
        waiting = answers.filter((a) => !a.answer.ok || a.answer.result.length === 0);
        return waiting.length === 0 ? true : undefined;
      },
      'every panel to answer',
      SHOWS_WITHIN_MS,
    ).catch(() => undefined);
    failures.push(...waiting.map((t) => `${t.key}: no series under traffic that feeds it`));
    expect(failures).toEqual([]);
    expect(stillEmpty).toEqual([]);
  }, 30_000);

  it('shows a 5xx ratio of 0 (not an empty panel), the prefix-cache hit ratio, and the unresolved model under a named legend', async () => {
    const panel = (title: string): string => asGrafanaSends(dashboard.panels.find((p) => p.title === title)?.targets?.[0]?.expr ?? '');
    expect(await value(prometheus.query(`sum(${panel('5xx ratio')})`))).toBe(0);
    const hit = await prometheus.query(panel('Prefix-cache hit ratio'));
    expect(hit.ok && hit.result.map((s) => s.metric.pool)).toEqual(['llm']);
    const ratio = hit.ok ? Number(hit.result[0]!.value[1]) : NaN;
    expect(ratio).toBeGreaterThan(0); // the shared prefix hit
    expect(ratio).toBeLessThan(1); // and each first prompt missed
    const rps = await prometheus.query(panel('Requests per second'));
    const deployments = rps.ok ? rps.result.map((s) => s.metric.deployment).sort() : [];
    expect(deployments).toEqual(['(no deployment)', 'llm-prod']);
  });

  it('fires no alert on a healthy run: the rule manager holds none, and no rule expression matches', async () => {
    expect(await prometheus.alerts()).toEqual([]);
    for (const rule of rules.groups.flatMap((g) => g.rules)) {
      const answer = await prometheus.query(rule.expr);
      expect({ alert: rule.alert, answer }).toEqual({ alert: rule.alert, answer: { ok: true, result: [] } });
    }
  });

  it("keeps a traced request's trace id as an exemplar of the duration and TTFT histograms, and no other (untraced requests carry none)", async () => {
    for (const histogram of ['modelgate_request_duration_seconds_bucket', 'modelgate_time_to_first_token_seconds_bucket']) {
      const series = await prometheus.exemplars(`${histogram}{deployment="llm-prod"}`, 300);
      const traceIds = new Set(series.flatMap((s) => s.exemplars.map((e) => e.labels.trace_id)));
      expect({ histogram, traceIds: [...traceIds].sort() }).toEqual({ histogram, traceIds: [...TRACED].sort() });
    }
    // what Prometheus asked for and got: OpenMetrics, with the exemplars on the bucket lines
    const scrape = await rawRequest(`${router.adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' } });
    expect(scrape.headers['content-type']).toMatch(/^application\/openmetrics-text/);
    expect(scrape.body).toMatch(new RegExp(`^modelgate_time_to_first_token_seconds_bucket\\{.*\\} \\d+ # \\{trace_id="(${TRACED.join('|')})"\\} `, 'm'));
    expect(scrape.body.endsWith('# EOF\n')).toBe(true);
  });

  it('alerts on a replica its health checks eject (breaker closed): ModelgateReplicasNotReady matches and goes pending, ModelgateBreakerOpen does not', async () => {
    simA.configure({ unhealthy: true });
    try {
      await until(async () => ((await value(prometheus.query('modelgate_pool_ready_endpoints{pool="llm"}'))) === 1 ? true : undefined), 'the pool to count one ready replica', SHOWS_WITHIN_MS);
      const matched = await until(
        async () => {
          const a = await prometheus.query(alertExpr('ModelgateReplicasNotReady'));
          return a.ok && a.result.length > 0 ? a.result.map((s) => ({ pool: s.metric.pool, notReady: Number(s.value[1]) })) : undefined;
        },
        'ModelgateReplicasNotReady to match',
        SHOWS_WITHIN_MS,
      );
      expect(matched).toEqual([{ pool: 'llm', notReady: 1 }]);
      expect(await prometheus.query(alertExpr('ModelgateBreakerOpen'))).toEqual({ ok: true, result: [] });
      const pending = await until(
        async () => {
          const alerts = (await prometheus.alerts()).filter((a) => a.labels.alertname === 'ModelgateReplicasNotReady');
          return alerts.length > 0 ? alerts : undefined;
        },
        'the rule manager to hold ModelgateReplicasNotReady',
        SHOWS_WITHIN_MS,
      );
      expect(pending.map((a) => ({ pool: a.labels.pool, state: a.state }))).toEqual([{ pool: 'llm', state: 'pending' }]);
    } finally {
      simA.configure({ unhealthy: false });
    }
    await until(async () => ((await value(prometheus.query('modelgate_pool_ready_endpoints{pool="llm"}'))) === 2 ? true : undefined), 'the replica to pass its health check again', SHOWS_WITHIN_MS);
    await until(async () => ((await prometheus.alerts()).length === 0 ? true : undefined), 'the alert to clear', SHOWS_WITHIN_MS);
  });

  it('alerts on a replica killed under traffic: it leaves the ready counts and ModelgateBreakerOpen matches, then goes pending', async () => {
    const dead = simB.url;
    let traffic = true;
    const load = (async () => {
      while (traffic) await chat({ model: 'llm', messages: [{ role: 'user', content: 'still there?' }] });
    })();
    try {
      await simB.close();
      const ready = await until(
        async () => ((await value(prometheus.query('modelgate_pool_ready_endpoints{pool="llm"}'))) === 1 ? 1 : undefined),
        'the pool to count one ready replica',
        SHOWS_WITHIN_MS,
      );
      expect(ready).toBe(1);
      expect(await value(prometheus.query('modelgate_deployment_ready_endpoints{deployment="llm-prod"}'))).toBe(1);
      const matched = await until(
        async () => {
          const a = await prometheus.query(alertExpr('ModelgateBreakerOpen'));
          return a.ok && a.result.length > 0 ? a.result.map((s) => s.metric.endpoint) : undefined;
        },
        'ModelgateBreakerOpen to match',
        SHOWS_WITHIN_MS,
      );
      expect(matched).toEqual([dead]);
      const pending = await until(
        async () => {
          const alerts = (await prometheus.alerts()).filter((a) => a.labels.alertname === 'ModelgateBreakerOpen');
          return alerts.length > 0 ? alerts : undefined;
        },
        'the rule manager to hold ModelgateBreakerOpen',
        SHOWS_WITHIN_MS,
      );
      expect(pending.map((a) => ({ endpoint: a.labels.endpoint, state: a.state }))).toEqual([{ endpoint: dead, state: 'pending' }]);
    } finally {
      traffic = false;
      await load;
    }
  });
});
