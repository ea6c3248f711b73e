/** `modelgate demo` (what `npm start` runs), driven the way the README tells a newcomer to. */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { PassThrough } from 'node:stream';
import OpenAI from 'openai';
import {
  DEMO_AUDIO_MODEL,
  DEMO_CHAT_MODEL,
  DEMO_COLD_MODEL,
  DEMO_DEFAULTS,
  DEMO_EMBEDDING_MODEL,
  DEMO_RERANK_MODEL,
  DEMO_KEY,
  demoInstructions,
  demoLogger,
  DemoUsageError,
  parseDemoArgs,
  runDemo,
  startDemo,
  type RunningDemo,
} from '../src/demo.js';
import { captureLogs } from './helpers/router.js';
import { waitFor } from './helpers/sim.js';

/** Long enough that the first test's request is sent while the cold replica still loads. */
const COLD_LOAD_MS = 3_000;

let demo: RunningDemo;
let logs: string[];
beforeAll(async () => {
  const captured = captureLogs();
  logs = captured.logs;
  demo = await startDemo({ port: 0, adminPort: 0, logLevel: 'info' }, { logger: captured.logger, coldLoadMs: COLD_LOAD_MS });
});
afterAll(() => demo.close());

const client = (d: RunningDemo): OpenAI => new OpenAI({ apiKey: DEMO_KEY, baseURL: `${d.router.apiUrl}/v1`, maxRetries: 0 });
const hello = (d: RunningDemo): Promise<unknown> => client(d).chat.completions.create({ model: DEMO_CHAT_MODEL, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 5 });

/** The access-log lines (`msg: "request"`) among JSON log lines. */
function accessLog(lines: string[]): Array<Record<string, unknown>> {
  return lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request');
}

/** `modelgate_engine_scrapes_total` from the admin port, as `pool/result` → count. */
async function engineScrapes(d: RunningDemo): Promise<Map<string, number>> {
  const text = await (await fetch(`${d.router.adminUrl}/metrics`)).text();
  const out = new Map<string, number>();
  for (const [, labels = '', value] of text.matchAll(/^modelgate_engine_scrapes_total\{([^}]*)\} (\S+)$/gm)) {
    const label = (name: string): string | undefined => new RegExp(`${name}="([^"]*)"`).exec(labels)?.[1];
    out.set(`${label('pool')}/${label('result')}`, Number(value));
  }
  return out;
}

describe('modelgate demo', () => {
  // First: the cold model's replica is still loading when this runs.
  it('holds a request for the cold model until its replica has loaded, then answers it', async () => {
    const started = Date.now();
    const chat = await client(demo).chat.completions.create({ model: DEMO_COLD_MODEL, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 3 });
    expect(chat.choices[0]!.message.content).toMatch(/\w/);
    expect(Date.now() - started).toBeLessThan(COLD_LOAD_MS + 5_000);
    const metrics = await (await fetch(`${demo.router.adminUrl}/metrics`)).text();
    expect(metrics).toContain('modelgate_pool_held_requests_total{pool="llama-70b",pool_namespace="",pool_name="llama-70b",event="served"} 1');
  });

  it('serves chat and embeddings to the openai client with the printed key', async () => {
    const chat = await client(demo).chat.completions.create({ model: DEMO_CHAT_MODEL, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 5 });
    expect(chat.choices[0]!.message.content).toMatch(/\w/);
    const embedding = await client(demo).embeddings.create({ model: DEMO_EMBEDDING_MODEL, input: 'Hello!' });
    expect(embedding.data[0]!.embedding).toHaveLength(384);
    const ids = (await client(demo).models.list()).data.map((m) => m.id);
    expect(ids).toEqual(expect.arrayContaining(['default', DEMO_CHAT_MODEL, 'text-embedding-3-small']));
  });

  it('serves every API: completions, responses, messages, rerank, score, tokenize and audio', async () => {
    const openai = client(demo);
    expect((await openai.completions.create({ model: DEMO_CHAT_MODEL, prompt: 'Once', max_tokens: 3 })).choices[0]?.text).toMatch(/\w/);
    expect((await openai.responses.create({ model: 'default', input: 'Hi', max_output_tokens: 3 })).output_text).toMatch(/\w/);
    expect((await openai.audio.transcriptions.create({ model: DEMO_AUDIO_MODEL, file: new File([Buffer.alloc(2048, 7)], 'a.wav', { type: 'audio/wav' }) })).text).toMatch(/\w/);
    const post = async (path: string, body: object, headers: Record<string, string> = { authorization: `Bearer ${DEMO_KEY}` }): Promise<Response> =>
      fetch(`${demo.router.apiUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const messages = await post('/v1/messages', { model: 'default', max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] }, { 'x-api-key': DEMO_KEY });
    expect(((await messages.json()) as { content: unknown[] }).content.length).toBeGreaterThan(0);
    const rerank = await post('/v1/rerank', { model: DEMO_RERANK_MODEL, query: 'cats', documents: ['dogs bark', 'cats purr'] });
    expect(((await rerank.json()) as { results: unknown[] }).results).toHaveLength(2);
    expect((await post('/v1/score', { model: DEMO_RERANK_MODEL, text_1: 'a cat', text_2: 'the cat' })).status).toBe(200);
    const tokens = (await (await post('/tokenize', { model: 'default', prompt: 'hello demo' })).json()) as { tokens: number[] };
    expect(((await (await post('/detokenize', { model: 'default', tokens: tokens.tokens })).json()) as { prompt: string }).prompt).toBe('hello demo');
  });

  it('logs each request in the access log at info', async () => {
    await hello(demo);
    const chatLine = (): Record<string, unknown> | undefined => accessLog(logs).find((l) => l.path === '/v1/chat/completions' && l.deployment === 'llama-8b-prod');
    await waitFor(() => chatLine() !== undefined, 'the access-log line of the chat request');
    expect(chatLine()).toMatchObject({ level: 30, method: 'POST', status: 200, key: 'demo', deployment: 'llama-8b-prod', pool: 'llama-8b', completionTokens: 5 });
  });

  it("reads every pool's engine metrics: every replica's scrapes succeed, none is unparsable", async () => {
    // A timeout only says this machine was slow; an error or an unparsable page is a replica that
    // speaks another dialect than its pool's engine.
    const failed = (s: Map<string, number>): string[] => [...s].filter(([key, count]) => /\/(error|unparsable)$/.test(key) && count > 0).map(([key]) => key);
    // Two scrapes of each replica (llama-8b has two, bge-small one): repeated success, not a lucky first one.
    const enough = (s: Map<string, number>): boolean => (s.get('llama-8b/ok') ?? 0) >= 4 && (s.get('bge-small/ok') ?? 0) >= 2;
    let scrapes = new Map<string, number>();
    await waitFor(
      async () => {
        scrapes = await engineScrapes(demo);
        return enough(scrapes) || failed(scrapes).length > 0;
      },
      'two successful engine scrapes of every replica',
      15_000,
    );
    expect(failed(scrapes)).toEqual([]);
    expect(enough(scrapes)).toBe(true);
  });

  it('prints the base URL, the key and a curl line', () => {
    const text = demoInstructions(demo);
    expect(text).toContain(`${demo.router.apiUrl}/v1`);
    expect(text).toContain(DEMO_KEY);
    expect(text).toContain(`curl -s ${demo.router.apiUrl}/v1/chat/completions`);
    expect(text).toContain('/status');
  });

  it('says access-log lines follow only at a level that writes them', () => {
    for (const level of ['info', 'debug', 'trace'] as const) expect(demoInstructions(demo, level)).toContain('Each request logs an access-log line below');
    for (const level of ['warn', 'error', 'fatal', 'silent'] as const) {
      const text = demoInstructions(demo, level);
      expect(text).not.toContain('access-log');
      expect(text).toContain('Press Ctrl+C to stop.');
    }
  });
});

describe('modelgate demo flags', () => {
  it('defaults to ports 8080 and 9090 and the info level', () => {
    expect(parseDemoArgs([])).toEqual({ port: 8080, adminPort: 9090, logLevel: 'info' });
    expect(DEMO_DEFAULTS.logLevel).toBe('info');
    expect(parseDemoArgs(['--port', '0', '--admin-port', '9191', '--log-level', 'debug'])).toEqual({ port: 0, adminPort: 9191, logLevel: 'debug' });
  });

  it.each([
    [['--log-level', 'verbose'], /^--log-level must be one of fatal, error, warn, info, debug, trace, silent \(got "verbose"\)$/],
    [['--port', '80a'], /^--port must be a port number from 0 to 65535 \(got "80a"\)$/],
    [['--admin-port', '70000'], /^--admin-port must be a port number/],
    [['--port', ''], /^--port must be a port number/],
    [['--verbose'], /Unknown option '--verbose'/],
    [['extra'], /Unexpected argument 'extra'/],
  ])('rejects %j with a one-line message naming the flag', (args, expected) => {
    expect(() => parseDemoArgs(args)).toThrow(DemoUsageError);
    expect(() => parseDemoArgs(args)).toThrow(expected);
    let message = '';
    try {
      parseDemoArgs(args);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).not.toContain('\n');
  });

  it('logs at the chosen level', async () => {
    expect((await demoLogger('warn', new PassThrough())).level).toBe('warn');
  });
});

describe('runDemo', () => {
  const running: RunningDemo[] = [];
  afterEach(async () => {
    await Promise.all(running.splice(0).map((d) => d.close()));
  });

  /** A stream that keeps what is written to it, optionally posing as a terminal. */
  function output(isTTY: boolean): { stream: PassThrough & { isTTY?: boolean }; text: () => string } {
    const stream: PassThrough & { isTTY?: boolean } = new PassThrough();
    if (isTTY) stream.isTTY = true;
    let text = '';
    stream.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    return { stream, text: () => text };
  }

  it('prints the instructions, then the log as JSON lines when the output is not a terminal', async () => {
    const out = output(false);
    const d = await runDemo(['--port', '0', '--admin-port', '0'], out.stream);
    running.push(d);
    await waitFor(() => out.text().includes('modelgate demo is running.'), 'the instructions');
    expect(out.text()).toContain(`${d.router.apiUrl}/v1`);
    await hello(d);
    const jsonLines = (): string[] =>
      out
        .text()
        .split('\n')
        .filter((l) => l.startsWith('{'));
    await waitFor(() => accessLog(jsonLines()).length > 0, 'an access-log line');
    expect(accessLog(jsonLines())[0]).toMatchObject({ level: 30, service: 'modelgate', path: '/v1/chat/completions', status: 200 });
  });

  it('pretty-prints the log on a terminal', async () => {
    const out = output(true);
    const d = await runDemo(['--port', '0', '--admin-port', '0', '--log-level', 'info'], out.stream);
    running.push(d);
    await hello(d);
    // eslint-disable-next-line no-control-regex
    const plain = (): string => out.text().replace(/\u001b\[[0-9;]*m/g, '');
    await waitFor(() => /INFO.*request.*\/v1\/chat\/completions/.test(plain()), 'a pretty access-log line');
    expect(plain()).toContain('modelgate demo is running.');
    expect(plain()).not.toMatch(/^\{"level"/m);
  });
});
