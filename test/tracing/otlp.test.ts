/**
 * Request traces end to end: a router with `tracing.enabled` sends its spans to an OTLP/HTTP receiver
 * run by the test. A streamed chat request that carries the client's `traceparent` yields a request
 * span (its child, with the GenAI attributes and a first-token event), a scheduling span and an
 * attempt span; the engine gets the attempt's trace context; the access log carries the trace id; and
 * no prompt or completion text is in anything exported.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import http from 'node:http';
import { type AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { startTestRouter, KEY, type TestRouter, chatSetup } from '../helpers/router.js';
import { type RunningRouter } from '../../src/main.js';
import { startTestSim, waitFor } from '../helpers/sim.js';
import { startTap } from '../helpers/tap.js';
import { rawRequest } from '../helpers/http.js';
import { methodAttributes } from '../../src/tracing/otel.js';
import { type Capability } from '../../src/core/types.js';
import { startRefusingCollector } from '../helpers/collector.js';

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: Array<{ key: string; value: OtlpValue }>;
  events?: Array<{ name: string; timeUnixNano?: string }>;
  status?: { code?: number };
  startTimeUnixNano?: string;
  endTimeUnixNano?: string;
}

/** An OTLP/HTTP (JSON) traces receiver: every span it was sent, and the raw bodies. */
async function startReceiver(): Promise<{ url: string; spans: OtlpSpan[]; resources: Array<Record<string, unknown>>; bodies: string[]; close(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  /** Each batch's resource attributes, by key. */
  const resources: Array<Record<string, unknown>> = [];
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      bodies.push(text);
      const payload = JSON.parse(text) as { resourceSpans?: Array<{ resource?: { attributes?: OtlpSpan['attributes'] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }> };
      for (const rs of payload.resourceSpans ?? []) {
        resources.push(Object.fromEntries((rs.resource?.attributes ?? []).map((a) => [a.key, Object.values(a.value)[0]])));
        for (const ss of rs.scopeSpans ?? []) spans.push(...(ss.spans ?? []));
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/v1/traces`, spans, resources, bodies, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

const attr = (span: OtlpSpan | undefined, key: string): string | number | boolean | undefined => {
  const v = span?.attributes?.find((a) => a.key === key)?.value;
  if (!v) return undefined;
  return v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? v.boolValue;
};

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A simulator behind a recording tap, a router tracing to a receiver; closing the router flushes its spans. */
async function tracedSetup(options: { sampleRatio?: number; capabilities?: Capability[] } = {}): Promise<{
  receiver: Awaited<ReturnType<typeof startReceiver>>;
  tap: Awaited<ReturnType<typeof startTap>>;
  gateway: TestRouter<RunningRouter>;
  closeGateway: () => Promise<void>;
  sim: Awaited<ReturnType<typeof startTestSim>>;
}> {
  const receiver = await startReceiver();
  cleanups.push(() => receiver.close());
  const sim = await startTestSim({ model: ['served/llm'] });
  cleanups.push(() => sim.close());
  const tap = await startTap(sim.url);
  cleanups.push(() => tap.close());
  const setup = chatSetup([tap.url], { config: { tracing: { enabled: true, endpoint: receiver.url, ...(options.sampleRatio === undefined ? {} : { sampleRatio: options.sampleRatio }) } } });
  const gateway = await startTestRouter(options.capabilities ? { ...setup, pools: [{ ...setup.pools[0]!, capabilities: options.capabilities }] } : setup);
  let closed: Promise<void> | undefined;
  const closeGateway = (): Promise<void> => (closed ??= gateway.close());
  cleanups.push(closeGateway);
  return { receiver, tap, gateway, closeGateway, sim };
}

describe('OpenTelemetry traces', () => {
  it('exports a streamed request’s spans with GenAI attributes, continues the client’s trace and hands the engine its own context', async () => {
    const { receiver, tap, gateway, closeGateway } = await tracedSetup();

    const clientTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const clientSpan = '00f067aa0ba902b7';
    const prompt = 'The secret word is periwinkle.';
    const res = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', traceparent: `00-${clientTrace}-${clientSpan}-01`, tracestate: 'vendor=client-state' },
      body: JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: prompt }], max_tokens: 6, stream: true, stream_options: { include_usage: true } }),
    });
    const streamed = await res.text();
    expect(res.status).toBe(200);
    await waitFor(() => gateway.logs.some((l) => l.includes('"msg":"request"')), 'the access-log line');
    await closeGateway(); // shuts the tracer down: what is batched is sent
    await waitFor(() => receiver.spans.some((s) => s.name.startsWith('chat ')), 'the request span at the receiver');

    const root = receiver.spans.find((s) => s.name === 'chat llm');
    expect(root).toBeDefined();
    expect(root?.traceId).toBe(clientTrace);
    expect(root?.parentSpanId).toBe(clientSpan);
    expect(root?.kind).toBe(2); // server
    expect(attr(root, 'gen_ai.operation.name')).toBe('chat');
    expect(attr(root, 'gen_ai.request.model')).toBe('llm');
    expect(attr(root, 'gen_ai.response.model')).toBe('served/llm');
    expect(attr(root, 'gen_ai.usage.input_tokens')).toBeGreaterThan(0);
    expect(attr(root, 'gen_ai.usage.output_tokens')).toBe(6);
    expect(attr(root, 'http.response.status_code')).toBe(200);
    expect(attr(root, 'http.request.method')).toBe('POST');
    expect(attr(root, 'modelgate.deployment')).toBe('llm-prod');
    // the serving software, as the pool names it (the conventions' required provider)
    expect(attr(root, 'gen_ai.provider.name')).toBe('vllm');
    // which router: its service and its instance (the pod's name, HOSTNAME, in Kubernetes)
    expect(receiver.resources[0]).toMatchObject({ 'service.name': 'modelgate', 'service.instance.id': process.env.HOSTNAME ?? hostname() });
    expect(root?.events?.map((e) => e.name)).toContain('gen_ai.first_token');

    const children = receiver.spans.filter((s) => s.parentSpanId === root?.spanId);
    const schedule = children.find((s) => s.name === 'modelgate.schedule');
    expect(attr(schedule, 'modelgate.candidates')).toBe(1);
    expect(attr(schedule, 'modelgate.winner')).toBe(tap.url);
    const attempt = children.find((s) => s.name === 'modelgate.attempt');
    expect(attempt?.kind).toBe(3); // client
    expect(attr(attempt, 'server.address')).toBe('127.0.0.1');
    expect(attr(attempt, 'http.request.method')).toBe('POST');
    expect(attr(attempt, 'modelgate.outcome')).toBe('committed');
    expect(attr(attempt, 'http.response.status_code')).toBe(200);

    // The engine got the attempt's context: the same trace, the attempt span as its parent, the client's tracestate.
    const sent = tap.posts()[0];
    expect(sent?.headers.traceparent).toBe(`00-${clientTrace}-${attempt?.spanId}-01`);
    expect(sent?.headers.tracestate).toBe('vendor=client-state');
    // Times finer than a millisecond, and every child (the attempt, which ends with the stream, too) inside the request span.
    const ns = (t: string | undefined): bigint => BigInt(t ?? '0');
    expect([root?.startTimeUnixNano, root?.endTimeUnixNano].some((t) => ns(t) % 1_000_000n !== 0n)).toBe(true);
    for (const child of children) {
      expect(ns(child.startTimeUnixNano)).toBeGreaterThanOrEqual(ns(root?.startTimeUnixNano));
      expect(ns(child.endTimeUnixNano)).toBeLessThanOrEqual(ns(root?.endTimeUnixNano));
    }
    expect(ns(root?.events?.[0]?.timeUnixNano)).toBeGreaterThanOrEqual(ns(attempt?.startTimeUnixNano));
    // The access log names the trace.
    expect(gateway.logs.find((l) => l.includes('"msg":"request"'))).toContain(`"traceId":"${clientTrace}"`);
    // Nothing of the prompt or the completion was exported.
    const exported = receiver.bodies.join('\n');
    expect(exported).not.toContain('periwinkle');
    const completionWords = [...streamed.matchAll(/"content":"([^"]{4,})"/g)].map((m) => m[1] as string);
    expect(completionWords.length).toBeGreaterThan(0);
    for (const word of completionWords) expect(exported).not.toContain(word);
  });

  it('forwards the client’s traceparent untouched when tracing is off, and logs no trace id', async () => {
    const sim = await startTestSim({ model: ['served/llm'] });
    cleanups.push(() => sim.close());
    const tap = await startTap(sim.url);
    cleanups.push(() => tap.close());
    const gateway = await startTestRouter(chatSetup([tap.url]));
    cleanups.push(() => gateway.close());
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const res = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', traceparent },
      body: JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    await res.text();
    expect(res.status).toBe(200);
    expect(tap.posts()[0]?.headers.traceparent).toBe(traceparent);
    await waitFor(() => gateway.logs.some((l) => l.includes('"msg":"request"')), 'the access-log line');
    expect(gateway.logs.find((l) => l.includes('"msg":"request"'))).not.toContain('traceId');
  });

  it("logs a request's traceId only when its trace is sampled (an unsampled one reaches no collector)", async () => {
    const receiver = await startReceiver();
    cleanups.push(() => receiver.close());
    const sim = await startTestSim({ model: ['served/llm'] });
    cleanups.push(() => sim.close());
    const gateway = await startTestRouter(chatSetup([sim.url], { config: { tracing: { enabled: true, endpoint: receiver.url, sampleRatio: 0 } } }));
    cleanups.push(() => gateway.close());
    const sampled = '4bf92f3577b34da6a3ce929d0e0e4736';
    const send = (headers: Record<string, string>): Promise<void> =>
      fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      }).then(async (r) => void (await r.text()));
    await send({ traceparent: `00-${sampled}-00f067aa0ba902b7-01`, 'x-request-id': 'sampled-one' });
    await send({ 'x-request-id': 'unsampled-one' }); // sampleRatio 0: not sampled
    await waitFor(() => gateway.logs.filter((l) => l.includes('"msg":"request"')).length === 2, 'both access-log lines');
    const line = (id: string): string => gateway.logs.find((l) => l.includes('"msg":"request"') && l.includes(id)) ?? '';
    expect(line('sampled-one')).toContain(`"traceId":"${sampled}"`);
    expect(line('unsampled-one')).not.toContain('traceId');
  });

  it('exports nothing for a client without a valid key, however its traceparent is flagged; drops a tracestate whose traceparent it refused; names spans by operation', async () => {
    const { receiver, tap, gateway, closeGateway } = await tracedSetup({ sampleRatio: 0, capabilities: ['chat', 'completions'] });
    const forced = (n: number): string => `00-${n.toString(16).padStart(32, '0')}-00f067aa0ba902b7-01`;
    const post = (path: string, body: object, headers: Record<string, string>): Promise<number> =>
      fetch(`${gateway.router.apiUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) }).then(
        async (r) => (await r.text(), r.status),
      );
    const chat = { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };
    for (let i = 1; i <= 5; i++) {
      expect(await post('/v1/chat/completions', chat, { authorization: 'Bearer not-a-key', traceparent: forced(i) })).toBe(401);
      expect(await post('/v1/chat/completions', chat, { traceparent: forced(100 + i) })).toBe(401);
    }
    // a traceparent the router refuses (version ff): its tracestate is not the trace's, and does not reach the engine
    expect(await post('/v1/chat/completions', chat, { authorization: `Bearer ${KEY}`, traceparent: `ff-${'a'.repeat(32)}-${'b'.repeat(16)}-01`, tracestate: 'evil=injected' })).toBe(200);
    expect(tap.posts()[0]?.headers.tracestate).toBeUndefined();
    expect(tap.posts()[0]?.headers.traceparent).not.toContain('a'.repeat(32));
    // a sampled client with a key: exported, named `{operation} {model}`
    expect(await post('/v1/completions', { model: 'llm', prompt: 'hi', max_tokens: 2 }, { authorization: `Bearer ${KEY}`, traceparent: forced(999) })).toBe(200);
    await waitFor(() => gateway.logs.filter((l) => l.includes('"msg":"request"')).length === 12, 'the twelve access-log lines');
    const metrics = (await rawRequest(`${gateway.router.adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text' } })).body;
    await closeGateway();
    await waitFor(() => receiver.spans.some((s) => s.kind === 2), 'the sampled request span');
    // only the keyed, sampled request's trace was exported, and only its id is an exemplar
    expect(new Set(receiver.spans.map((s) => s.traceId))).toEqual(new Set([(999).toString(16).padStart(32, '0')]));
    expect(receiver.spans.filter((s) => s.kind === 2).map((s) => s.name)).toEqual(['text_completion llm']);
    expect([...metrics.matchAll(/trace_id="([0-9a-f]+)"/g)].map((m) => m[1])).not.toContain((1).toString(16).padStart(32, '0'));
    expect(metrics).toContain(`trace_id="${(999).toString(16).padStart(32, '0')}"`);
  });

  it('says when the collector refuses spans (once, with why) instead of dropping them silently, and still shuts down', async () => {
    const refusing = await startRefusingCollector();
    cleanups.push(() => refusing.close());
    const sim = await startTestSim({ model: ['served/llm'] });
    cleanups.push(() => sim.close());
    const endpoint = refusing.url;
    const gateway = await startTestRouter(chatSetup([sim.url], { config: { tracing: { enabled: true, endpoint } } }));
    const res = await fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(() => gateway.logs.some((l) => l.includes('"msg":"request"')), 'the access-log line');
    await gateway.close(); // the spans are flushed at shutdown, to a collector that refuses them: the shutdown ends all the same
    expect(refusing.batches()).toBeGreaterThan(0);
    const warned = gateway.logs.filter((l) => l.includes('trace export failed'));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toContain('"component":"tracing"');
    expect(warned[0]).toMatch(/"error":"[^"]+"/);
  });

  it("starts a trace of its own when the client sends none, and marks a request the server failed (a client's 4xx leaves the status unset)", async () => {
    const { receiver, tap, gateway, closeGateway, sim } = await tracedSetup();
    const send = (model: string): Promise<Response> =>
      fetch(`${gateway.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      });
    expect((await send('llm')).status).toBe(200);
    expect((await send('no-such-model')).status).toBe(404);
    await sim.close(); // the only replica gone: the router answers 5xx
    expect((await send('llm')).status).toBeGreaterThanOrEqual(500);
    await waitFor(() => gateway.logs.filter((l) => l.includes('"msg":"request"')).length === 3, 'the three access-log lines');
    await closeGateway();
    await waitFor(() => receiver.spans.filter((s) => s.kind === 2).length === 3, 'the three request spans');
    const servers = receiver.spans.filter((s) => s.kind === 2);
    const [ok, missing, failed] = [
      servers.find((s) => attr(s, 'http.response.status_code') === 200),
      servers.find((s) => attr(s, 'http.response.status_code') === 404),
      servers.find((s) => Number(attr(s, 'http.response.status_code')) >= 500),
    ];
    expect(ok?.parentSpanId ?? '').toBe('');
    expect(tap.posts()[0]?.headers.traceparent).toMatch(new RegExp(`^00-${ok?.traceId}-[0-9a-f]{16}-01$`));
    expect(missing?.status?.code ?? 0).toBe(0); // unset: the client's mistake
    expect(attr(missing, 'error.type')).toBeUndefined();
    expect(failed?.status?.code).toBe(2); // error
    expect(attr(ok, 'gen_ai.response.model')).toBe('served/llm');
    expect(attr(failed, 'gen_ai.response.model')).toBeUndefined(); // no engine answered it
    expect(attr(failed, 'error.type')).toMatch(/^(upstream_connection_failed|no_ready_replica)$/);
  });
});

describe('the request span’s method', () => {
  it('is one HTTP’s conventions know, or _OTHER with the method as sent beside it', () => {
    expect(methodAttributes('POST')).toEqual({ 'http.request.method': 'POST' });
    expect(methodAttributes('PROPFIND')).toEqual({ 'http.request.method': '_OTHER', 'http.request.method_original': 'PROPFIND' });
  });
});
