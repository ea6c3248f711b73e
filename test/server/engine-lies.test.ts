/**
 * A replica that lies in its answers (compromised, or broken): what it reports is not believed beyond
 * what an answer can be. Its usage cannot spend a key's budgets or stick the token counters.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { gzipSync } from 'node:zlib';
import { type RunningRouter } from '../../src/main.js';
import { rawRequest, sseData } from '../helpers/http.js';
import { adminMetrics, chatSetup, metricSum, startTestRouter, type TestRouter } from '../helpers/router.js';
import { okChat, startUpstream, type RecordingUpstream, type Reply } from '../helpers/upstream.js';
import { waitFor } from '../helpers/sim.js';

const KEY = 'sk-budget-0123456789';

let engine: RecordingUpstream;
let g: TestRouter<RunningRouter>;
/** The same, its deployment's streams resumed on another replica when one breaks (`resumeStreams`). */
let resuming: TestRouter<RunningRouter>;

beforeAll(async () => {
  engine = await startUpstream();
  const setup = (resumeStreams: boolean) =>
    chatSetup([engine.url], {
      keysYaml: `- name: budget\n  key: ${KEY}\n  limits: { requestsPerMinute: unlimited, tokensPerDay: 1000000 }\n`,
      config: { routing: { engineMetrics: { enabled: false } } },
      ...(resumeStreams ? { deployments: [{ id: 'llm-prod', model: 'llm', aliases: ['default'], targets: [{ pool: 'llm' }], resumeStreams: true }] } : {}),
    });
  g = await startTestRouter(setup(false));
  resuming = await startTestRouter(setup(true));
});
afterAll(async () => {
  await g.close();
  await resuming.close();
  await engine.close();
});
afterEach(() => {
  engine.reply = okChat;
});

const chat = (stream = false, router = g): Promise<Awaited<ReturnType<typeof rawRequest>>> =>
  rawRequest(`${router.router.apiUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], ...(stream ? { stream: true } : {}) },
  });

/** Tokens the key's day has used, as GET /v1/limits says. */
async function usedToday(): Promise<number> {
  const limits = JSON.parse((await rawRequest(`${g.router.apiUrl}/v1/limits`, { headers: { authorization: `Bearer ${KEY}` } })).body) as { tokens_per_day: { used: number } };
  return limits.tokens_per_day.used;
}

const lyingJson =
  (usage: object): Reply =>
  (_req, res) => {
    const body = JSON.stringify({ id: 'c', object: 'chat.completion', model: 'served/llm', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

const lyingStream: Reply = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end(
    'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n' +
      'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n' +
      'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1e15,"completion_tokens":1e15,"total_tokens":2e15}}\n\n' +
      'data: [DONE]\n\n',
  );
};

describe("a replica's usage is believed only as far as an answer can use tokens", () => {
  it.each([
    ['1e15 tokens', { prompt_tokens: 1e15, completion_tokens: 1e15, total_tokens: 2e15 }],
    ['a fraction', { prompt_tokens: 0.5, completion_tokens: 3 }],
    ['negative completion tokens', { prompt_tokens: 5, completion_tokens: -1000000 }],
  ])('usage reporting %s spends neither the key’s budget nor the token counters beyond the prompt’s estimate', async (_name, usage) => {
    const before = await usedToday();
    const counted = metricSum(await adminMetrics(g), 'modelgate_prompt_tokens_total') + metricSum(await adminMetrics(g), 'modelgate_completion_tokens_total');
    engine.reply = lyingJson(usage);
    const lied = await chat();
    expect(lied.status).toBe(200);
    engine.reply = okChat;
    // the key is not locked out for the day: its next request is served
    const next = await chat();
    expect(next.status).toBe(200);
    await waitFor(async () => (await usedToday()) - before > 0, 'the two requests charged');
    // the lie is charged as an answer without usage (its prompt's estimate, 1 token here), the next its 2 tokens
    expect((await usedToday()) - before).toBeLessThan(10);
    const after = metricSum(await adminMetrics(g), 'modelgate_prompt_tokens_total') + metricSum(await adminMetrics(g), 'modelgate_completion_tokens_total');
    expect(after - counted).toBeLessThan(10);
  });

  it("a stream's usage chunk reporting 1e15 tokens does not spend the key's day either", async () => {
    const before = await usedToday();
    engine.reply = lyingStream;
    const lied = await chat(true);
    expect(lied.status).toBe(200);
    expect(sseData(lied.body).at(-1)).toBe('[DONE]');
    engine.reply = okChat;
    expect((await chat()).status).toBe(200);
    await waitFor(async () => (await usedToday()) - before > 0, 'the two requests charged');
    // the stream counts its one content event, as a stream without usage does
    expect((await usedToday()) - before).toBeLessThan(10);
  });
});

describe('completion tokens beyond what the request allowed are not charged (max_tokens × choices)', () => {
  const ask = (body: object, stream = false): ReturnType<typeof rawRequest> =>
    rawRequest(`${g.router.apiUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], ...body, ...(stream ? { stream: true } : {}) },
    });
  const clampedCount = async (): Promise<number> => metricSum(await adminMetrics(g), 'modelgate_engine_usage_clamped_total', { endpoint: engine.url });
  const completionCount = async (): Promise<number> => metricSum(await adminMetrics(g), 'modelgate_completion_tokens_total');
  const streamReporting =
    (completion: number): Reply =>
    (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(
        'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}\n\n' +
          'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n' +
          `data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":${completion},"total_tokens":${3 + completion}}}\n\n` +
          'data: [DONE]\n\n',
      );
    };

  /** Sends one request whose engine reports `usage`; what the key's day, the token counter and the clamp counter moved by. */
  async function charged(body: object, reply: Reply, stream = false): Promise<{ day: number; counted: number; clamped: number }> {
    const [day, counted, clamped] = [await usedToday(), await completionCount(), await clampedCount()];
    engine.reply = reply;
    const answer = await ask(body, stream);
    expect(answer.status).toBe(200);
    // the director counts the tokens, then the key is charged at once (no Redis): counted means charged
    await waitFor(async () => (await completionCount()) > counted, 'the request counted');
    return { day: (await usedToday()) - day, counted: (await completionCount()) - counted, clamped: (await clampedCount()) - clamped };
  }

  it.each([
    ['max_tokens', { max_tokens: 5 }, 5],
    ['max_tokens × n', { max_tokens: 5, n: 2 }, 10],
    ['max_completion_tokens (the larger of the two)', { max_tokens: 4, max_completion_tokens: 6 }, 6],
    ['max_tokens in extra_body, as the engine reads it', { extra_body: { max_tokens: 7 } }, 7],
  ])('a JSON answer reporting 60,000,000 completion tokens for a request allowing %s is charged that limit', async (_name, body, limit) => {
    const spent = await charged(body, lyingJson({ prompt_tokens: 3, completion_tokens: 60_000_000, total_tokens: 60_000_003 }));
    expect(spent).toEqual({ day: 3 + limit, counted: limit, clamped: 1 });
  });

  it('so is a stream’s usage chunk', async () => {
    expect(await charged({ max_tokens: 8 }, streamReporting(60_000_000), true)).toEqual({ day: 3 + 8, counted: 8, clamped: 1 });
  });

  it('an answer within its limit, and one to a request that sets none, are charged as reported', async () => {
    expect(await charged({ max_tokens: 8 }, streamReporting(8), true)).toEqual({ day: 11, counted: 8, clamped: 0 });
    expect(await charged({}, lyingJson({ prompt_tokens: 3, completion_tokens: 50_000, total_tokens: 50_003 }))).toEqual({ day: 50_003, counted: 50_000, clamped: 0 });
  });
});

describe('a replica that answers 2xx with no answer is taken out by its breaker', () => {
  const good: Reply = okChat;
  it.each([
    ['an empty body', (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end()],
    ['a page of HTML', (_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html>oops</html>')],
    ['a word that is not JSON', (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('garbage')],
    ['a 204', (_req, res) => res.writeHead(204).end()],
  ] as Array<[string, Reply]>)('answering %s at once, it opens its breaker and every request after goes to the healthy replica', async (_name, reply) => {
    const bad = await startUpstream(reply);
    const healthy = await startUpstream(good);
    const router = await startTestRouter(
      chatSetup([bad.url, healthy.url], {
        config: { routing: { engineMetrics: { enabled: false } }, resilience: { breaker: { failureThreshold: 2, cooldownMs: 60_000 }, retries: { maxRetries: 0 } } },
      }),
    );
    try {
      const ask = (): ReturnType<typeof rawRequest> =>
        rawRequest(`${router.router.apiUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: 'Bearer sk-test-0123456789', 'content-type': 'application/json' },
          body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }] },
        });
      const open = async (): Promise<boolean> => metricSum(await adminMetrics(router), 'modelgate_breaker_state', { endpoint: bad.url }) === 2;
      for (let i = 0; i < 40 && !(await open()); i++) await ask();
      expect(await open()).toBe(true);
      expect(bad.requests.length).toBe(2); // failureThreshold
      expect(router.logs.join('')).toContain('"failure":"upstream_invalid_answer"');
      const served = healthy.requests.length;
      for (let i = 0; i < 5; i++) expect((await ask()).status).toBe(200);
      expect(healthy.requests.length).toBe(served + 5);
      expect(bad.requests.length).toBe(2);
    } finally {
      await router.close();
      await bad.close();
      await healthy.close();
    }
  });
});

describe("what a replica streams after its stream's last event", () => {
  const content = (text: string): string => `data: {"id":"c","choices":[{"index":0,"delta":{"content":"${text}"},"finish_reason":null}]}\n\n`;
  const finish = 'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n';
  it.each([
    ['in the same chunk', (res: Parameters<Reply>[1]) => res.end(content('ok') + finish + 'data: [DONE]\n\n' + content('MORE') + content('MORE'))],
    [
      'in later chunks',
      (res: Parameters<Reply>[1]) => {
        res.write(content('ok') + finish + 'data: [DONE]\n\n');
        setImmediate(() => res.write(content('MORE'), () => res.end(content('MORE') + 'data: {"error":{"message":"fake","code":500}}\n\n')));
      },
    ],
  ])('%s is neither relayed nor counted: the client’s stream ends at [DONE] (resumable streams too)', async (_name, send) => {
    const before = await usedToday();
    engine.reply = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      send(res);
    };
    const resumed = await chat(true, resuming);
    expect(resumed.status).toBe(200);
    expect(resumed.body).not.toContain('MORE');
    expect(sseData(resumed.body).at(-1)).toBe('[DONE]');
    const res = await chat(true);
    expect(res.status).toBe(200);
    expect(res.body).not.toContain('MORE');
    expect(sseData(res.body).at(-1)).toBe('[DONE]');
    engine.reply = okChat;
    expect((await chat()).status).toBe(200);
    await waitFor(async () => (await usedToday()) - before > 0, 'the two requests charged');
    // each stream's one content event and its prompt's estimate, and the next request's 2 tokens: not the events after [DONE]
    expect((await usedToday()) - before).toBeLessThanOrEqual(6);
  });
});

/** A router over `endpoints` with the given retries and breaker, closed after `run`. */
async function withRouter(endpoints: string[], resilience: object, run: (router: TestRouter<RunningRouter>, ask: () => ReturnType<typeof rawRequest>) => Promise<void>): Promise<void> {
  const router = await startTestRouter(chatSetup(endpoints, { config: { routing: { engineMetrics: { enabled: false } }, resilience } }));
  try {
    await run(router, () =>
      rawRequest(`${router.router.apiUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-test-0123456789', 'content-type': 'application/json' },
        body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }] },
      }),
    );
  } finally {
    await router.close();
  }
}

/**
 * A router over a replica answering `reply` and a healthy one (breaker opens after 2 failures, one retry),
 * asked until the bad replica's breaker opens, each answer checked by `check`: the bad replica then has
 * had exactly its 2 requests, each an `invalid_answer` attempt.
 */
async function untilBreakerOpens(reply: Reply, check: (res: Awaited<ReturnType<typeof rawRequest>>) => void): Promise<void> {
  const bad = await startUpstream(reply);
  const healthy = await startUpstream(okChat);
  try {
    await withRouter([bad.url, healthy.url], { breaker: { failureThreshold: 2, cooldownMs: 60_000 }, retries: { maxRetries: 1, initialBackoffMs: 1, maxBackoffMs: 1 } }, async (router, ask) => {
      const open = async (): Promise<boolean> => metricSum(await adminMetrics(router), 'modelgate_breaker_state', { endpoint: bad.url }) === 2;
      for (let i = 0; i < 40 && !(await open()); i++) check(await ask());
      expect(await open()).toBe(true);
      expect(bad.requests.length).toBe(2); // failureThreshold
      expect(metricSum(await adminMetrics(router), 'modelgate_upstream_attempts_total', { endpoint: bad.url, outcome: 'invalid_answer' })).toBe(2);
    });
  } finally {
    await bad.close();
    await healthy.close();
  }
}

/** An answer written on the engine's socket as it is (Node's server would not write it), the connection closed after it. */
const rawAnswer =
  (head: string, body: string): Reply =>
  (_req, res) =>
    res.socket?.end(`${head}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);

describe('a replica answering a status HTTP does not have (over 599)', () => {
  it.each([600, 999])('%i reaches its client as 502 upstream_invalid_answer, never as itself', async (status) => {
    const bad = await startUpstream(rawAnswer(`HTTP/1.1 ${status} Weird`, '{}'));
    try {
      await withRouter([bad.url], { retries: { maxRetries: 0 } }, async (router, ask) => {
        const res = await ask();
        expect(res.status).toBe(502);
        expect((JSON.parse(res.body) as { error: { code: string } }).error.code).toBe('upstream_invalid_answer');
        await waitFor(() => router.logs.join('').includes('"failure":"upstream_invalid_answer"'), 'the access log line');
      });
    } finally {
      await bad.close();
    }
  });

  it('is a failed attempt: retried on another replica, and counted against its breaker as a server error is', async () => {
    await untilBreakerOpens(rawAnswer('HTTP/1.1 600 Weird', '{}'), (res) => expect(res.status).toBe(200));
  });
});

describe('a replica answering a 2xx in a content-encoding (the router asks for none)', () => {
  const chatBody = JSON.stringify({
    id: 'c',
    object: 'chat.completion',
    model: 'served/llm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
  const encoded =
    (encoding: string, body: Buffer | string, type = 'application/json'): Reply =>
    (_req, res) =>
      res.writeHead(200, { 'content-type': type, 'content-encoding': encoding, 'content-length': Buffer.byteLength(body) }).end(body);
  const cases: Array<[string, Reply]> = [
    ['gzip over plain JSON (a lying header)', encoded('gzip', chatBody)],
    ['really gzipped JSON', encoded('gzip', gzipSync(chatBody))],
    ['a really gzipped stream', encoded('gzip', gzipSync('data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'), 'text/event-stream')],
    ['br', encoded('br', chatBody)],
  ];

  it.each(cases)('%s: its client is never given it, but another replica’s answer; the replica is counted failed until its breaker opens', async (_name, reply) => {
    await untilBreakerOpens(reply, (res) => {
      expect(res.status).toBe(200);
      expect(res.headers['content-encoding']).toBeUndefined();
      expect((JSON.parse(res.body) as { id: string }).id).toBe('chatcmpl-up'); // the healthy replica's
    });
  });

  it('from the only replica, its client gets 502 upstream_invalid_answer naming the encoding, and the log says so', async () => {
    const bad = await startUpstream(encoded('gzip', gzipSync(chatBody)));
    try {
      await withRouter([bad.url], { retries: { maxRetries: 0 } }, async (router, ask) => {
        const res = await ask();
        expect(res.status).toBe(502);
        expect(res.headers['content-encoding']).toBeUndefined();
        const { error } = JSON.parse(res.body) as { error: { code: string; message: string } };
        expect(error.code).toBe('upstream_invalid_answer');
        expect(error.message).toContain('content-encoding gzip');
        await waitFor(() => router.logs.join('').includes('"failure":"upstream_invalid_answer"'), 'the access log line');
      });
    } finally {
      await bad.close();
    }
  });

  it.each(['Identity', 'utf-8', 'none'])('`%s` is no compression: the answer is relayed', async (coding) => {
    const engine = await startUpstream(encoded(coding, chatBody));
    try {
      await withRouter([engine.url], { retries: { maxRetries: 0 } }, async (_router, ask) => {
        const res = await ask();
        expect(res.status).toBe(200);
        expect(res.body).toBe(chatBody);
      });
    } finally {
      await engine.close();
    }
  });
});

describe('a replica’s content-length on an answer that has no body', () => {
  it('a 204 saying `content-length: 5` reaches its client without it (a 200 keeps its own)', async () => {
    const bad = await startUpstream((_req, res) => res.socket?.end('HTTP/1.1 204 No Content\r\ncontent-type: application/json\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello'));
    try {
      await withRouter([bad.url], { retries: { maxRetries: 0 } }, async (_router, ask) => {
        const res = await ask();
        expect(res.status).toBe(204);
        expect(res.body).toBe('');
        expect(res.headers['content-length']).toBeUndefined();
        bad.reply = okChat;
        const ok = await ask();
        expect(ok.status).toBe(200);
        expect(ok.headers['content-length']).toBe(String(Buffer.byteLength(ok.body)));
      });
    } finally {
      await bad.close();
    }
  });
});

describe('what of a replica’s response headers reaches its client: an allow-list', () => {
  /** Headers a browser on the router's origin obeys, or that describe the router's backend account or connection. */
  const HOSTILE: Record<string, string | string[]> = {
    'set-cookie': 'sess=evil',
    server: 'uvicorn',
    'x-powered-by': 'Express',
    date: 'Thu, 01 Jan 1970 00:00:00 GMT',
    'alt-svc': 'h3=":443"; ma=86400',
    'clear-site-data': '"*"',
    'strict-transport-security': 'max-age=0',
    'access-control-allow-origin': '*',
    'access-control-allow-credentials': 'true',
    'access-control-expose-headers': '*',
    location: 'http://evil.example/',
    'content-location': 'http://evil.example/',
    refresh: '0;url=http://evil.example/',
    link: '<http://evil.example/>; rel=preload',
    'content-security-policy': 'default-src *',
    'content-security-policy-report-only': 'default-src *',
    'www-authenticate': 'Basic realm=x',
    nel: '{"report_to":"evil","max_age":86400}',
    'report-to': '{"group":"evil","max_age":86400,"endpoints":[{"url":"http://evil.example/"}]}',
    'cache-control': 'public, max-age=86400',
    vary: 'origin',
    etag: '"engine"',
    'content-disposition': 'attachment; filename=x.html',
    'openai-organization': 'backend-org',
    'openai-project': 'proj_backend',
    'anthropic-organization-id': 'backend-org',
    'anthropic-ratelimit-requests-remaining': '0',
    'x-ratelimit-remaining-requests': '0',
    'some-future-policy': 'x',
  };
  /** What clients and operators read: the type and length, the engines' own timings, OpenAI's and Anthropic's ids and hints. */
  const KEPT: Record<string, string> = {
    'openai-processing-ms': '12',
    'openai-version': '2020-10-01',
    'request-id': 'req_engine',
    'retry-after': '1',
    'retry-after-ms': '1000',
    'x-compute-time': '0.01',
    'x-accel-buffering': 'no',
    'x-engine-note': 'kept',
  };
  it.each([
    ['a JSON answer', false],
    ['a stream', true],
  ])('%s carries the allow-listed ones and the extension (x-) ones, none other', async (_name, stream) => {
    engine.reply = (_req, res) => {
      const body = stream
        ? 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
        : JSON.stringify({ id: 'c', object: 'chat.completion', model: 'served/llm', choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }] });
      res.writeHead(200, { ...HOSTILE, ...KEPT, 'content-type': stream ? 'text/event-stream' : 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    };
    const res = await chat(stream);
    expect(res.status).toBe(200);
    // the router sets its own date and (for a limited key) its own x-ratelimit-*: not the engine's
    for (const [name, value] of Object.entries(HOSTILE))
      expect([name, res.headers[name]]).toEqual([name, name === 'date' || name.startsWith('x-ratelimit-') ? expect.not.stringMatching(`^${String(value)}$`) : undefined]);
    for (const [name, value] of Object.entries(KEPT)) expect([name, res.headers[name]]).toEqual([name, value]);
    expect(res.headers['content-type']).toBe(stream ? 'text/event-stream' : 'application/json');
    if (!stream) expect(res.headers['content-length']).toBe(String(Buffer.byteLength(res.body)));
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/); // the router's
  });
});
