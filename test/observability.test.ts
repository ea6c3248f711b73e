/**
 * The Grafana dashboard, the alert rules and the README's metric table against what the router
 * really exports: every PromQL expression parses (Prometheus' own grammar), every series they name is
 * exported by a static-mode or a Kubernetes-mode router, and every exported series is documented.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { parser } from '@prometheus-io/lezer-promql';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { FakeKubeApi } from './helpers/fake-kube-api.js';
import { rawRequest } from './helpers/http.js';
import { endpointSlice, eventually, modelDeployment, modelPool, startKubeRouter, startPods } from './helpers/kube-env.js';
import { startRedisServer } from './helpers/redis-server.js';
import { chatSetup, KEY, startTestRouter } from './helpers/router.js';
import { startTestSim } from './helpers/sim.js';

const read = (path: string): string => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const dashboard = JSON.parse(read('charts/modelgate/dashboards/modelgate.json')) as {
  panels: Array<{ id: number; type: string; title: string; gridPos: { h: number; w: number; x: number; y: number }; datasource?: { uid: string }; targets?: Array<{ expr: string; refId: string }> }>;
};
const rules = parse(read('charts/modelgate/alerts/modelgate.rules.yaml')) as {
  groups: Array<{ name: string; rules: Array<{ alert: string; expr: string; for: string; labels: { severity: string }; annotations: { summary: string; description: string } }> }>;
};
const prometheusRule = parse(read('manifests/monitoring/prometheusrule.yaml')) as { kind: string; spec: { groups: unknown } };
const readme = read('README.md');

const exported = new Map<string, string>(); // family → type

function collect(text: string): void {
  for (const line of text.split('\n')) {
    const match = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (match) exported.set(match[1]!, match[2]!);
  }
}

beforeAll(async () => {
  const sim = await startTestSim({ model: ['served/llm'] });
  // limits shared through Redis, with the opt-in per-key series: every limits series is exported
  const redis = await startRedisServer();
  const staticRouter = await startTestRouter({
    ...chatSetup([sim.url]),
    pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints: [sim.url], resilience: { maxConcurrencyPerReplica: 4 } }],
    config: { limits: { keyMetrics: true, redis: { url: redis.url } } },
  });
  await rawRequest(`${staticRouter.router.apiUrl}/v1/chat/completions`, {
    headers: { authorization: `Bearer ${KEY}` },
    body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], stream: true },
  });
  collect((await rawRequest(`${staticRouter.router.adminUrl}/metrics`)).body);
  await staticRouter.close();
  await sim.close();
  await redis.stop();

  const fake = await FakeKubeApi.start();
  const pods = await startPods(['pod-a']);
  fake.apply('modelpools', modelPool('llama', 'llama'));
  fake.apply('modeldeployments', modelDeployment('llama', 'llama', [], [{ pool: 'llama' }]));
  fake.apply('endpointslices', endpointSlice('llama-1', 'llama', [{ pod: pods[0]! }]));
  const kubeRouter = await startKubeRouter(fake);
  await eventually(
    () => rawRequest(`${kubeRouter.router.adminUrl}/readyz`).then((r) => r.status),
    (s) => s === 200,
    'ready',
  );
  collect((await rawRequest(`${kubeRouter.router.adminUrl}/metrics`)).body);
  await kubeRouter.close();
  await pods[0]!.sim.close();
  await fake.close();
});
afterAll(() => undefined);

/** The metric families an expression names (histogram samples map to their family). */
function families(expr: string): string[] {
  return [
    ...new Set(
      [...expr.matchAll(/\bmodelgate_[a-z0-9_]+/g)].map((m) =>
        m[0].replace(/_(bucket|sum|count)$/, (suffix, _s, offset: number, whole: string) => (exported.get(whole.slice(0, offset)) === 'histogram' ? '' : suffix)),
      ),
    ),
  ];
}

function parses(expr: string): boolean {
  const tree = parser.parse(expr.replaceAll('$__rate_interval', '5m'));
  let ok = true;
  tree.iterate({
    enter: (node) => {
      if (node.type.isError) ok = false;
    },
  });
  return ok;
}

const panelTargets = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
const ruleExprs = rules.groups.flatMap((g) => g.rules.map((r) => ({ alert: r.alert, expr: r.expr })));

describe('Grafana dashboard', () => {
  it('has uniquely numbered panels on the chosen data source, each with PromQL that parses', () => {
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    expect(panelTargets.length).toBeGreaterThan(20);
    for (const p of dashboard.panels.filter((x) => x.type !== 'row')) expect(p.datasource?.uid).toBe('${datasource}');
    for (const { panel, expr } of panelTargets) expect({ panel, parses: parses(expr) }).toEqual({ panel, parses: true });
  });

  it('lays panels out on the 24-column grid in reading order: full-width rows, no two panels overlapping', () => {
    const boxes = dashboard.panels.map((p) => ({ title: p.title, ...p.gridPos }));
    for (const b of boxes) expect({ title: b.title, fits: b.x >= 0 && b.w > 0 && b.h > 0 && b.x + b.w <= 24 }).toEqual({ title: b.title, fits: true });
    for (const p of dashboard.panels.filter((x) => x.type === 'row')) expect({ title: p.title, ...p.gridPos }).toMatchObject({ title: p.title, h: 1, w: 24, x: 0 });
    const overlapping = boxes.flatMap((a, i) =>
      boxes
        .slice(i + 1)
        .filter((b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h)
        .map((b) => `${a.title} / ${b.title}`),
    );
    expect(overlapping).toEqual([]);
    const reading = [...boxes].sort((a, b) => a.y - b.y || a.x - b.x).map((b) => b.title);
    expect(boxes.map((b) => b.title)).toEqual(reading);
  });

  it('shows traffic, errors, latency, TTFT, tokens, in-flight, queues, breakers, ready replicas, balance and routing', () => {
    const all = panelTargets.map((t) => t.expr).join('\n');
    for (const name of [
      'modelgate_requests_total',
      'modelgate_request_duration_seconds_bucket',
      'modelgate_time_to_first_token_seconds_bucket',
      'modelgate_completion_tokens_total',
      'modelgate_endpoint_in_flight_requests',
      'modelgate_queue_depth',
      'modelgate_breaker_state',
      'modelgate_pool_ready_endpoints',
      'modelgate_upstream_attempts_total',
    ]) {
      expect(all).toContain(name);
    }
    for (const name of [
      'modelgate_prefix_blocks_total',
      'modelgate_engine_requests',
      'modelgate_engine_kv_cache_usage_ratio',
      'modelgate_engine_scrapes_total',
      'modelgate_fallbacks_total',
      'reason="shed"',
    ]) {
      expect(all).toContain(name);
    }
  });

  it('names only series the router exports', () => {
    for (const { panel, expr } of panelTargets) for (const family of families(expr)) expect({ panel, family, exported: exported.has(family) }).toEqual({ panel, family, exported: true });
  });
});

describe('alert rules', () => {
  it('cover no ready replicas, 5xx ratio, open breakers, queue saturation, shedding, fallbacks, engine scrapes and stale discovery', () => {
    expect(ruleExprs.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'ModelgateDeploymentNoReadyReplicas',
        'ModelgateHigh5xxRatio',
        'ModelgateBreakerOpen',
        'ModelgateQueueSaturated',
        'ModelgateRequestsShed',
        'ModelgateRequestsFallingBack',
        'ModelgateEngineMetricsFailing',
        'ModelgateDiscoveryStale',
      ]),
    );
  });

  it('have unique names, and page for a shed request only once (ModelgateRequestsRejected leaves shed to ModelgateRequestsShed)', () => {
    expect(new Set(ruleExprs.map((r) => r.alert)).size).toBe(ruleExprs.length);
    const expr = (alert: string): string => ruleExprs.find((r) => r.alert === alert)?.expr ?? '';
    expect(expr('ModelgateRequestsRejected')).toContain('reason!="shed"');
    expect(expr('ModelgateRequestsShed')).toContain('reason="shed"');
  });

  it('parse, name only exported series, and carry severity, summary and description', () => {
    for (const group of rules.groups) {
      for (const rule of group.rules) {
        expect({ alert: rule.alert, parses: parses(rule.expr) }).toEqual({ alert: rule.alert, parses: true });
        for (const family of families(rule.expr)) expect({ alert: rule.alert, family, exported: exported.has(family) }).toEqual({ alert: rule.alert, family, exported: true });
        expect(['critical', 'warning']).toContain(rule.labels.severity);
        expect(rule.for).toMatch(/^\d+m$/);
        expect(rule.annotations.summary.length).toBeGreaterThan(10);
        expect(rule.annotations.description.length).toBeGreaterThan(10);
      }
    }
  });

  it('are the same in the PrometheusRule manifest', () => {
    expect(prometheusRule.kind).toBe('PrometheusRule');
    expect(prometheusRule.spec.groups).toEqual(rules.groups);
  });
});

describe('README', () => {
  it('documents every series the router exports (besides Node’s process metrics)', () => {
    const own = [...exported.keys()].filter((n) => n.startsWith('modelgate_'));
    expect(own.length).toBeGreaterThan(20);
    for (const name of own) expect({ name, documented: readme.includes(`\`${name}\``) }).toEqual({ name, documented: true });
  });
});
