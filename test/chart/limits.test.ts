/**
 * Per-key limits in the chart (issue 17): the config's `limits` block, Redis with its password and CA
 * mounted from Secrets, expectedRouters from the replica count, the keys' weight and limits, egress
 * to Redis, a values schema with the router's bounds, and the alert and dashboard panels that watch
 * the limits.
 */
import { schemaNode, withoutKeywords, type Obj } from '../helpers/json-schema.js';
import { beforeAll, describe, expect, it } from '@jest/globals';
import { parser } from '@prometheus-io/lezer-promql';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IVolume } from 'kubernetes-models/v1/Volume';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { parseKeysFile } from '../../src/config/keys-file.js';
import { configSchema } from '../../src/config/schema.js';
import { defaultLimitsSchema, keyLimitsSchema } from '../../src/limits/settings.js';
import { A_KEY, CHART_DIR, keysFileText, only, render, routerConfigText, type K8sObject, type SetValues, Variants } from '../helpers/helm.js';

const KEYS: SetValues = { 'auth.keys': [A_KEY] };
const REDIS_URL = 'redis://redis-master.cache:6379/0';
const LIMITS_FILE = 'ci/limits-values.yaml';
const read = (path: string): string => readFileSync(join(CHART_DIR, path), 'utf8');
const valuesSchema = JSON.parse(read('values.schema.json')) as Obj;
const values = parse(read('values.yaml')) as { limits: { redis: Obj } };
const ciValues = parse(read(LIMITS_FILE)) as { auth: { keys: Obj[] }; limits: { defaults: Obj }; networkPolicy: { egress: { redis: { to: Obj[] } } } };

interface RedisBlock {
  url: string;
  username?: string;
  passwordFile?: string;
  tls: boolean;
  caFile?: string;
  keyPrefix: string;
  timeoutMs: number;
  flushIntervalMs: number;
  strict: boolean;
  responsesTtlHours: number;
  expectedRouters: number;
}
interface LimitsBlock {
  defaults: Obj;
  keyMetrics: boolean;
  redis?: RedisBlock;
}

const limitsOf = (objects: K8sObject[]): LimitsBlock => (parse(routerConfigText(objects)) as { limits: LimitsBlock }).limits;
const redisOf = (objects: K8sObject[]): RedisBlock => {
  const redis = limitsOf(objects).redis;
  if (!redis) throw new Error('no limits.redis in the config');
  return redis;
};
const deploymentOf = (objects: K8sObject[]): IDeployment => only(objects, 'Deployment') as unknown as IDeployment;
const volumesOf = (objects: K8sObject[]): IVolume[] => deploymentOf(objects).spec?.template.spec?.volumes ?? [];
const containerOf = (objects: K8sObject[]): IContainer => {
  const container = deploymentOf(objects).spec?.template.spec?.containers[0];
  if (!container) throw new Error('no container');
  return container;
};
const checksumOf = (objects: K8sObject[]): string | undefined => deploymentOf(objects).spec?.template.metadata?.annotations?.['checksum/config'];
const egressOf = (objects: K8sObject[]): Obj[] => (only(objects, 'NetworkPolicy').spec as { egress: Obj[] }).egress;

const accepted = (value: unknown): unknown => withoutKeywords(value, ['description', 'default']);

/** Whether PromQL parses with Prometheus' own grammar (Grafana's $__rate_interval as 5m). */
function parses(expr: string): boolean {
  let ok = true;
  parser.parse(expr.replaceAll('$__rate_interval', '5m')).iterate({
    enter: (n) => {
      if (n.type.isError) ok = false;
    },
  });
  return ok;
}

const variants = new Variants();
const get = (name: string): K8sObject[] => variants.get(name);

beforeAll(async () => {
  const matrix: Record<string, [string[], SetValues]> = {
    base: [[], KEYS],
    defaults: [[], { ...KEYS, 'limits.defaults': { requestsPerMinute: 600, tokensPerMonth: 100_000_000 }, 'limits.keyMetrics': true }],
    redis: [[], { ...KEYS, 'limits.redis.url': REDIS_URL }],
    redisFourReplicas: [[], { ...KEYS, 'limits.redis.url': REDIS_URL, replicaCount: 4 }],
    redisNoReplicas: [[], { ...KEYS, 'limits.redis.url': REDIS_URL, replicaCount: 0 }],
    redisTlsFlag: [[], { ...KEYS, 'limits.redis.url': REDIS_URL, 'limits.redis.tls': { enabled: true, caSecret: 'corp-ca', caKey: 'bundle.pem' } }],
    netpol: [[], { ...KEYS, 'networkPolicy.enabled': true }],
    netpolRedisDefaultPort: [[], { ...KEYS, 'networkPolicy.enabled': true, 'limits.redis.url': 'rediss://redis.cache' }],
    netpolRedisOpen: [[], { ...KEYS, 'networkPolicy.enabled': true, 'networkPolicy.egress.enabled': false, 'limits.redis.url': REDIS_URL }],
    limits: [[LIMITS_FILE], {}],
  };
  await variants.render(matrix);
});

describe('chart limits: the config', () => {
  it('always renders limits.defaults and keyMetrics, with no redis block while limits.redis.url is empty', () => {
    expect(limitsOf(get('base'))).toEqual({ defaults: {}, keyMetrics: false });
    expect(limitsOf(get('defaults'))).toEqual({ defaults: { requestsPerMinute: 600, tokensPerMonth: 100_000_000 }, keyMetrics: true });
    expect(limitsOf(get('limits')).defaults).toEqual(ciValues.limits.defaults);
  });

  it('rolls the pods when the limits change (they are in the config checksum)', () => {
    expect(checksumOf(get('defaults'))).not.toBe(checksumOf(get('base')));
    expect(checksumOf(get('redis'))).not.toBe(checksumOf(get('base')));
  });

  it('renders nothing about Redis without limits.redis.url: no config, volume, mount or egress rule', () => {
    for (const variant of ['base', 'defaults', 'netpol']) expect({ variant, mentions: /redis/i.test(JSON.stringify(get(variant))) }).toEqual({ variant, mentions: false });
  });

  it('with limits.redis.url renders the redis block from the values, without username, passwordFile or caFile unless set', () => {
    expect(redisOf(get('redis'))).toEqual({ url: REDIS_URL, tls: false, keyPrefix: 'modelgate:', timeoutMs: 50, flushIntervalMs: 250, strict: false, responsesTtlHours: 168, expectedRouters: 2 });
    expect(volumesOf(get('redis')).map((v) => v.name)).toEqual(['config', 'keys', 'tmp']);
  });

  it.each([
    ['replicaCount (2 by default)', 'redis', 2],
    ['replicaCount 4', 'redisFourReplicas', 4],
    ['at least 1, with replicaCount 0', 'redisNoReplicas', 1],
    ["autoscaling.minReplicas with the HPA (3 in the ci file, whose replicaCount is the default's 2)", 'limits', 3],
  ] as const)('sets expectedRouters from %s', (_what, variant, routers) => {
    expect(redisOf(get(variant)).expectedRouters).toBe(routers);
  });
});

describe('chart limits: Redis password and CA from Secrets', () => {
  it('mounts the password Secret key read-only as a directory and points passwordFile at it', () => {
    const objects = get('limits');
    expect(volumesOf(objects).find((v) => v.name === 'redis-password')?.secret).toEqual({ secretName: 'redis-auth', items: [{ key: 'redis-password', path: 'password' }] });
    const mount = containerOf(objects).volumeMounts?.find((m) => m.name === 'redis-password');
    expect(mount).toEqual({ name: 'redis-password', mountPath: '/etc/modelgate/redis', readOnly: true });
    expect(redisOf(objects).passwordFile).toBe(`${mount?.mountPath}/password`);
  });

  it('mounts the CA Secret key read-only as a directory and points caFile at it', () => {
    const objects = get('limits');
    expect(volumesOf(objects).find((v) => v.name === 'redis-tls')?.secret).toEqual({ secretName: 'redis-ca', items: [{ key: 'ca.pem', path: 'ca.crt' }] });
    const mount = containerOf(objects).volumeMounts?.find((m) => m.name === 'redis-tls');
    expect(mount).toEqual({ name: 'redis-tls', mountPath: '/etc/modelgate/redis-tls', readOnly: true });
    expect(redisOf(objects).caFile).toBe(`${mount?.mountPath}/ca.crt`);
    expect(volumesOf(get('redisTlsFlag')).find((v) => v.name === 'redis-tls')?.secret).toEqual({ secretName: 'corp-ca', items: [{ key: 'bundle.pem', path: 'ca.crt' }] });
  });

  it("passes the rest of the ci file through: URL, ACL user, TLS flag, key prefix, timings, strict and the Responses records' lifetime", () => {
    expect(redisOf(get('limits'))).toEqual({
      url: 'rediss://redis-master.cache.svc:6380/0',
      username: 'modelgate',
      passwordFile: '/etc/modelgate/redis/password',
      tls: false,
      caFile: '/etc/modelgate/redis-tls/ca.crt',
      keyPrefix: 'modelgate-prod:',
      timeoutMs: 40,
      flushIntervalMs: 500,
      strict: true,
      responsesTtlHours: 24,
      expectedRouters: 3,
    });
    expect(redisOf(get('redisTlsFlag'))).toMatchObject({ url: REDIS_URL, tls: true, caFile: '/etc/modelgate/redis-tls/ca.crt' });
  });

  it.each([
    ['a password Secret without a URL', { 'limits.redis.existingSecret': 'redis-auth' }, 'limits.redis: existingSecret is set but limits.redis.url is empty'],
    ['TLS without a URL', { 'limits.redis.tls.enabled': true }, 'limits.redis: tls.enabled is set but limits.redis.url is empty'],
    ['a CA over a plain connection', { 'limits.redis.url': REDIS_URL, 'limits.redis.tls.caSecret': 'redis-ca' }, 'set limits.redis.tls.enabled or use a rediss:// URL'],
    ['a password in the URL', { 'limits.redis.url': 'redis://:hunter2@redis-master.cache:6379/0' }, 'would land in a ConfigMap; put the password in a Secret and set limits.redis.existingSecret'],
  ] as const)('fails the render, saying what to fix, with %s', async (_what, set, message) => {
    const result = await render([], { ...KEYS, ...set });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
  });
});

describe('chart limits: API keys', () => {
  it("renders each key's weight and limits into keys.yaml as the keys file parser reads them, numbers as numbers", () => {
    const text = keysFileText(get('limits')) ?? '';
    expect(text).not.toMatch(/e\+/);
    expect(parseKeysFile(text, 'keys.yaml')).toEqual(ciValues.auth.keys);
  });

  it('renders no weight or limits for a key without them', () => {
    expect(parseKeysFile(keysFileText(get('base')) ?? '', 'keys.yaml')).toEqual([A_KEY]);
  });
});

describe('chart limits: NetworkPolicy', () => {
  it("allows egress to the URL's port, towards networkPolicy.egress.redis.to, before extraRules", () => {
    const egress = egressOf(get('limits'));
    expect(egress).toHaveLength(4);
    expect(egress[3]).toEqual({ ports: [{ port: 6380, protocol: 'TCP' }], to: ciValues.networkPolicy.egress.redis.to });
  });

  it("allows Redis' port 6379 to any address when the URL has no port and no peers are given", () => {
    expect(egressOf(get('netpolRedisDefaultPort'))[3]).toEqual({ ports: [{ port: 6379, protocol: 'TCP' }] });
  });

  it('adds nothing without limits.redis.url, or with egress unrestricted', () => {
    expect(egressOf(get('netpol'))).toHaveLength(3);
    expect((only(get('netpolRedisOpen'), 'NetworkPolicy').spec as Obj).egress).toBeUndefined();
  });
});

describe('chart limits: values schema', () => {
  it("accepts in limits.defaults and auth.keys[].limits exactly what the router's config and keys file accept", () => {
    expect(accepted(schemaNode(valuesSchema, 'limits', 'defaults'))).toEqual(accepted(defaultLimitsSchema));
    expect(accepted(schemaNode(valuesSchema, 'limits', 'defaults'))).toEqual(accepted(schemaNode(configSchema, 'limits', 'defaults')));
    const keys = schemaNode(valuesSchema, 'auth', 'keys').items as Obj;
    expect(accepted(schemaNode(keys, 'limits'))).toEqual(accepted(keyLimitsSchema));
  });

  it("bounds limits.keyMetrics and limits.redis' keyPrefix and timings as the router does, and defaults them as the router does", () => {
    for (const field of ['keyPrefix', 'timeoutMs', 'flushIntervalMs', 'responsesTtlHours']) {
      expect({ field, schema: accepted(schemaNode(valuesSchema, 'limits', 'redis', field)) }).toEqual({ field, schema: accepted(schemaNode(configSchema, 'limits', 'redis', field)) });
      expect({ field, value: values.limits.redis[field] }).toEqual({ field, value: schemaNode(configSchema, 'limits', 'redis', field).default });
    }
    expect(accepted(schemaNode(valuesSchema, 'limits', 'keyMetrics'))).toEqual(accepted(schemaNode(configSchema, 'limits', 'keyMetrics')));
  });

  it.each([
    ['a limit of 0', { 'limits.defaults.requestsPerMinute': 0 }, 'minimum: got 0, want 1'],
    ['a negative limit', { 'auth.keys': [{ ...A_KEY, limits: { concurrentRequests: -2 } }] }, 'minimum: got -2, want 1'],
    ['a limit that is a word other than unlimited', { 'limits.defaults.tokensPerDay': 'lots' }, "value must be 'unlimited'"],
    ['a fractional limit', { 'auth.keys': [{ ...A_KEY, limits: { tokensPerMinute: 1.5 } }] }, 'want integer'],
    ['a deployment limit of 0', { 'auth.keys': [{ ...A_KEY, limits: { deployments: { 'llama-70b-prod': { requestsPerMinute: 0 } } } }] }, 'minimum: got 0, want 1'],
    ['a budget on a deployment', { 'auth.keys': [{ ...A_KEY, limits: { deployments: { 'llama-70b-prod': { tokensPerDay: 5 } } } }] }, "additional properties 'tokensPerDay' not allowed"],
    ['an unknown limit', { 'limits.defaults.tokensPerHour': 5 }, "additional properties 'tokensPerHour' not allowed"],
    ['a weight of 0', { 'auth.keys': [{ ...A_KEY, weight: 0 }] }, 'exclusiveMinimum'],
    ['a weight above 1000', { 'auth.keys': [{ ...A_KEY, weight: 1001 }] }, 'maximum'],
    ['an http URL for Redis', { 'limits.redis.url': 'http://redis:6379' }, 'does not match pattern'],
    ['a Redis timeout of 0', { 'limits.redis.url': REDIS_URL, 'limits.redis.timeoutMs': 0 }, 'minimum'],
    ['a flush interval under 10 ms', { 'limits.redis.url': REDIS_URL, 'limits.redis.flushIntervalMs': 5 }, 'minimum'],
    ['a Responses record lifetime of 0 hours', { 'limits.redis.url': REDIS_URL, 'limits.redis.responsesTtlHours': 0 }, 'minimum'],
    ['a misspelt Redis field', { 'limits.redis.pasword': 'x' }, "additional properties 'pasword' not allowed"],
    ['keyMetrics as a string', { 'limits.keyMetrics': 'yes' }, 'want boolean'],
  ] as const)('rejects %s', async (_what, set, message) => {
    const result = await render([], { ...KEYS, ...set });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(message);
  });
});

describe('chart limits: alert and dashboard', () => {
  const rules = parse(read('alerts/modelgate.rules.yaml')) as { groups: Array<{ rules: Array<{ alert: string; expr: string; for: string; labels: Obj; annotations: Record<string, string> }> }> };
  const dashboard = JSON.parse(read('dashboards/modelgate.json')) as { panels: Array<{ type: string; title: string; description?: string; targets?: Array<{ expr: string }> }> };

  it('alerts (warning) when a router has not reached Redis for 2 minutes, saying it counts locally with its share', () => {
    const rule = rules.groups.flatMap((g) => g.rules).find((r) => r.alert === 'ModelgateLimitsRedisDown');
    expect(rule).toMatchObject({ expr: 'modelgate_limits_redis_up == 0', for: '2m', labels: { severity: 'warning' } });
    expect(parses(rule?.expr ?? '')).toBe(true);
    expect(rule?.annotations.description).toMatch(/counting locally.*budget.*divided by the router count.*until Redis is back/);
    const shipped = (only(get('limits'), 'PrometheusRule').spec as { groups: typeof rules.groups }).groups.flatMap((g) => g.rules).map((r) => r.alert);
    expect(shipped).toContain('ModelgateLimitsRedisDown');
  });

  it('alerts (warning) when a router found that Redis lost the shared counts in the last 10 minutes, saying what was put back and what was not', () => {
    const rule = rules.groups.flatMap((g) => g.rules).find((r) => r.alert === 'ModelgateLimitsRedisDataLost');
    expect(rule).toMatchObject({ expr: 'increase(modelgate_limits_redis_data_lost_total[10m]) > 0', for: '1m', labels: { severity: 'warning' } });
    expect(parses(rule?.expr ?? '')).toBe(true);
    expect(rule?.annotations.description).toMatch(/restart without persistence.*concurrency slots.*budget.*per-minute buckets restarted full.*persistent/);
    const shipped = (only(get('limits'), 'PrometheusRule').spec as { groups: typeof rules.groups }).groups.flatMap((g) => g.rules).map((r) => r.alert);
    expect(shipped).toContain('ModelgateLimitsRedisDataLost');
  });

  it('has a "Limits and usage" row: rejections by reason, Redis up and round trip, router count, and per-key panels that say they need keyMetrics', () => {
    const start = dashboard.panels.findIndex((p) => p.type === 'row' && p.title === 'Limits and usage');
    expect(start).toBeGreaterThan(0);
    const end = dashboard.panels.findIndex((p, i) => i > start && p.type === 'row');
    const row = dashboard.panels.slice(start + 1, end === -1 ? undefined : end);
    const exprs = row.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    for (const expr of exprs) expect({ expr, parses: parses(expr) }).toEqual({ expr, parses: true });
    const all = exprs.join('\n');
    for (const name of [
      'modelgate_limit_rejections_total',
      'modelgate_limits_redis_up',
      'modelgate_limits_redis_seconds_bucket',
      'modelgate_limits_redis_errors_total',
      'modelgate_limits_routers',
      'modelgate_key_requests_total',
      'modelgate_key_tokens_total',
      'modelgate_key_budget_remaining_tokens',
    ]) {
      expect({ name, shown: all.includes(name) }).toEqual({ name, shown: true });
    }
    const perKey = row.filter((p) => (p.targets ?? []).some((t) => t.expr.includes('modelgate_key_')));
    expect(perKey).toHaveLength(3);
    for (const p of perKey) expect({ panel: p.title, description: p.description }).toEqual({ panel: p.title, description: expect.stringContaining('limits.keyMetrics: true') });
  });
});
