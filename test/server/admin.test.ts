import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import request from 'supertest';
import { createServer } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type Router } from '../../src/main.js';
import { buildAdminApp } from '../../src/server/admin.js';
import { STATUS_VERSION, type StatusSnapshot } from '../../src/server/status.js';
import { buildTestRouter, chatSetup, KEY, type TestRouter } from '../helpers/router.js';
import { startUpstream, type RecordingUpstream } from '../helpers/upstream.js';

let upstream: RecordingUpstream;
let gateway: TestRouter<Router>;

beforeAll(async () => {
  upstream = await startUpstream();
  gateway = await buildTestRouter(chatSetup([upstream.url]));
});
afterAll(async () => {
  await gateway.close();
  await upstream.close();
});

describe('admin port', () => {
  it('answers /livez with 200 always', async () => {
    await request(gateway.router.admin).get('/livez').expect(200, { status: 'ok' });
  });

  it('answers /readyz with 200 once discovery has synced', async () => {
    await request(gateway.router.admin).get('/readyz').expect(200, { status: 'ready' });
  });

  it('serves Prometheus metrics with request counts and pool readiness, bounded labels only', async () => {
    await request(gateway.router.api)
      .post('/v1/chat/completions')
      .set({ Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' })
      .send('{"model":"llm","messages":[{"role":"user","content":"secret prompt"}]}')
      .expect(200);
    await request(gateway.router.api).get('/v1/models').expect(401);
    await request(gateway.router.api)
      .get('/v1/models/llm')
      .set({ Authorization: `Bearer ${KEY}` })
      .expect(200);
    await request(gateway.router.api)
      .get('/v1/models/org/no-such-model')
      .set({ Authorization: `Bearer ${KEY}` })
      .expect(404);
    await request(gateway.router.api)
      .get('/v1/models/')
      .set({ Authorization: `Bearer ${KEY}` })
      .expect(404);
    const res = await request(gateway.router.admin).get('/metrics').expect(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.text).toContain('modelgate_requests_total{route="chat",deployment="llm-prod",pool="llm",code="200"} 1');
    expect(res.text).toContain('modelgate_requests_total{route="models",deployment="",pool="",code="401"} 1');
    // a model retrieved is the models route too, found or not; `/v1/models/` is no route
    expect(res.text).toContain('modelgate_requests_total{route="models",deployment="",pool="",code="200"} 1');
    expect(res.text).toContain('modelgate_requests_total{route="models",deployment="",pool="",code="404"} 1');
    expect(res.text).toContain('modelgate_requests_total{route="other",deployment="",pool="",code="404"} 1');
    expect(res.text).toContain('modelgate_pool_ready_endpoints{pool="llm"} 1');
    expect(res.text).toMatch(/modelgate_request_duration_seconds_count\{route="chat",deployment="llm-prod",pool="llm"\} 1/);
    expect(res.text).not.toContain(KEY);
    expect(res.text).not.toContain('secret prompt');
  });

  it('turns /readyz not-ready when the router stops', async () => {
    const stopping = await buildTestRouter(chatSetup([upstream.url]));
    const closing = stopping.router.close();
    const res = await request(stopping.router.admin).get('/readyz').expect(503);
    expect(res.body).toEqual({ status: 'not ready', reasons: ['shutting down'] });
    await request(stopping.router.admin).get('/livez').expect(200);
    await closing;
    await stopping.close();
  });
});

describe('what the unauthenticated admin port can cost the API', () => {
  /** A fleet with nothing in it, told apart by its time (the page shows it). */
  const snapshotOf = (n: number): StatusSnapshot => ({ version: STATUS_VERSION, generatedAt: `build ${n}`, notReady: [], prefixIndexBlocks: 0, bucketSeconds: 10, deployments: [], pools: [] });

  /** An admin app whose status build takes `buildMs` on its clock, counting the builds. */
  function adminWith(buildMs: number): { app: ReturnType<typeof buildAdminApp>; builds: () => number; time: { at: number } } {
    const time = { at: 0 };
    let builds = 0;
    const app = buildAdminApp({
      readiness: () => [],
      metrics: { contentType: 'text/plain', metrics: () => Promise.resolve('') },
      status: {
        snapshot: () => {
          builds += 1;
          time.at += buildMs;
          return snapshotOf(builds);
        },
      },
      clock: { now: () => time.at },
    });
    return { app, builds: () => builds, time };
  }

  it('builds the status anew for every request when a build is quick (every fleet but the largest)', async () => {
    const { app, builds } = adminWith(1);
    expect((await request(app).get('/status.json').expect(200)).body).toMatchObject({ generatedAt: 'build 1' });
    expect((await request(app).get('/status.json').expect(200)).body).toMatchObject({ generatedAt: 'build 2' });
    await request(app).get('/status').expect(200);
    expect(builds()).toBe(3);
  });

  it('serves a slow build (a fleet of thousands) again for ten times as long, page and JSON alike, then builds anew', async () => {
    const { app, builds, time } = adminWith(50);
    const first = await request(app).get('/status.json').expect(200);
    expect(first.headers['content-type']).toMatch(/^application\/json/);
    expect(first.body).toMatchObject({ generatedAt: 'build 1' });
    time.at += 499; // 50 ms to build: reused until 500 ms after it
    expect((await request(app).get('/status.json').expect(200)).body).toMatchObject({ generatedAt: 'build 1' });
    expect((await request(app).get('/status').expect(200)).text).toContain('build 1');
    expect(builds()).toBe(1);
    time.at += 1;
    expect((await request(app).get('/status.json').expect(200)).body).toMatchObject({ generatedAt: 'build 2' });
    expect(builds()).toBe(2);
  });

  it('shares one /metrics render among scrapes that arrive during it; a later scrape gets a fresh one', async () => {
    let renders = 0;
    let finish: (text: string) => void = () => undefined;
    const app = buildAdminApp({
      readiness: () => [],
      metrics: {
        contentType: 'text/plain',
        metrics: () => {
          renders += 1;
          return new Promise<string>((resolve) => (finish = resolve));
        },
      },
    });
    let seen = 0;
    const server = createServer((req, res) => {
      seen += 1;
      void app(req, res);
    }).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const turns = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
    };
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
      const scrapes = [fetch(url), fetch(url), fetch(url)];
      // all three reach the handler while the first render is pending
      while (seen < 3) await turns(1);
      await turns(5);
      finish('metric_a 1\n');
      const texts = await Promise.all(scrapes.map(async (s) => (await s).text()));
      expect(texts).toEqual(['metric_a 1\n', 'metric_a 1\n', 'metric_a 1\n']);
      expect(renders).toBe(1);
      const later = fetch(url);
      while (renders === 1) await new Promise((resolve) => setImmediate(resolve));
      finish('metric_a 2\n');
      expect(await (await later).text()).toBe('metric_a 2\n');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('sends /status/ to the page’s own address, so its relative status.json link works', async () => {
    const { app } = adminWith(1);
    const res = await request(app).get('/status/').expect(301);
    expect(res.headers.location).toBe('../status');
    expect(new URL(res.headers.location as string, 'http://admin:9090/status/').pathname).toBe('/status');
  });
});
