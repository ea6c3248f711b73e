/**
 * Scale from zero in static mode, with the router started as users start it (`modelgate serve
 * --config FILE`): the pool's one replica is not running when the requests arrive; they are held, the
 * simulator starts late and loads its model (its health check failing meanwhile), and every held
 * request is then answered by it — none sent before it was ready. A pool whose replica never comes
 * answers 503 with Retry-After once the wait is over.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import { poolResolver } from '../../src/config/pool-settings.js';
import { defaultSimOptions } from '../../src/sim/options.js';
import { staticDiscovery } from '../../src/wiring/static-discovery.js';
import { startSim } from '../../src/sim/server.js';
import { freePort } from '../helpers/child-process.js';
import { eventually } from '../helpers/kube-env.js';
import { rawRequest } from '../helpers/http.js';
import { KEY, scrapedMetric } from '../helpers/router.js';
import { serveRouter } from '../helpers/serve.js';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function chat(apiUrl: string, model: string): Promise<Response> {
  return fetch(`${apiUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  });
}

async function serve(pools: Array<{ name: string; port: number; maxWaitMs: number }>): Promise<{ apiUrl: string; adminUrl: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-sfz-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'keys.yaml'), `- name: tester\n  key: ${KEY}\n`);
  const config = {
    server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    auth: { keysFile: 'keys.yaml' },
    pools: pools.map((p) => ({
      name: p.name,
      servedModelName: p.name,
      endpoints: [`http://127.0.0.1:${p.port}`],
      resilience: { healthCheck: { enabled: true, intervalMs: 200, timeoutMs: 500 }, scaleFromZero: { enabled: true, maxWaitMs: p.maxWaitMs } },
    })),
    deployments: pools.map((p) => ({ id: p.name, model: p.name, targets: [{ pool: p.name }] })),
  };
  await writeFile(join(dir, 'modelgate.yaml'), JSON.stringify(config));
  const router = await serveRouter(join(dir, 'modelgate.yaml'));
  cleanups.push(() => router.stop());
  return { apiUrl: router.api, adminUrl: router.admin };
}

describe('static mode: scale from zero', () => {
  it('holds requests until the late replica has loaded its model, then sends every one to it', async () => {
    const port = await freePort();
    const { apiUrl, adminUrl } = await serve([{ name: 'llm', port, maxWaitMs: 60_000 }]);
    // a pool at zero with no concurrency limit still bounds what it holds by queue.maxSize: its queue's series say so
    expect(await scrapedMetric(adminUrl, 'modelgate_queue_limit', { pool: 'llm' })).toBe(256);
    expect((await rawRequest(`${adminUrl}/metrics`)).body).toContain('modelgate_queue_depth{pool="llm"} 0');
    expect(((await (await fetch(`${adminUrl}/status.json`)).json()) as { pools: Array<{ queue: object }> }).pools[0]?.queue).toEqual({ depth: 0, limit: 256 });
    const answers = Array.from({ length: 20 }, () => chat(apiUrl, 'llm'));
    await eventually(
      () => scrapedMetric(adminUrl, 'modelgate_pool_requests_held', { pool: 'llm', pool_namespace: '', pool_name: 'llm' }),
      (n) => n === 20,
      '20 requests to be held',
    );
    // The replica starts, loading its model for a while: its health check fails, so it gets nothing yet.
    const sim = await startSim({ ...defaultSimOptions(), port, name: 'late', model: ['llm'], loadTimeMs: 600 }, { log: () => undefined });
    cleanups.push(() => sim.close());
    const responses = await Promise.all(answers);
    expect(responses.map((r) => r.status)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(new Set(responses.map((r) => r.headers.get('x-sim-replica')))).toEqual(new Set(['late']));
    // every request reached the engine after its load: none was answered 503 by the loading replica
    expect(sim.engine.stats.finished.stop + sim.engine.stats.finished.length).toBe(20);
    expect(await scrapedMetric(adminUrl, 'modelgate_pool_held_requests_total', { pool: 'llm', pool_namespace: '', pool_name: 'llm', event: 'served' })).toBe(20);
    expect(await scrapedMetric(adminUrl, 'modelgate_pool_requests_held', { pool: 'llm', pool_namespace: '', pool_name: 'llm' })).toBe(0);
    // one attempt each, all committed: nothing went to the replica while it loaded (it would have answered 503)
    const attempts = (await rawRequest(`${adminUrl}/metrics`)).body.split('\n').filter((l) => l.startsWith('modelgate_upstream_attempts_total{'));
    expect(attempts).toEqual([expect.stringMatching(/outcome="committed"\} 20$/)]);
  });

  it('answers 503 no_ready_replica with Retry-After when no replica is ready within maxWaitMs', async () => {
    const port = await freePort();
    const { apiUrl, adminUrl } = await serve([{ name: 'cold', port, maxWaitMs: 1000 }]);
    const started = Date.now();
    const res = await chat(apiUrl, 'cold');
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(res.status).toBe(503);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(2);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('no_ready_replica');
    expect(body.error.message).toContain('became ready within 1 s');
    expect(await scrapedMetric(adminUrl, 'modelgate_pool_held_requests_total', { pool: 'cold', pool_namespace: '', pool_name: 'cold', event: 'timeout' })).toBe(1);
    expect(await scrapedMetric(adminUrl, 'modelgate_rejected_requests_total', { pool: 'cold', reason: 'no_replica_timeout' })).toBe(1);
  });
});

describe('static mode: scale from zero needs health checks', () => {
  it('refuses a pool that scales from zero without health checks: nothing else tells the router a replica is ready', () => {
    const config = buildConfig(
      {
        auth: { keysFile: 'keys.yaml' },
        pools: [{ name: 'llm', servedModelName: 'llm', endpoints: ['http://127.0.0.1:9'], resilience: { scaleFromZero: { enabled: true } } }],
        deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
      },
      tmpdir(),
    );
    const discover = (): unknown => staticDiscovery(config, 0, poolResolver({ resilience: config.resilience, routing: config.routing }));
    expect(discover).toThrow(ConfigError);
    expect(discover).toThrow('pools[0].resilience: scaleFromZero needs resilience.healthCheck.enabled in static mode');
  });
});
