/**
 * `modelgate sim`: an HTTP server (Node `http`, TCP_NODELAY, keep-alive) that answers like a small
 * vLLM replica. Routes: POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models, GET /health,
 * GET /metrics (in the `--engine`'s dialect), and GET|POST /sim/config to change latency, faults and
 * the metrics dialect at run time.
 */
import { randomUUID } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { isAbortError, systemClock, systemSleep, type Clock, type Sleep } from '../core/clock.js';
import { ChoiceGenerator, ChunkWriter, completionBody, DONE_EVENT, parseChatRequest, usageOf, type ChatJob, type TokenLogprob } from './chat.js';
import { embeddingBody, parseEmbeddingRequest } from './embeddings.js';
import { promptBlockHashes, QueueFullError, SimEngine, type LatencyModel, type Sequence } from './engine.js';
import { errorBody, streamErrorEvent, typeForStatus, vllmError, type VllmError } from './errors.js';
import { FaultSpecError, mergeFaults, parseFault, type Fault } from './faults.js';
import { renderMetrics } from './metrics-text.js';
import { checkSimOptions, isSimEngine, SIM_ENGINES, type SimEngineKind, type SimOptions } from './options.js';
import { RequestError } from './request-checks.js';
import { createRng } from './prng.js';

export interface SimServerDeps {
  clock?: Clock;
  sleep?: Sleep;
  random?: () => number;
  /** Where unexpected handler errors are reported (default stderr). */
  logError?: (message: string) => void;
}

/** What `POST /sim/config` and {@link SimServer.configure} may change while running. */
export interface SimRuntimeConfig {
  fault?: string;
  failureRate?: number;
  failureStatus?: number;
  unhealthy?: boolean;
  latency?: Partial<LatencyModel>;
  /** Whose metric names `/metrics` uses from now on. */
  engine?: SimEngineKind;
}

const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8' };
const JSON_TYPE = 'application/json';

function sendJson(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { ...headers, 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function sendError(res: ServerResponse, err: VllmError): void {
  sendJson(res, err.status, errorBody(err), err.headers);
}

/** An AbortSignal that fires when the client goes away before the response finished. */
function abortOnClose(res: ServerResponse): AbortSignal {
  const controller = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/**
 * Until a stream's client has taken what was written (its 'drain'), or the request is aborted. Like
 * vLLM behind uvicorn, whose send waits while the transport is paused, generation does not run ahead
 * of a client that is not reading.
 */
function drained(res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (!res.writableNeedDrain || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    res.once('drain', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

const newId = (): string => randomUUID().replaceAll('-', '');
const unixNow = (): number => Math.floor(Date.now() / 1000);

export class SimServer {
  readonly engine: SimEngine;
  private readonly server: http.Server;
  private readonly random: () => number;
  private readonly logError: (message: string) => void;
  private baseFault: Fault = {};
  private failureRate: number;
  private failureStatus: number;
  private unhealthy = false;
  private dialect: SimEngineKind;
  private name: string;
  private address = '';

  constructor(
    private readonly options: SimOptions,
    deps: SimServerDeps = {},
  ) {
    checkSimOptions(options);
    this.random = deps.random ?? Math.random;
    this.logError = deps.logError ?? ((m) => process.stderr.write(m + '\n'));
    this.engine = new SimEngine(
      {
        maxNumSeqs: options.maxNumSeqs,
        maxWaiting: options.maxWaiting,
        blockSize: options.blockSize,
        kvCacheBlocks: options.kvCacheBlocks,
        latency: {
          ttftOverheadMs: options.ttftMs,
          prefillMsPerToken: options.prefillMsPerToken,
          itlMs: options.itlMs,
          loadFactor: options.loadFactor,
          jitter: options.jitter,
        },
      },
      { clock: deps.clock ?? systemClock, sleep: deps.sleep ?? systemSleep, rng: createRng(Math.floor(this.random() * 2 ** 32)) },
    );
    this.baseFault = parseFault(options.fault);
    this.failureRate = options.failureRate;
    this.failureStatus = options.failureStatus;
    this.dialect = options.engine;
    this.name = options.name;
    this.server = http.createServer({ noDelay: true, keepAlive: true }, (req, res) => {
      this.route(req, res).catch((err: unknown) => this.internalError(res, err));
    });
  }

  /** Base URL, e.g. `http://127.0.0.1:8000`, once listening. */
  get url(): string {
    return this.address;
  }

  listen(): Promise<string> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, this.options.host, () => {
        this.server.off('error', reject);
        const { port } = this.server.address() as AddressInfo;
        const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
        this.address = `http://${host}:${port}`;
        if (this.name === '') this.name = `${host}:${port}`;
        resolve(this.address);
      });
    });
  }

  /** Stops listening and cuts every open connection (in-flight generations are aborted). */
  close(): Promise<void> {
    return new Promise((resolve) => {
      if (!this.server.listening) return resolve();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  configure(patch: SimRuntimeConfig): void {
    if (patch.fault !== undefined) this.baseFault = parseFault(patch.fault);
    if (patch.failureRate !== undefined) this.failureRate = patch.failureRate;
    if (patch.failureStatus !== undefined) this.failureStatus = patch.failureStatus;
    if (patch.unhealthy !== undefined) this.unhealthy = patch.unhealthy;
    if (patch.latency) this.engine.setLatency({ ...this.engine.latency, ...patch.latency });
    if (patch.engine !== undefined) this.dialect = patch.engine;
  }

  private runtimeConfig(): object {
    return { fault: this.baseFault, failureRate: this.failureRate, failureStatus: this.failureStatus, unhealthy: this.unhealthy, latency: this.engine.latency, engine: this.dialect };
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('x-sim-replica', this.name);
    const path = (req.url ?? '/').split('?', 1)[0];
    const allow = (method: string): boolean => {
      if (req.method === method) return true;
      sendError(res, vllmError(405, 'Method Not Allowed', 'Method Not Allowed'));
      return false;
    };
    try {
      switch (path) {
        case '/v1/chat/completions':
          if (allow('POST')) await this.chat(req, res);
          return;
        case '/v1/embeddings':
          if (allow('POST')) await this.embeddings(req, res);
          return;
        case '/v1/models':
          if (allow('GET')) sendJson(res, 200, this.modelsBody());
          return;
        case '/health':
          if (!allow('GET')) return;
          res.writeHead(this.unhealthy ? 503 : 200, { 'content-length': 0 });
          res.end();
          return;
        case '/metrics':
          if (!allow('GET')) return;
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
          res.end(renderMetrics(this.engine, this.options.model[0] ?? '', this.dialect));
          return;
        case '/sim/config':
          if (req.method === 'POST') this.configure(this.parseRuntimeConfig(await this.readBody(req)));
          else if (!allow('GET')) return;
          sendJson(res, 200, JSON.stringify(this.runtimeConfig()));
          return;
        default:
          sendError(res, vllmError(404, 'Not Found', 'Not Found'));
      }
    } catch (err) {
      if (err instanceof RequestError) return sendError(res, err.error);
      if (err instanceof FaultSpecError) return sendError(res, vllmError(400, 'BadRequestError', err.message, 'x-sim-fault'));
      throw err;
    }
  }

  private internalError(res: ServerResponse, err: unknown): void {
    this.logError(`sim: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    const failure = vllmError(500, 'InternalServerError', 'Internal server error');
    if (!res.headersSent) sendError(res, failure);
    else if (!res.writableEnded && !res.destroyed) res.end(streamErrorEvent(failure));
  }

  private async readBody(req: IncomingMessage): Promise<unknown> {
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > this.options.maxBodyBytes) {
        const err = vllmError(413, 'Request Entity Too Large', `Request body exceeds the limit of ${this.options.maxBodyBytes} bytes.`);
        err.headers = { connection: 'close' };
        throw new RequestError(err);
      }
      chunks.push(chunk);
    }
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
    } catch (err) {
      throw new RequestError(vllmError(400, 'Bad Request', `Invalid JSON body: ${(err as Error).message}`));
    }
  }

  private parseRuntimeConfig(raw: unknown): SimRuntimeConfig {
    const body = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
    const bad = (field: string): never => {
      throw new RequestError(vllmError(400, 'BadRequestError', `${field} has the wrong type`, field));
    };
    const out: SimRuntimeConfig = {};
    if (body.fault !== undefined) out.fault = typeof body.fault === 'string' ? body.fault : bad('fault');
    if (body.failureRate !== undefined) out.failureRate = typeof body.failureRate === 'number' && body.failureRate >= 0 && body.failureRate <= 1 ? body.failureRate : bad('failureRate');
    if (body.failureStatus !== undefined) out.failureStatus = Number.isInteger(body.failureStatus) ? (body.failureStatus as number) : bad('failureStatus');
    if (body.unhealthy !== undefined) out.unhealthy = typeof body.unhealthy === 'boolean' ? body.unhealthy : bad('unhealthy');
    if (body.engine !== undefined) {
      if (!isSimEngine(body.engine)) throw new RequestError(vllmError(400, 'BadRequestError', `engine must be one of ${SIM_ENGINES.join(', ')}`, 'engine'));
      out.engine = body.engine;
    }
    if (body.latency !== undefined) {
      if (typeof body.latency !== 'object' || body.latency === null) bad('latency');
      const latency: Partial<LatencyModel> = {};
      for (const [k, v] of Object.entries(body.latency as Record<string, unknown>)) {
        if (!(k in this.engine.latency) || typeof v !== 'number' || v < 0) bad(`latency.${k}`);
        latency[k as keyof LatencyModel] = v as number;
      }
      out.latency = latency;
    }
    return out;
  }

  private modelsBody(): string {
    const created = unixNow();
    return JSON.stringify({
      object: 'list',
      data: this.options.model.map((id) => ({
        id,
        object: 'model',
        created,
        owned_by: 'vllm',
        root: id,
        parent: null,
        max_model_len: this.options.maxModelLen,
        permission: [{ id: `modelperm-${newId()}`, object: 'model_permission', created, allow_create_engine: false, allow_sampling: true, allow_logprobs: true, allow_search_indices: false, allow_view: true, allow_fine_tuning: false, organization: '*', group: null, is_blocking: false }],
      })),
    });
  }

  /** The fault for this request: the configured one, the header's on top, then the random failure. */
  private faultFor(req: IncomingMessage): Fault {
    const header = req.headers['x-sim-fault'];
    let fault = typeof header === 'string' ? mergeFaults(this.baseFault, parseFault(header)) : this.baseFault;
    if (fault.status === undefined && this.failureRate > 0 && this.random() < this.failureRate) {
      fault = { ...fault, status: this.failureStatus };
    }
    return fault;
  }

  /** Handles `status` and `hang`. Returns true when the request is fully dealt with. */
  private async earlyFault(fault: Fault, res: ServerResponse): Promise<boolean> {
    if (fault.status !== undefined) {
      const err = vllmError(fault.status, typeForStatus(fault.status), `Injected failure (status ${fault.status}).`);
      if (fault.retryAfterSeconds !== undefined) err.headers = { 'retry-after': String(fault.retryAfterSeconds) };
      sendError(res, err);
      return true;
    }
    if (fault.hang) {
      await untilAborted(abortOnClose(res));
      return true;
    }
    return false;
  }

  /** Takes a slot, or answers 429 when the waiting queue is full (returns undefined). */
  private admit(res: ServerResponse, signal: AbortSignal): Promise<Sequence> | undefined {
    try {
      return this.engine.acquire(signal);
    } catch (err) {
      if (!(err instanceof QueueFullError)) throw err;
      sendError(res, vllmError(429, 'RateLimitError', err.message));
      return undefined;
    }
  }

  /** Runs `work` on an admitted sequence; an abort (client gone) or error always frees the slot. */
  private async withSequence(pending: Promise<Sequence>, work: (seq: Sequence) => Promise<void>): Promise<void> {
    let seq: Sequence;
    try {
      seq = await pending;
    } catch (err) {
      if (isAbortError(err)) return;
      throw err;
    }
    try {
      await work(seq);
    } catch (err) {
      if (!isAbortError(err)) {
        seq.finish('error');
        throw err;
      }
    } finally {
      seq.finish('abort');
    }
  }

  /**
   * Fault checks after `tokens` tokens. Returns true when the fault ended the request
   * (`die-after`, `error-after`) or after a `stall-after` once the client left.
   */
  private async midFault(fault: Fault, tokens: number, res: ServerResponse, seq: Sequence, signal: AbortSignal, stream: boolean): Promise<boolean> {
    if (fault.dieAfterTokens === tokens) {
      res.socket?.destroy();
      seq.finish('abort');
      return true;
    }
    if (fault.stallAfterTokens === tokens) {
      await untilAborted(signal);
      return true;
    }
    if (fault.errorAfterTokens === tokens) {
      const err = vllmError(500, 'InternalServerError', 'Internal server error');
      if (stream) res.end(streamErrorEvent(err));
      else sendError(res, err);
      seq.finish('error');
      return true;
    }
    return false;
  }

  private async chat(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const job = parseChatRequest(await this.readBody(req), {
      models: this.options.model,
      maxModelLen: this.options.maxModelLen,
      outputTokens: { min: this.options.outputMin, max: this.options.outputMax },
    });
    const fault = this.faultFor(req);
    if (await this.earlyFault(fault, res)) return;
    const signal = abortOnClose(res);
    const pending = this.admit(res, signal);
    if (!pending) return;
    // Like vLLM, a streamed request gets its 200 and headers as soon as the engine accepts it;
    // the first data event comes after the prefill.
    if (job.stream) {
      res.writeHead(200, SSE_HEADERS);
      res.flushHeaders();
    }
    await this.withSequence(pending, (seq) => this.generate(job, seq, fault, res, signal));
  }

  private async generate(job: ChatJob, seq: Sequence, fault: Fault, res: ServerResponse, signal: AbortSignal): Promise<void> {
    const seed = job.seed ?? Math.floor(this.random() * 2 ** 31);
    const outputTokens = { min: this.options.outputMin, max: this.options.outputMax };
    const choices = Array.from({ length: job.n }, (_, i) => new ChoiceGenerator(job, i, seed, outputTokens));
    const id = `chatcmpl-${newId()}`;
    const writer = new ChunkWriter(id, unixNow(), job.model);
    // Streamed: log-probs of tokens whose text is held back ride on the next chunk. Not streamed: all of them.
    const logprobs: TokenLogprob[][] = choices.map(() => []);

    const cached = await seq.prefill(job.promptTokens, promptBlockHashes(job.promptText, this.engine.blockSize), fault.slowStartMs ?? 0, signal);
    if (job.stream) for (const c of choices) res.write(writer.role(c.index));
    for (let tokens = 0; ; tokens++) {
      const active = choices.filter((c) => !c.finished);
      if (active.length === 0) break;
      if (tokens === 0) seq.accountGenerated(active.length);
      else await seq.decode(active.length, signal);
      if (await this.midFault(fault, tokens, res, seq, signal, job.stream)) return;
      for (const choice of active) {
        const step = choice.next();
        const pending = logprobs[choice.index] ?? [];
        pending.push(...step.logprobs);
        if (job.stream && (step.delta !== '' || step.finishReason)) {
          res.write(writer.step(choice.index, step, pending));
          logprobs[choice.index] = [];
        }
      }
      if (job.stream) await drained(res, signal);
    }
    const usage = usageOf(job, choices, cached);
    seq.finish(choices.some((c) => c.finishReason === 'length') ? 'length' : 'stop');
    if (job.stream) {
      res.end((job.includeUsage ? writer.usage(usage) : '') + DONE_EVENT);
    } else {
      sendJson(res, 200, completionBody(id, unixNow(), job, choices, usage, logprobs));
    }
  }

  private async embeddings(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const job = parseEmbeddingRequest(await this.readBody(req), {
      models: this.options.model,
      maxModelLen: this.options.maxModelLen,
      dimension: this.options.embeddingDim,
    });
    const fault = this.faultFor(req);
    if (await this.earlyFault(fault, res)) return;
    const signal = abortOnClose(res);
    const pending = this.admit(res, signal);
    if (!pending) return;
    await this.withSequence(pending, async (seq) => {
      await seq.prefill(job.promptTokens, [], fault.slowStartMs ?? 0, signal);
      if (await this.midFault(fault, 0, res, seq, signal, false)) return;
      seq.finish('stop');
      sendJson(res, 200, embeddingBody(`embd-${newId()}`, unixNow(), job, this.options.embeddingDim));
    });
  }
}

/** Starts a simulator and resolves once it listens. */
export async function startSim(options: SimOptions, deps?: SimServerDeps): Promise<SimServer> {
  const sim = new SimServer(options, deps);
  await sim.listen();
  return sim;
}
