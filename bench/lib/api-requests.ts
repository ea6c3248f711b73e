/**
 * The inference APIs the `apis` harness measures: one fixed request per API (the same bytes every
 * time), a minimal check of each answer (a stream must end with its API's last event, a JSON answer
 * must have its API's shape), and an open-loop load generator (fixed arrivals, its own process like
 * `loadgen.ts`) that sends any body type (the audio upload is `multipart/form-data`) and checks every
 * answer it gets. Latency is measured from the scheduled send time; the check runs after the last
 * byte is timed.
 */
import http from 'node:http';
import { openLoop } from './loadgen.js';
import { mulberry32 } from './random.js';
import { inWorker, serveWorker } from './worker.js';

export interface ApiSpec {
  /** Name in the report. */
  id: string;
  /** Label in the chart. */
  short: string;
  path: string;
  stream: boolean;
  /** How modelgate takes the key on this API (`/v1/messages`: `x-api-key`, as Anthropic's clients send it). */
  auth: 'bearer' | 'x-api-key';
  /** What the request is, in words, for the report. */
  what: string;
  body(model: string): { type: string; bytes: Buffer };
  /** Why the answer (2xx) is malformed, or undefined when it is fine. */
  check(text: string): string | undefined;
}

const PROMPT = 'Write a haiku about load balancers.';
/** Above the simulator's fixed answer length (the harness passes `--output-min`/`--output-max`), so every answer ends on its own. */
export const MAX_TOKENS = 32;
/** The audio upload: 200 KiB, as 16 kHz 16-bit mono PCM 6.4 s of "speech". */
export const AUDIO_BYTES = 200 * 1024;
const BOUNDARY = '----modelgate-bench-7f3c9a1e5b2d4c68';

const json = (o: object): { type: string; bytes: Buffer } => ({ type: 'application/json', bytes: Buffer.from(JSON.stringify(o)) });

/** A multipart form as OpenAI's SDKs send it: the text fields, then the file. */
function upload(model: string): { type: string; bytes: Buffer } {
  const random = mulberry32(42);
  const audio = Buffer.alloc(AUDIO_BYTES);
  for (let i = 0; i < audio.length; i++) audio[i] = Math.floor(random() * 256);
  const field = (name: string, value: string): string => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  const head = `${field('model', model)}${field('response_format', 'json')}--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="speech.wav"\r\nContent-Type: audio/wav\r\n\r\n`;
  return { type: `multipart/form-data; boundary=${BOUNDARY}`, bytes: Buffer.concat([Buffer.from(head), audio, Buffer.from(`\r\n--${BOUNDARY}--\r\n`)]) };
}

type Json = Record<string, unknown>;
const parse = (text: string): Json | undefined => {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
  } catch {
    return undefined;
  }
};
const first = (list: unknown): Json | undefined => (Array.isArray(list) && typeof list[0] === 'object' && list[0] !== null ? (list[0] as Json) : undefined);
const shown = (text: string): string => JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}…` : text);
/** A JSON answer checked by `ok`. */
const jsonAnswer =
  (what: string, ok: (o: Json) => boolean) =>
  (text: string): string | undefined => {
    const o = parse(text);
    return o && ok(o) ? undefined : `not ${what}: ${shown(text)}`;
  };
/** The last SSE event of a stream, trailing blank lines dropped. */
const lastEvent = (text: string): string =>
  text
    .trimEnd()
    .split(/\r?\n\r?\n/)
    .at(-1) ?? '';
/** chat and completions: content chunks, no error event (a cut stream gets `data: {"error"…}` then `[DONE]`), `[DONE]` last. */
const openaiStream = (text: string): string | undefined =>
  !text.includes('"choices"') || text.includes('data: {"error"') || lastEvent(text) !== 'data: [DONE]' ? `stream not ended by [DONE] after chunks: ${shown(text.slice(-120))}` : undefined;
/** Responses and Messages: typed events, the API's own last one at the end (a cut stream ends with `event: error`). */
const typedStream =
  (last: string) =>
  (text: string): string | undefined =>
    lastEvent(text).startsWith(`event: ${last}\n`) ? undefined : `stream not ended by ${last}: ${shown(text.slice(-120))}`;

const chat = (model: string, stream: boolean): object => ({ model, messages: [{ role: 'user', content: PROMPT }], max_tokens: MAX_TOKENS, ...(stream ? { stream } : {}) });
const completions = (model: string, stream: boolean): object => ({ model, prompt: PROMPT, max_tokens: MAX_TOKENS, ...(stream ? { stream } : {}) });
const responses = (model: string, stream: boolean): object => ({ model, input: PROMPT, max_output_tokens: MAX_TOKENS, ...(stream ? { stream } : {}) });
const messages = (model: string, stream: boolean): object => ({ model, max_tokens: MAX_TOKENS, messages: [{ role: 'user', content: PROMPT }], ...(stream ? { stream } : {}) });
const DOCUMENTS = ['A load balancer spreads requests over replicas.', 'A haiku has three lines.', 'GPUs run the model.'];

/** Chat (streamed) first: it is the reference the others are held to. */
export const API_SPECS: readonly ApiSpec[] = [
  { id: 'chat streamed', short: 'chat s', path: '/v1/chat/completions', stream: true, auth: 'bearer', what: 'one user message', body: (m) => json(chat(m, true)), check: openaiStream },
  {
    id: 'completions',
    short: 'cmpl',
    path: '/v1/completions',
    stream: false,
    auth: 'bearer',
    what: 'a string prompt',
    body: (m) => json(completions(m, false)),
    check: jsonAnswer('a text completion', (o) => o.object === 'text_completion' && typeof first(o.choices)?.text === 'string'),
  },
  { id: 'completions streamed', short: 'cmpl s', path: '/v1/completions', stream: true, auth: 'bearer', what: 'a string prompt', body: (m) => json(completions(m, true)), check: openaiStream },
  {
    id: 'responses',
    short: 'resp',
    path: '/v1/responses',
    stream: false,
    auth: 'bearer',
    what: 'a string `input` (stored, the default)',
    body: (m) => json(responses(m, false)),
    check: jsonAnswer('a completed response', (o) => o.object === 'response' && o.status === 'completed'),
  },
  {
    id: 'responses streamed',
    short: 'resp s',
    path: '/v1/responses',
    stream: true,
    auth: 'bearer',
    what: 'a string `input` (stored, the default)',
    body: (m) => json(responses(m, true)),
    check: typedStream('response.completed'),
  },
  {
    id: 'messages',
    short: 'msg',
    path: '/v1/messages',
    stream: false,
    auth: 'x-api-key',
    what: 'one user message',
    body: (m) => json(messages(m, false)),
    check: jsonAnswer('a message', (o) => o.type === 'message' && first(o.content)?.type === 'text'),
  },
  {
    id: 'messages streamed',
    short: 'msg s',
    path: '/v1/messages',
    stream: true,
    auth: 'x-api-key',
    what: 'one user message',
    body: (m) => json(messages(m, true)),
    check: typedStream('message_stop'),
  },
  {
    id: 'embeddings',
    short: 'embed',
    path: '/v1/embeddings',
    stream: false,
    auth: 'bearer',
    what: 'one string (384 floats back)',
    body: (m) => json({ model: m, input: PROMPT }),
    check: jsonAnswer('an embedding', (o) => Array.isArray(first(o.data)?.embedding) && (first(o.data)!.embedding as unknown[]).length > 0),
  },
  {
    id: 'rerank',
    short: 'rerank',
    path: '/v1/rerank',
    stream: false,
    auth: 'bearer',
    what: 'a query, 3 documents',
    body: (m) => json({ model: m, query: 'load balancer', documents: DOCUMENTS }),
    check: jsonAnswer('3 rerank results', (o) => Array.isArray(o.results) && o.results.length === DOCUMENTS.length),
  },
  {
    id: 'score',
    short: 'score',
    path: '/v1/score',
    stream: false,
    auth: 'bearer',
    what: '`text_1` against 3 `text_2`',
    body: (m) => json({ model: m, text_1: 'load balancer', text_2: DOCUMENTS }),
    check: jsonAnswer('3 scores', (o) => Array.isArray(o.data) && o.data.length === DOCUMENTS.length),
  },
  {
    id: 'tokenize',
    short: 'tokenize',
    path: '/tokenize',
    stream: false,
    auth: 'bearer',
    what: 'a string prompt',
    body: (m) => json({ model: m, prompt: PROMPT }),
    check: jsonAnswer('tokens', (o) => Array.isArray(o.tokens) && o.tokens.length > 0 && o.tokens.length === o.count),
  },
  {
    id: 'audio transcription',
    short: 'audio',
    path: '/v1/audio/transcriptions',
    stream: false,
    auth: 'bearer',
    what: `a ${AUDIO_BYTES / 1024} KiB file, \`response_format=json\``,
    body: upload,
    check: jsonAnswer('a transcript', (o) => typeof o.text === 'string' && o.text !== ''),
  },
];

export interface ApiJob {
  /** `ApiSpec.id`. */
  api: string;
  model: string;
  /** Base URL (scheme, host, port); the API's path is added. */
  url: string;
  headers: Record<string, string>;
  /** Arrivals per second, evenly spaced. */
  rate: number;
  warmupMs: number;
  durationMs: number;
}

export interface ApiSample {
  status: number;
  /** Time to the first body byte (-1: none came). */
  ttfbMs: number;
  ttlbMs: number;
  /** Transport error, non-2xx status or malformed answer. */
  error?: string;
}

export interface ApiLoadResult {
  /** Requests scheduled in the measured window. */
  samples: ApiSample[];
  /** Requests finished in all, warm-up included (for CPU per request). */
  finished: number;
  maxSendLagMs: number;
}

async function run(job: ApiJob): Promise<ApiLoadResult> {
  const spec = API_SPECS.find((s) => s.id === job.api);
  if (!spec) throw new Error(`unknown API ${job.api}`);
  const { type, bytes } = spec.body(job.model);
  const target = new URL(spec.path, job.url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 100_000 });
  const headers = { ...job.headers, 'content-type': type, 'content-length': bytes.length };
  const samples: ApiSample[] = [];
  const t0 = performance.now();
  const windowStart = t0 + job.warmupMs;
  const windowEnd = windowStart + job.durationMs;
  let finished = 0;
  let maxSendLagMs = 0;

  const once = (scheduledAt: number): Promise<void> =>
    new Promise((resolve) => {
      maxSendLagMs = Math.max(maxSendLagMs, performance.now() - scheduledAt);
      const record = (s: ApiSample): void => {
        finished++;
        if (scheduledAt >= windowStart && scheduledAt < windowEnd) samples.push(s);
        resolve();
      };
      const req = http.request({ agent, host: target.hostname, port: target.port, path: target.pathname, method: 'POST', headers }, (res) => {
        let ttfbMs = -1;
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => {
          if (ttfbMs < 0) ttfbMs = performance.now() - scheduledAt;
          chunks.push(chunk);
        });
        res.on('end', () => {
          const ttlbMs = performance.now() - scheduledAt;
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).toString('utf8');
          const error = status < 200 || status > 299 ? `HTTP ${status}: ${shown(text)}` : spec.check(text);
          record({ status, ttfbMs, ttlbMs, ...(error ? { error } : {}) });
        });
        res.on('error', (err) => record({ status: res.statusCode ?? 0, ttfbMs, ttlbMs: performance.now() - scheduledAt, error: err.message }));
      });
      req.on('error', (err) => record({ status: 0, ttfbMs: -1, ttlbMs: performance.now() - scheduledAt, error: err.message }));
      req.end(bytes);
    });

  await openLoop(t0, windowEnd, () => 1000 / job.rate, once, 60_000);
  agent.destroy();
  return { samples, finished, maxSendLagMs };
}

/** Runs a job in a fresh load-generator process (`--max-semi-space-size=4`, as `loadgen.ts`). */
export function loadApi(job: ApiJob): Promise<ApiLoadResult> {
  return inWorker(import.meta.url, '--api-loadgen-worker', job);
}

serveWorker('--api-loadgen-worker', run);
