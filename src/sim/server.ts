/**
 * `modelgate sim`: an HTTP server (Node `http`, TCP_NODELAY, keep-alive) that answers like a small
 * vLLM replica, in vLLM's exact JSON bodies and SSE streams. Inference routes (see `routes.ts`):
 * POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses (and GET
 * /v1/responses/{id}), /v1/messages (Anthropic), /rerank, /v1/rerank, /v2/rerank, /score, /v1/score,
 * /tokenize, /detokenize, /v1/audio/transcriptions and /v1/audio/translations. Also GET /v1/models,
 * GET /health, GET /metrics (in the `--engine`'s dialect), POST /reset_prefix_cache, and GET|POST
 * /sim/config to change latency, faults and the metrics dialect at run time. With `--kv-events-port`
 * it publishes its prefix cache's changes as vLLM's KV-cache events (kv-events.ts).
 *
 * It listens at once but loads its model for `--load-time-ms` first (see `model-load.ts`): until then
 * `/health` answers 503 and `/v1/models` and inference a 503 error with `Retry-After`, while
 * `/metrics` and `/sim/config` answer as usual.
 */
import http from '../core/node-http.js';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { systemClock, systemSleep, type Clock, type Sleep } from '../core/clock.js';
import { SimEngine } from './engine.js';
import { streamErrorEvent, typeForStatus, vllmError, type VllmError } from './errors.js';
import { FaultSpecError, mergeFaults, parseFault, type Fault } from './faults.js';
import { readJsonBody, sendError, sendJson, VLLM_ERRORS, type ErrorDialect } from './http-io.js';
import { LoraAdapterError, SimLora } from './lora.js';
import { ModelLoad } from './model-load.js';
import { modelsBody } from './models.js';
import { renderMetrics } from './metrics-text.js';
import { checkSimOptions, loraAdapterNames, type SimEngineKind, type SimOptions } from './options.js';
import { RequestError } from './request-checks.js';
import { createRng } from './prng.js';
import { ResponseStore } from './responses-store.js';
import { inferenceRoute } from './routes.js';
import { parseRuntimeConfig, type SimRuntimeConfig } from './runtime-config.js';
import { type InferenceContext } from './slots.js';
import type { KvEventsPublisher } from './kv-events.js';

export type { SimRuntimeConfig } from './runtime-config.js';
export { SimClosedError } from './model-load.js';

/** Responses API objects a replica keeps for `previous_response_id` and GET (the newest ones). */
const STORED_RESPONSES = 1000;

export interface SimServerDeps {
  clock?: Clock;
  sleep?: Sleep;
  random?: () => number;
  /** Where unexpected handler errors are reported (default stderr). */
  logError?: (message: string) => void;
  /** Where the line that a model load ended goes (default stdout). */
  log?: (message: string) => void;
}

export class SimServer {
  readonly engine: SimEngine;
  /** Its LoRA adapters (`--lora-adapters`, `--max-lora`, `--lora-load-ms`). */
  readonly lora: SimLora;
  private readonly server: Server;
  private readonly random: () => number;
  private readonly logError: (message: string) => void;
  private readonly inference: InferenceContext;
  private readonly modelLoad: ModelLoad;
  private baseFault: Fault = {};
  private failureRate: number;
  private failureStatus: number;
  private unhealthy = false;
  private dialect: SimEngineKind;
  private name: string;
  private address = '';
  /** Publishes the prefix cache's KV events (`--kv-events-port`); tests reach it to stop it or lose a batch. */
  kvEvents: KvEventsPublisher | undefined;

  constructor(
    private readonly options: SimOptions,
    deps: SimServerDeps = {},
  ) {
    checkSimOptions(options);
    this.random = deps.random ?? Math.random;
    this.logError = deps.logError ?? ((m) => process.stderr.write(m + '\n'));
    const log = deps.log ?? ((m) => process.stdout.write(m + '\n'));
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
    this.modelLoad = new ModelLoad(this.engine.deps, (ms) => log(`sim: model loaded after ${Math.round(ms)} ms; ${this.address} is ready`));
    this.baseFault = parseFault(options.fault);
    this.failureRate = options.failureRate;
    this.failureStatus = options.failureStatus;
    this.dialect = options.engine;
    this.name = options.name;
    const clock = deps.clock ?? systemClock;
    this.lora = new SimLora(options.model, loraAdapterNames(options.loraAdapters), options.maxLora, options.loraLoadMs, { clock, sleep: deps.sleep ?? systemSleep });
    // requests may name a base model or a registered adapter: the handlers read the live list
    const served = { ...options, model: this.lora.servedNames };
    this.inference = { options: served, engine: this.engine, random: this.random, responses: new ResponseStore(STORED_RESPONSES), faultFor: (req) => this.faultFor(req), lora: this.lora };
    this.server = http.createServer({ noDelay: true, keepAlive: true }, (req, res) => {
      this.route(req, res).catch((err: unknown) => this.internalError(res, err));
    });
  }

  /** Base URL, e.g. `http://127.0.0.1:8000`, once listening. */
  get url(): string {
    return this.address;
  }

  /** True while the model loads (from listening until `--load-time-ms` has passed, or after a reload). */
  get loading(): boolean {
    return this.modelLoad.loading;
  }

  /**
   * Resolves when the model load under way ends, at once when there is none. The load of
   * `--load-time-ms` starts when {@link listen} resolves. Rejects with `SimClosedError` if the
   * server closes first.
   */
  get loaded(): Promise<void> {
    return this.modelLoad.loaded;
  }

  async listen(): Promise<string> {
    await this.loadChatModel();
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, this.options.host, () => {
        this.server.off('error', reject);
        const { port } = this.server.address() as AddressInfo;
        const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
        this.address = `http://${host}:${port}`;
        if (this.name === '') this.name = `${host}:${port}`;
        this.modelLoad.start(this.options.loadTimeMs);
        this.startKvEvents().then(() => resolve(this.address), reject);
      });
    });
  }

  /** `--tokenizer-dir`: the Hugging Face libraries are loaded only then. */
  private async loadChatModel(): Promise<void> {
    if (this.options.tokenizerDir === '' || this.inference.chatModel) return;
    const { SimChatModel } = await import('./hf-template.js');
    this.inference.chatModel = await SimChatModel.load(this.options.tokenizerDir);
  }

  /** zeromq is loaded only when KV events are asked for. */
  private async startKvEvents(): Promise<void> {
    const { kvEventsPort, kvEventsReplayPort, kvEventsTopic, host, blockSize } = this.options;
    if (kvEventsPort === 0 || this.kvEvents) return;
    const { KvEventsPublisher } = await import('./kv-events.js');
    const tokenize = this.inference.chatModel?.encode;
    this.kvEvents = await KvEventsPublisher.start(
      { host, port: kvEventsPort, replayPort: kvEventsReplayPort, topic: kvEventsTopic, blockSize, ...(tokenize ? { tokenize } : {}) },
      this.engine.prefixCache,
    );
  }

  /** Stops listening and cuts every open connection (in-flight generations are aborted). */
  close(): Promise<void> {
    this.modelLoad.stop();
    this.kvEvents?.close();
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
    if (patch.loadTimeMs !== undefined) this.modelLoad.start(patch.loadTimeMs);
  }

  private runtimeConfig(): object {
    return {
      fault: this.baseFault,
      failureRate: this.failureRate,
      failureStatus: this.failureStatus,
      unhealthy: this.unhealthy,
      latency: this.engine.latency,
      engine: this.dialect,
      loadRemainingMs: this.modelLoad.remainingMs(),
    };
  }

  private async route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.setHeader('x-sim-replica', this.name);
    const path = (req.url ?? '/').split('?', 1)[0] ?? '/';
    const allow = (method: string): boolean => {
      if (req.method === method) return true;
      sendError(res, vllmError(405, 'Method Not Allowed', 'Method Not Allowed'));
      return false;
    };
    try {
      const inference = inferenceRoute(path);
      if (inference) {
        if (allow(inference.method) && this.ready(res, inference.errors)) await inference.handle(this.inference, req, res);
        return;
      }
      switch (path) {
        case '/v1/models':
          if (allow('GET') && this.ready(res)) sendJson(res, 200, modelsBody(this.options.model, this.options.maxModelLen, this.lora.stats().registered));
          return;
        case '/v1/load_lora_adapter':
        case '/v1/unload_lora_adapter':
          if (allow('POST') && this.ready(res)) await this.adapterRoute(path, req, res);
          return;
        case '/sim/lora':
          if (allow('GET')) sendJson(res, 200, JSON.stringify(this.lora.stats()));
          return;
        case '/health':
          if (!allow('GET')) return;
          if (this.modelLoad.loading) res.writeHead(503, { 'content-length': 0, 'retry-after': this.retryAfter() });
          else res.writeHead(this.unhealthy ? 503 : 200, { 'content-length': 0 });
          res.end();
          return;
        case '/metrics':
          if (!allow('GET')) return;
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' });
          res.end(renderMetrics(this.engine, this.options.model[0] ?? '', this.dialect, this.lora.enabled ? this.lora : undefined));
          return;
        case '/reset_prefix_cache':
          // vLLM's: empties the prefix cache (an AllBlocksCleared event)
          if (!allow('POST')) return;
          this.engine.prefixCache.clear();
          res.writeHead(200, { 'content-length': 0 });
          res.end();
          return;
        case '/sim/config':
          if (req.method === 'POST') this.configure(parseRuntimeConfig(await readJsonBody(req, this.options.maxBodyBytes), this.engine.latency));
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

  /** `POST /v1/load_lora_adapter` and `/v1/unload_lora_adapter`: vLLM's plain-text success line, or its error. */
  private async adapterRoute(path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJsonBody(req, this.options.maxBodyBytes);
    try {
      const text = path === '/v1/load_lora_adapter' ? await this.lora.load(body) : this.lora.unload(body);
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    } catch (err) {
      if (!(err instanceof LoraAdapterError)) throw err;
      sendError(res, vllmError(err.status, err.type, err.message));
    }
  }

  /** True once the model is loaded; until then answers 503 with `Retry-After` in the route's dialect. */
  private ready(res: ServerResponse, errors: ErrorDialect = VLLM_ERRORS): boolean {
    if (!this.modelLoad.loading) return true;
    const retryAfter = this.retryAfter();
    const err: VllmError = { ...vllmError(503, typeForStatus(503), `The model is still loading (ready in about ${retryAfter} s). Retry later.`), headers: { 'retry-after': retryAfter } };
    errors.send(res, err);
    return false;
  }

  /** Whole seconds until the load ends, at least 1 (the `Retry-After` value). */
  private retryAfter(): string {
    return String(Math.max(1, Math.ceil(this.modelLoad.remainingMs() / 1000)));
  }

  private internalError(res: ServerResponse, err: unknown): void {
    this.logError(`sim: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    const failure = vllmError(500, 'InternalServerError', 'Internal server error');
    if (!res.headersSent) sendError(res, failure);
    else if (!res.writableEnded && !res.destroyed) res.end(streamErrorEvent(failure));
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
}

/** Starts a simulator and resolves once it listens. */
export async function startSim(options: SimOptions, deps?: SimServerDeps): Promise<SimServer> {
  const sim = new SimServer(options, deps);
  await sim.listen();
  return sim;
}
