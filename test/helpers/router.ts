/** Routers for tests: a config built in memory, keys in a temp dir, logs captured, no process metrics. */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { type Logger } from 'pino';
import { buildConfig } from '../../src/config/load.js';
import { createLogger, createRouter, startRouter, type Router, type RunningRouter } from '../../src/main.js';
import { lineSinkOf } from '../../src/wiring/logger.js';
import { rawRequest } from './http.js';

export const KEY = 'sk-test-0123456789';

export interface TestRouterOptions {
  pools: object[];
  deployments: object[];
  /** YAML of the keys file; default: one key, KEY, allowed everything. */
  keysYaml?: string;
  server?: object;
  /** More top-level config blocks (routing, priority, resilience, …). */
  config?: object;
  random?: () => number;
}

export interface TestRouter<R> {
  router: R;
  /** The lines logged so far, the access log's pending batch written first (as a log reader sees them once it is written, at most LINE_BATCH_MS later). */
  readonly logs: string[];
  keysFile: string;
  close(): Promise<void>;
}

async function prepare(options: TestRouterOptions): Promise<{ dir: string; config: ReturnType<typeof buildConfig>; logs: string[]; logger: Logger }> {
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-test-'));
  await writeFile(join(dir, 'keys.yaml'), options.keysYaml ?? `- name: tester\n  key: ${KEY}\n`);
  const config = buildConfig(
    {
      server: { host: '127.0.0.1', port: 0, ...options.server },
      admin: { host: '127.0.0.1', port: 0 },
      auth: { keysFile: 'keys.yaml', reloadIntervalMs: 50 },
      pools: options.pools,
      deployments: options.deployments,
      ...options.config,
    },
    dir,
  );
  return { dir, config, ...captureLogs() };
}

/**
 * A pino logger at info whose lines are kept in `logs`, one entry a line (with its newline): the
 * access log writes the lines of a batch in one write (wiring/logger.ts).
 */
export function captureLogs(): { logs: string[]; logger: Logger } {
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split(/(?<=\n)/)) if (line !== '') logs.push(line);
      done();
    },
  });
  return { logs, logger: createLogger('info', sink) };
}

/** Wraps a router with its captured logs and a close() that also removes its temp dir. */
export function testRouter<R extends { close(): Promise<void> }>(router: R, dir: string, logs: string[], logger: Logger): TestRouter<R> {
  return {
    router,
    get logs() {
      lineSinkOf(logger)?.flush?.();
      return logs;
    },
    keysFile: join(dir, 'keys.yaml'),
    async close() {
      await router.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A router not listening: use it with supertest. */
export async function buildTestRouter(options: TestRouterOptions): Promise<TestRouter<Router>> {
  const { dir, config, logs, logger } = await prepare(options);
  return testRouter(await createRouter(config, { logger, processMetrics: false, ...(options.random ? { random: options.random } : {}) }), dir, logs, logger);
}

/** A router listening on 127.0.0.1 (API and admin on free ports). */
export async function startTestRouter(options: TestRouterOptions): Promise<TestRouter<RunningRouter>> {
  const { dir, config, logs, logger } = await prepare(options);
  return testRouter(await startRouter(config, { logger, processMetrics: false, ...(options.random ? { random: options.random } : {}) }), dir, logs, logger);
}

/** One chat pool and deployment in front of `endpoints`. */
export function chatSetup(endpoints: string[], extra: Partial<TestRouterOptions> = {}): TestRouterOptions {
  return {
    pools: [{ name: 'llm', servedModelName: 'served/llm', capabilities: ['chat'], endpoints }],
    deployments: [{ id: 'llm-prod', model: 'llm', aliases: ['default'], targets: [{ pool: 'llm' }] }],
    ...extra,
  };
}

/** The router's admin /metrics text. */
export async function adminMetrics(g: TestRouter<RunningRouter>): Promise<string> {
  return (await rawRequest(`${g.router.adminUrl}/metrics`)).body;
}

/** Sum of a series' samples whose labels include `labels`. */
/** The sum of a series on a router's admin `/metrics` (its `labels` matching; 0 when absent). */
export async function scrapedMetric(adminUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricSum((await rawRequest(`${adminUrl}/metrics`)).body, name, labels);
}

export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}
