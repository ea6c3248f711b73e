import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import request from 'supertest';
import { type Router } from '../../src/main.js';
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
