/**
 * `modelgate sim` flags. {@link SIM_FLAGS} is the one table of defaults: the parser, `--help` and the
 * README all come from it. Defaults keep tests fast (a few ms per request); pass realistic latencies
 * (e.g. `--ttft-ms 60 --itl-ms 15`) for a demo or a benchmark.
 */
import { parseArgs } from 'node:util';
import { parseFault, FaultSpecError } from './faults.js';

/** Engines whose `/metrics` dialect the simulator speaks (every engine the router scrapes). */
export const SIM_ENGINES = ['vllm', 'sglang', 'tgi', 'tei', 'llamacpp'] as const;
export type SimEngineKind = (typeof SIM_ENGINES)[number];

export interface SimOptions {
  host: string;
  port: number;
  name: string;
  model: string[];
  engine: SimEngineKind;
  maxModelLen: number;
  maxNumSeqs: number;
  maxWaiting: number;
  loadTimeMs: number;
  ttftMs: number;
  prefillMsPerToken: number;
  itlMs: number;
  loadFactor: number;
  jitter: number;
  outputMin: number;
  outputMax: number;
  blockSize: number;
  kvCacheBlocks: number;
  embeddingDim: number;
  maxBodyBytes: number;
  fault: string;
  failureRate: number;
  failureStatus: number;
  kvEventsPort: number;
  kvEventsReplayPort: number;
  kvEventsTopic: string;
  /** A model's tokenizer directory: chats rendered with its template, KV events with its token ids ('' = the simulator's own). */
  tokenizerDir: string;
  loraAdapters: string[];
  maxLora: number;
  loraLoadMs: number;
}

interface FlagSpec<T> {
  default: T;
  help: string;
  kind: 'int' | 'number' | 'string' | 'list' | 'choice';
  min?: number;
  max?: number;
  /** The accepted values of a `choice`. */
  choices?: readonly string[];
}

type FlagTable = { [K in keyof SimOptions]: FlagSpec<SimOptions[K]> };

export const SIM_FLAGS: FlagTable = {
  host: { default: '127.0.0.1', kind: 'string', help: 'address to listen on' },
  port: { default: 8000, kind: 'int', min: 0, max: 65535, help: 'port to listen on (0 = any free port)' },
  name: { default: '', kind: 'string', help: 'replica name sent in the x-sim-replica header (none = host:port)' },
  model: { default: ['sim-model'], kind: 'list', help: 'served model name; repeat for several, the first is the default' },
  engine: { default: 'vllm', kind: 'choice', choices: SIM_ENGINES, help: `metrics dialect of GET /metrics: ${SIM_ENGINES.join(' | ')}` },
  maxModelLen: { default: 8192, kind: 'int', min: 16, help: 'context length: prompt + max_tokens must fit' },
  maxNumSeqs: { default: 16, kind: 'int', min: 1, help: 'requests running at once (the continuous batch)' },
  maxWaiting: { default: 256, kind: 'int', min: 0, help: 'requests that may wait for a slot; beyond that 429' },
  loadTimeMs: { default: 0, kind: 'number', min: 0, max: 86_400_000, help: 'model load time (ms) after start: until then /health, /v1/models and inference answer 503' },
  ttftMs: { default: 4, kind: 'number', min: 0, help: 'fixed prefill cost (ms) in the time to first token' },
  prefillMsPerToken: { default: 0.02, kind: 'number', min: 0, help: 'prefill cost per uncached prompt token (ms)' },
  itlMs: { default: 2, kind: 'number', min: 0, help: 'inter-token latency with one running request (ms)' },
  loadFactor: { default: 2, kind: 'number', min: 1, help: 'prefill and ITL multiplier with a full batch (linear in between)' },
  jitter: { default: 0, kind: 'number', min: 0, max: 1, help: 'relative standard deviation of every delay' },
  outputMin: { default: 8, kind: 'int', min: 1, help: 'shortest natural answer (tokens until the synthetic EOS)' },
  outputMax: { default: 32, kind: 'int', min: 1, help: 'longest natural answer' },
  blockSize: { default: 16, kind: 'int', min: 1, help: 'tokens per KV-cache block (the prefix-cache unit)' },
  kvCacheBlocks: { default: 4096, kind: 'int', min: 1, help: 'KV-cache size in blocks (prefix-cache capacity, usage metric)' },
  embeddingDim: { default: 384, kind: 'int', min: 1, max: 65536, help: 'embedding vector size' },
  maxBodyBytes: { default: 4 * 1024 * 1024, kind: 'int', min: 1, help: 'largest request body; beyond that 413' },
  fault: { default: '', kind: 'string', help: 'fault for every request: status=N[,retry-after=S] | hang | slow-start=MS | die-after=N | stall-after=N | error-after=N' },
  failureRate: { default: 0, kind: 'number', min: 0, max: 1, help: 'fraction of requests that fail at random with --failure-status' },
  failureStatus: { default: 500, kind: 'int', min: 400, max: 599, help: 'status of random failures' },
  kvEventsPort: { default: 0, kind: 'int', min: 0, max: 65535, help: "publish KV-cache events on this port, as vLLM's --kv-events-config (ZMQ PUB, msgpack; 0 = off)" },
  kvEventsReplayPort: { default: 0, kind: 'int', min: 0, max: 65535, help: 'replay socket for missed KV-event batches (ZMQ ROUTER; 0 = none)' },
  kvEventsTopic: { default: '', kind: 'string', help: 'topic of the KV-event messages' },
  tokenizerDir: {
    default: '',
    kind: 'string',
    help: "a model's tokenizer.json and tokenizer_config.json: render chats with its chat template, publish KV events with its token ids (none = ChatML and the simulator's tokenizer)",
  },
  loraAdapters: { default: [], kind: 'list', help: 'LoRA adapters served on the base model (repeat, or comma-separated); more load at run time with POST /v1/load_lora_adapter' },
  maxLora: { default: 1, kind: 'int', min: 1, max: 256, help: 'adapters resident at once (vLLM --max-loras); a request for another waits for a slot' },
  loraLoadMs: { default: 20, kind: 'number', min: 0, max: 600_000, help: 'time (ms) to load an adapter into a slot, and for POST /v1/load_lora_adapter' },
};

/** `--lora-adapters` values: repeated flags, each possibly a comma-separated list. */
export function loraAdapterNames(values: readonly string[]): string[] {
  return values.flatMap((v) => v.split(',')).map((a) => a.trim());
}

export function isSimEngine(value: unknown): value is SimEngineKind {
  return (SIM_ENGINES as readonly unknown[]).includes(value);
}

export class SimOptionsError extends Error {
  readonly code = 'SIM_BAD_OPTION';
}

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());

export function defaultSimOptions(): SimOptions {
  const out = {} as Record<string, unknown>;
  for (const [key, spec] of Object.entries(SIM_FLAGS)) out[key] = Array.isArray(spec.default) ? [...spec.default] : spec.default;
  return out as unknown as SimOptions;
}

function convert(flag: string, spec: FlagSpec<unknown>, raw: string): number | string {
  if (spec.kind === 'string' || spec.kind === 'list') return raw;
  if (spec.kind === 'choice') {
    if (!spec.choices?.includes(raw)) throw new SimOptionsError(`--${flag} must be one of ${spec.choices?.join(', ')} (got "${raw}")`);
    return raw;
  }
  const value = Number(raw);
  const ok = raw.trim() !== '' && Number.isFinite(value) && (spec.kind === 'number' || Number.isInteger(value));
  const inRange = value >= (spec.min ?? -Infinity) && value <= (spec.max ?? Infinity);
  if (!ok || !inRange) {
    const range = spec.max === undefined ? `≥ ${spec.min ?? '-∞'}` : `from ${spec.min ?? '-∞'} to ${spec.max}`;
    throw new SimOptionsError(`--${flag} must be ${spec.kind === 'int' ? 'an integer' : 'a number'} ${range} (got "${raw}")`);
  }
  return value;
}

/** Checks that hold between flags. Throws {@link SimOptionsError} naming the flag. */
export function checkSimOptions(options: SimOptions): SimOptions {
  if (options.outputMin > options.outputMax) throw new SimOptionsError('--output-min must not exceed --output-max');
  if (options.model.length === 0 || options.model.some((m) => m.trim() === '')) throw new SimOptionsError('--model must be a non-empty name');
  if (options.kvEventsReplayPort > 0 && options.kvEventsPort === 0) throw new SimOptionsError('--kv-events-replay-port needs --kv-events-port (the replay socket replays what that one publishes)');
  if (!isSimEngine(options.engine)) throw new SimOptionsError(`--engine must be one of ${SIM_ENGINES.join(', ')} (got "${String(options.engine)}")`);
  const adapters = loraAdapterNames(options.loraAdapters);
  if (adapters.some((a) => a === '' || /\s/.test(a))) throw new SimOptionsError('--lora-adapters: every adapter needs a name without spaces');
  if (new Set(adapters).size !== adapters.length) throw new SimOptionsError('--lora-adapters: an adapter is listed twice');
  const clash = adapters.find((a) => options.model.includes(a));
  if (clash !== undefined) throw new SimOptionsError(`--lora-adapters: "${clash}" is also a --model name; give the adapter its own name`);
  const maxLoad = SIM_FLAGS.loadTimeMs.max ?? Infinity;
  if (!(options.loadTimeMs >= 0 && options.loadTimeMs <= maxLoad)) throw new SimOptionsError(`--load-time-ms must be a number from 0 to ${maxLoad} (got ${options.loadTimeMs})`);
  try {
    parseFault(options.fault);
  } catch (err) {
    if (err instanceof FaultSpecError) throw new SimOptionsError(`--fault: ${err.message}`);
    throw err;
  }
  return options;
}

/** Parses `modelgate sim` arguments. Throws {@link SimOptionsError} with the flag's name. */
export function parseSimArgs(argv: readonly string[]): SimOptions {
  const parseOptions: Record<string, { type: 'string'; multiple?: boolean }> = {};
  for (const [key, spec] of Object.entries(SIM_FLAGS)) parseOptions[kebab(key)] = { type: 'string', multiple: spec.kind === 'list' };
  let values: Record<string, string | string[] | undefined>;
  try {
    values = parseArgs({ args: [...argv], options: parseOptions, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new SimOptionsError(`${(err as Error).message}. Run "modelgate sim --help" for the flags.`);
  }
  const options = defaultSimOptions() as unknown as Record<string, unknown>;
  for (const [key, spec] of Object.entries(SIM_FLAGS) as Array<[string, FlagSpec<unknown>]>) {
    const raw = values[kebab(key)];
    if (raw === undefined) continue;
    options[key] = Array.isArray(raw) ? raw : convert(kebab(key), spec, raw);
  }
  return checkSimOptions(options as unknown as SimOptions);
}

export function simHelp(): string {
  const lines = ['Usage: modelgate sim [flags]', '', 'A simulated vLLM-compatible engine for tests, demos and benchmarks.', ''];
  for (const [key, spec] of Object.entries(SIM_FLAGS) as Array<[string, FlagSpec<unknown>]>) {
    const def = Array.isArray(spec.default) ? spec.default.join(',') : String(spec.default);
    lines.push(`  --${kebab(key).padEnd(22)} ${spec.help} (default: ${def === '' ? 'none' : def})`);
  }
  return lines.join('\n');
}
