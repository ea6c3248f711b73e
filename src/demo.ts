/**
 * `modelgate demo` (what `npm start` runs): six simulated replicas — two vLLM chat, one TEI
 * embeddings, a vLLM reranker, a vLLM Whisper and a vLLM 70B chat replica that loads its model for a
 * while after the start — on free local ports, the router in front of them on 127.0.0.1, and a demo key. Prints
 * how to call it, then the router's log: one access-log line per request at the default level `info`,
 * pretty-printed on a terminal and JSON lines (as `modelgate serve` writes them) otherwise.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type DestinationStream, type Logger } from 'pino';
import { buildConfig } from './config/load.js';
import { LOG_LEVELS, type LogLevel } from './config/schema.js';
import { createLogger, startRouter, type RunningRouter } from './main.js';
import { defaultSimOptions } from './sim/options.js';
import { startSim, type SimServer } from './sim/server.js';

export const DEMO_KEY = 'sk-modelgate-demo';
export const DEMO_CHAT_MODEL = 'llama-3.1-8b-instruct';
export const DEMO_EMBEDDING_MODEL = 'bge-small-en';
export const DEMO_RERANK_MODEL = 'bge-reranker';
export const DEMO_AUDIO_MODEL = 'whisper-1';
/** A model whose one replica is still loading when the demo starts: its requests wait for it (scale from zero). */
export const DEMO_COLD_MODEL = 'llama-3.1-70b-instruct';
/** How long the cold model's replica takes to load, by default. */
export const DEMO_COLD_LOAD_MS = 20_000;

export interface DemoOptions {
  port: number;
  adminPort: number;
  logLevel: LogLevel;
}

export const DEMO_DEFAULTS: Readonly<DemoOptions> = { port: 8080, adminPort: 9090, logLevel: 'info' };

export interface DemoDeps {
  /** The router's logger; by default the JSON logger `serve` uses, at `options.logLevel`, on stdout. */
  logger?: Logger;
  /** The cold model's load time (default {@link DEMO_COLD_LOAD_MS}). */
  coldLoadMs?: number;
}

export interface RunningDemo {
  router: RunningRouter;
  sims: SimServer[];
  close(): Promise<void>;
}

/** A bad `modelgate demo` flag; the message is one line naming the flag. */
export class DemoUsageError extends Error {
  readonly code = 'DEMO_BAD_FLAG';
}

function port(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0 || n > 65535) throw new DemoUsageError(`${flag} must be a port number from 0 to 65535 (got "${value}")`);
  return n;
}

/** `modelgate demo [--port N] [--admin-port M] [--log-level LEVEL]`. Throws {@link DemoUsageError}. */
export function parseDemoArgs(args: string[]): DemoOptions {
  let values: Record<string, string | undefined>;
  try {
    values = parseArgs({ args, options: { port: { type: 'string' }, 'admin-port': { type: 'string' }, 'log-level': { type: 'string' } }, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new DemoUsageError(`${(err as Error).message} (modelgate demo takes --port, --admin-port and --log-level)`);
  }
  const level = values['log-level'] ?? DEMO_DEFAULTS.logLevel;
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new DemoUsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')} (got "${level}")`);
  return {
    port: port(values.port, '--port', DEMO_DEFAULTS.port),
    adminPort: port(values['admin-port'], '--admin-port', DEMO_DEFAULTS.adminPort),
    logLevel: level as LogLevel,
  };
}

/**
 * The demo's logger on `out`: pretty lines when `out` is a terminal, JSON lines otherwise. pino-pretty
 * is imported here, only when needed, so `modelgate serve` never loads it.
 */
export async function demoLogger(level: LogLevel, out: NodeJS.WritableStream & { isTTY?: boolean }): Promise<Logger> {
  let destination: DestinationStream = out;
  if (out.isTTY) {
    const { default: pretty } = await import('pino-pretty');
    destination = pretty({ destination: out, singleLine: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,service' });
  }
  return createLogger(level, destination);
}

export async function startDemo(options: DemoOptions, deps: DemoDeps = {}): Promise<RunningDemo> {
  const realistic = { ttftMs: 40, prefillMsPerToken: 0.05, itlMs: 12, jitter: 0.1, outputMin: 16, outputMax: 64 };
  const chat = ['meta-llama/Llama-3.1-8B-Instruct'];
  const sims = await Promise.all([
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'llama-0', model: chat }),
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'llama-1', model: chat }),
    // The pool says `engine: tei`, so the router scrapes TEI's metric names.
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'bge-0', model: ['BAAI/bge-small-en-v1.5'], embeddingDim: 384, engine: 'tei' }),
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'reranker-0', model: ['BAAI/bge-reranker-v2-m3'] }),
    startSim({ ...defaultSimOptions(), ...realistic, port: 0, name: 'whisper-0', model: ['openai/whisper-large-v3'] }),
    // Listens at once but answers 503 (its /health too) until its model has loaded.
    startSim(
      { ...defaultSimOptions(), ...realistic, port: 0, name: 'llama-70b-0', model: ['meta-llama/Llama-3.1-70B-Instruct'], loadTimeMs: deps.coldLoadMs ?? DEMO_COLD_LOAD_MS },
      { log: () => undefined },
    ),
  ]);
  const dir = await mkdtemp(join(tmpdir(), 'modelgate-demo-'));
  try {
    await writeFile(join(dir, 'keys.yaml'), `- name: demo\n  key: ${DEMO_KEY}\n`);
    const config = buildConfig(
      {
        server: { host: '127.0.0.1', port: options.port },
        admin: { host: '127.0.0.1', port: options.adminPort },
        log: { level: options.logLevel },
        auth: { keysFile: 'keys.yaml' },
        pools: [
          {
            name: 'llama-8b',
            engine: 'vllm',
            servedModelName: chat[0],
            capabilities: ['chat', 'completions', 'responses', 'messages', 'tokenize'],
            endpoints: [sims[0]?.url, sims[1]?.url],
          },
          { name: 'bge-small', engine: 'tei', servedModelName: 'BAAI/bge-small-en-v1.5', capabilities: ['embeddings'], endpoints: [sims[2]?.url] },
          { name: 'bge-reranker', engine: 'vllm', servedModelName: 'BAAI/bge-reranker-v2-m3', capabilities: ['rerank', 'score'], endpoints: [sims[3]?.url] },
          { name: 'whisper', engine: 'vllm', servedModelName: 'openai/whisper-large-v3', capabilities: ['audio'], endpoints: [sims[4]?.url] },
          {
            name: 'llama-70b',
            engine: 'vllm',
            servedModelName: 'meta-llama/Llama-3.1-70B-Instruct',
            capabilities: ['chat'],
            endpoints: [sims[5]?.url],
            resilience: { healthCheck: { enabled: true, intervalMs: 500 }, scaleFromZero: { enabled: true, maxWaitMs: 120_000 } },
          },
        ],
        deployments: [
          { id: 'llama-8b-prod', model: DEMO_CHAT_MODEL, aliases: ['default'], targets: [{ pool: 'llama-8b' }] },
          { id: 'bge-small-prod', model: DEMO_EMBEDDING_MODEL, aliases: ['text-embedding-3-small'], targets: [{ pool: 'bge-small' }] },
          { id: 'bge-reranker-prod', model: DEMO_RERANK_MODEL, targets: [{ pool: 'bge-reranker' }] },
          { id: 'whisper-prod', model: DEMO_AUDIO_MODEL, targets: [{ pool: 'whisper' }] },
          { id: 'llama-70b-prod', model: DEMO_COLD_MODEL, targets: [{ pool: 'llama-70b' }] },
        ],
      },
      dir,
    );
    const router = await startRouter(config, deps.logger ? { logger: deps.logger } : {});
    return {
      router,
      sims,
      async close() {
        await router.close();
        await Promise.all(sims.map((s) => s.close()));
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await Promise.all(sims.map((s) => s.close()));
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** What the demo prints once it runs; `logLevel` says whether access-log lines follow (they are `info`). */
export function demoInstructions(demo: RunningDemo, logLevel: LogLevel = DEMO_DEFAULTS.logLevel): string {
  const accessLog = LOG_LEVELS.indexOf(logLevel) >= LOG_LEVELS.indexOf('info') && logLevel !== 'silent';
  const base = demo.router.apiUrl;
  return `
modelgate demo is running.
  API:     ${base}/v1   (key: ${DEMO_KEY})
  Admin:   ${demo.router.adminUrl}/metrics  /livez  /readyz  /status
  Models:  ${DEMO_CHAT_MODEL} (alias "default") on 2 simulated vLLM replicas: chat, completions,
             responses, messages (Anthropic), tokenize
           ${DEMO_EMBEDDING_MODEL} (alias "text-embedding-3-small") on 1 simulated TEI replica: embeddings
           ${DEMO_RERANK_MODEL} on 1 simulated vLLM replica: rerank, score
           ${DEMO_AUDIO_MODEL} on 1 simulated vLLM replica: audio transcriptions and translations
           ${DEMO_COLD_MODEL} on 1 simulated vLLM replica that loads its model for ${Math.round(DEMO_COLD_LOAD_MS / 1000)} s after the
             start: a request before then waits for it (scale from zero), then is answered

Try:
  curl -s ${base}/v1/chat/completions \\
    -H 'Authorization: Bearer ${DEMO_KEY}' -H 'Content-Type: application/json' \\
    -d '{"model":"${DEMO_CHAT_MODEL}","messages":[{"role":"user","content":"Hello!"}]}'

${accessLog ? 'Each request logs an access-log line below (--log-level warn hides them). ' : ''}Press Ctrl+C to stop.
`;
}

/**
 * `modelgate demo`: parses the flags, starts the demo with its log on `out` and prints the
 * instructions there. Stopping it (signals) is the caller's. Throws {@link DemoUsageError} for a bad flag.
 */
export async function runDemo(args: string[], out: NodeJS.WritableStream & { isTTY?: boolean } = process.stdout): Promise<RunningDemo> {
  const options = parseDemoArgs(args);
  const demo = await startDemo(options, { logger: await demoLogger(options.logLevel, out) });
  out.write(demoInstructions(demo, options.logLevel));
  return demo;
}
