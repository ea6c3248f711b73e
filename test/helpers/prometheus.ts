/**
 * A real Prometheus (and its promtool) for tests: 127.0.0.1, a free port, a temp dir of its own for
 * the config and the TSDB, scraping the given targets every second and evaluating the given rule
 * files every second. `stop()` kills it and removes the dir; an exit hook kills it should the test
 * process exit without `stop()`. The binaries come from Debian's `prometheus` package, found on PATH
 * like test/helpers/redis-server.ts finds redis-server (.ci/run installs them).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, stopChild, untilReady } from './child-process.js';

const PROMETHEUS = 'prometheus';
const PROMTOOL = 'promtool';
const INSTALL_HINT = 'the real-Prometheus tests need Prometheus 2.x: .ci/run installs it (apt-get install prometheus); install it the same way to run them locally.';
const START_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 5_000;
const POLL_MS = 100;
const START_ATTEMPTS = 3;

export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

/** What /api/v1/query answered: the vector, or Prometheus' error (e.g. a query that does not parse). */
export type QueryAnswer = { ok: true; result: PromSample[] } | { ok: false; error: string };

/** One series' exemplars from /api/v1/query_exemplars. */
export interface PromExemplars {
  seriesLabels: Record<string, string>;
  exemplars: Array<{ labels: Record<string, string>; value: string; timestamp: number }>;
}

export interface PromAlert {
  labels: Record<string, string>;
  state: 'pending' | 'firing' | 'inactive';
}

export interface PrometheusServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** Evaluates an instant query now. */
  query(expr: string): Promise<QueryAnswer>;
  /** The alerts the rule manager holds (pending and firing). */
  alerts(): Promise<PromAlert[]>;
  /** The exemplars stored for the series `expr` selects over the last `seconds` (needs the `exemplar-storage` feature). */
  exemplars(expr: string, seconds: number): Promise<PromExemplars[]>;
  /** Kills Prometheus and removes its temp dir. */
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  /** host:port of each /metrics target. */
  targets: string[];
  /** Absolute paths of rule files to load. */
  ruleFiles?: string[];
  /** `--enable-feature` flags, e.g. `exemplar-storage`. */
  features?: string[];
}

/** Starts Prometheus; rejects (does not skip) when it is not installed. */
export async function startPrometheus(options: PrometheusOptions): Promise<PrometheusServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await serve(await freePort(), options);
    } catch (err) {
      if (attempt >= START_ATTEMPTS || !(err instanceof Error && err.message.includes('address already in use'))) throw err;
    }
  }
}

async function serve(port: number, options: PrometheusOptions): Promise<PrometheusServer> {
  const dir = mkdtempSync(join(tmpdir(), 'modelgate-prometheus-'));
  const config = {
    global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
    rule_files: options.ruleFiles ?? [],
    scrape_configs: [{ job_name: 'modelgate', metrics_path: '/metrics', static_configs: [{ targets: options.targets }] }],
  };
  writeFileSync(join(dir, 'prometheus.yml'), JSON.stringify(config)); // JSON is YAML
  const child = spawn(
    PROMETHEUS,
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
      ...(options.features ?? []).map((f) => `--enable-feature=${f}`),
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const killOnExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    process.removeListener('exit', killOnExit);
    await stopChild(child, STOP_TIMEOUT_MS);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await untilReady(child, {
      name: PROMETHEUS,
      installHint: INSTALL_HINT,
      timeoutMs: START_TIMEOUT_MS,
      pollMs: POLL_MS,
      readiness: 'was not ready (GET /-/ready)',
      probe: () =>
        fetch(`${url}/-/ready`).then(
          (res) => res.status === 200,
          () => false,
        ),
      output: () => output,
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url,
    stop,
    query: async (expr) => {
      const res = await fetch(`${url}/api/v1/query?${new URLSearchParams({ query: expr }).toString()}`);
      const body = (await res.json()) as { status: string; error?: string; data?: { resultType: string; result: PromSample[] } };
      if (body.status !== 'success' || !body.data) return { ok: false, error: body.error ?? `HTTP ${res.status}` };
      if (body.data.resultType !== 'vector') return { ok: false, error: `a ${body.data.resultType}, not a vector` };
      return { ok: true, result: body.data.result };
    },
    alerts: async () => {
      const body = (await (await fetch(`${url}/api/v1/alerts`)).json()) as { data: { alerts: PromAlert[] } };
      return body.data.alerts;
    },
    exemplars: async (expr, seconds) => {
      const end = Date.now() / 1000;
      const query = new URLSearchParams({ query: expr, start: String(end - seconds), end: String(end) });
      const body = (await (await fetch(`${url}/api/v1/query_exemplars?${query.toString()}`)).json()) as { status: string; error?: string; data?: PromExemplars[] };
      if (body.status !== 'success') throw new Error(`query_exemplars ${expr}: ${body.error ?? 'failed'}`);
      return body.data ?? [];
    },
  };
}

/** Runs promtool with `args`, `input` on its stdin: its exit code and output. Rejects when it is not installed. */
export function promtool(args: string[], input = ''): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PROMTOOL, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'ENOENT' ? new Error(`${PROMTOOL} is not installed (not on PATH): ${INSTALL_HINT}`) : err));
    child.once('close', (code) => resolve({ code: code ?? -1, output }));
    child.stdin.end(input);
  });
}

/** Polls `check` every {@link POLL_MS} until it returns a value other than undefined, at most `timeoutMs`. */
export async function until<T>(check: () => Promise<T | undefined>, what: string, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
