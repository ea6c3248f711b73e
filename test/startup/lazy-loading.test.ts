/**
 * What a static-mode router loads, started as users start it (`node dist/cli.js serve --config FILE`,
 * built by `npm test` first) and after it has answered requests: nothing of Kubernetes mode (the
 * client, discovery's watches, the controller, leader election), of Redis (only `limits.redis` loads
 * it), of the simulator or of the demo. A module hook (node:module registerHooks, preloaded with
 * --import) writes every module the process loads to a file; the router re-executes itself in place
 * with the same flags and environment, so the hook sees both images.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { type SimServer } from '../../src/sim/server.js';
import { rawRequest } from '../helpers/http.js';
import { startTestSim } from '../helpers/sim.js';

const cli = new URL('../../dist/cli.js', import.meta.url).pathname;
const KEY = 'sk-lazy-loading-0123';
const HOOK = `
import { registerHooks } from 'node:module';
import { appendFileSync } from 'node:fs';
const log = process.env.MODELGATE_TEST_LOADED;
registerHooks({ load(url, context, next) { appendFileSync(log, url + '\\n'); return next(url, context); } });
// Node's own modules load without the hook: list them as the process exits
process.on('exit', () => appendFileSync(log, process.moduleLoadList.map((m) => 'node-internal:' + m + '\\n').join('')));
`;

let dir: string;
let sim: SimServer;
let loaded: string[];

/** Starts `serve` with the hook, sends `traffic` once it listens, stops it; resolves with its exit code. */
async function serveOnce(config: string, log: string, traffic: (api: string, admin: string) => Promise<void>): Promise<number | null> {
  const hook = join(dir, 'hook.mjs');
  const child = spawn(process.execPath, ['--import', pathToFileURL(hook).href, cli, 'serve', '--config', config], {
    env: { ...process.env, MODELGATE_TEST_LOADED: log },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const { api, admin } = await new Promise<{ api: string; admin: string }>((resolve, reject) => {
      createInterface(child.stdout).on('line', (line) => {
        const entry = JSON.parse(line) as { msg?: string; api?: string; admin?: string };
        if (entry.msg === 'modelgate listening') resolve({ api: entry.api ?? '', admin: entry.admin ?? '' });
      });
      void exit.then((code) => reject(new Error(`modelgate exited early with ${code}`)));
    });
    await traffic(api, admin);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  }
  return exit;
}

beforeAll(async () => {
  if (!existsSync(cli)) throw new Error('dist/cli.js is missing: run `npm run build` (npm test does it first)');
  dir = await mkdtemp(join(tmpdir(), 'modelgate-lazy-loading-'));
  sim = await startTestSim({ model: ['served/llm'] });
  await writeFile(join(dir, 'hook.mjs'), HOOK);
  await writeFile(join(dir, 'keys.yaml'), `- name: t\n  key: ${KEY}\n`);
  const config = join(dir, 'static.json');
  await writeFile(
    config,
    JSON.stringify({
      server: { host: '127.0.0.1', port: 0, shutdownDelayMs: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml' },
      pools: [{ name: 'llm', servedModelName: 'served/llm', endpoints: [sim.url] }],
      deployments: [{ id: 'llm', model: 'llm', targets: [{ pool: 'llm' }] }],
    }),
  );
  const log = join(dir, 'loaded.txt');
  const code = await serveOnce(config, log, async (api, admin) => {
    const headers = { authorization: `Bearer ${KEY}` };
    for (const stream of [false, true]) {
      const res = await rawRequest(`${api}/v1/chat/completions`, { headers, body: { model: 'llm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream } });
      expect(res.status).toBe(200);
    }
    expect((await rawRequest(`${api}/v1/models`, { headers })).status).toBe(200);
    expect((await rawRequest(`${admin}/metrics`)).status).toBe(200);
  });
  expect(code).toBe(0);
  loaded = readFileSync(log, 'utf8').split('\n').filter(Boolean);
});

afterAll(async () => {
  await sim.close();
  await rm(dir, { recursive: true, force: true });
});

describe('a static-mode router, after answering requests', () => {
  it('loaded the router itself (the hook saw every module)', () => {
    for (const module of [
      '/dist/cli.js',
      '/dist/main.js',
      '/dist/wiring/static-discovery.js',
      '/dist/proxy/forwarder.js',
      '/node_modules/undici/lib/dispatcher/agent.js',
      '/node_modules/prom-client/',
      '/dist/api/precompiled-validators-requestFirst.cjs',
      'node-internal:NativeModule http',
    ]) {
      expect(loaded.some((url) => url.includes(module))).toBe(true);
    }
  });

  it.each([
    ['the Kubernetes client', '/node_modules/@kubernetes/'],
    ['Kubernetes discovery', '/dist/discovery/kubernetes/'],
    ['the controller and leader election', '/dist/controller/'],
    ["Kubernetes mode's wiring", '/dist/wiring/kubernetes-discovery.js'],
    ['the Redis client', '/node_modules/ioredis/'],
    ['the Redis limit store', '/dist/limits/redis-store.js'],
    ['the simulator', '/dist/sim/'],
    ['the demo', '/dist/demo.js'],
    ["the demo's log printer", '/node_modules/pino-pretty/'],
    // (@opentelemetry/api itself is loaded: prom-client's process metrics require it)
    ['the OpenTelemetry SDK (tracing is off)', '/node_modules/@opentelemetry/sdk-trace/'],
    ['the OTLP exporter', '/node_modules/@opentelemetry/exporter-trace-otlp-http/'],
    ["the router's tracing", '/dist/tracing/'],
    // KV-cache events load their transport only once a pool enables them (routing.kvEvents)
    ['zeromq', '/node_modules/zeromq/'],
    ['msgpack', '/node_modules/@msgpack/'],
    ['the KV-events transport', '/dist/kv-events/zmq-transport.js'],
    // a model's tokenizer and chat template load only for a pool with kvEvents.tokenizer huggingface
    ['the Hugging Face tokenizers', '/node_modules/@huggingface/tokenizers/'],
    ['the Jinja template engine', '/node_modules/@huggingface/jinja/'],
    ["the router's model tokenizer", '/dist/kv-events/hf-tokenizer.js'],
    // the validators are compiled by the build (src/api/schema-validator.ts); only ajv's small runtime helpers load
    ["ajv's schema compiler", '/node_modules/ajv/dist/ajv.js'],
    ["ajv's code generator", '/node_modules/ajv/dist/compile/'],
    // every request it answered was valid: the validators that collect every error of a refused body load at the first refusal
    ['the all-errors request validators', '/dist/api/precompiled-validators-request.cjs'],
    // an ESM import of node:http reads its lazy WebSocket exports, which load Node's fetch (src/core/node-http.ts)
    ["Node's fetch implementation (its own undici)", 'internal/deps/undici'],
    // the engine client is undici's dispatcher alone (src/proxy/engine-agent.ts): not the package's entry point, which loads all of it
    ["undici's entry point", '/node_modules/undici/index.js'],
    ["undici's fetch, WebSocket, cache and the rest of its web APIs", '/node_modules/undici/lib/web/'],
    ["undici's mocks", '/node_modules/undici/lib/mock/'],
    // undici's HTTP/2 client requires it as it loads; the engine client is HTTP/1.1 only and keeps it out (src/proxy/engine-agent.ts)
    ["Node's HTTP/2", 'NativeModule http2'],
    // prom-client's classes load from their own files (src/metrics/prom.ts), not its entry point
    ["prom-client's entry point", '/node_modules/prom-client/index.js'],
    ["prom-client's Pushgateway client", '/node_modules/prom-client/lib/pushgateway.js'],
    ["prom-client's cluster aggregator", '/node_modules/prom-client/lib/cluster.js'],
    // only an https engine URL loads node:https, and with it TLS (src/core/node-https.ts)
    ["Node's TLS (every engine here speaks plain HTTP)", 'NativeModule tls'],
  ])('never loaded %s', (_what, path) => {
    expect(loaded.filter((url) => url.includes(path))).toEqual([]);
  });
});
