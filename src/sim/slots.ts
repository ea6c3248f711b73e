/**
 * How every engine-bound route of the simulator runs a request: apply its fault, take an engine slot
 * (429 when the waiting queue is full), send the SSE headers of a stream as soon as the engine
 * accepts it (as vLLM does), and free the slot however the request ends.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isAbortError } from '../core/clock.js';
import { QueueFullError, type SimEngine } from './engine.js';
import { vllmError } from './errors.js';
import { earlyFault, midFault } from './fault-injection.js';
import { type Fault } from './faults.js';
import { LoraAdapterError, type SimLora } from './lora.js';
import { abortOnClose, SSE_HEADERS, VLLM_ERRORS, type ErrorDialect } from './http-io.js';
import { type SimOptions } from './options.js';
import { type ResponseStore } from './responses-store.js';
import type { SimChatModel } from './hf-template.js';
import { type Sequence } from './sequence.js';

/** What the handlers use of the server they run in. */
export interface InferenceContext {
  readonly options: SimOptions;
  readonly engine: SimEngine;
  readonly random: () => number;
  /** The Responses API objects this replica produced (for `previous_response_id` and GET). */
  readonly responses: ResponseStore;
  /** The fault for this request: the configured one, the header's on top, then the random failure. */
  faultFor(req: IncomingMessage): Fault;
  /** The replica's LoRA adapters (lora.ts). */
  readonly lora?: SimLora;
  /** `--tokenizer-dir`: the model's chat template (set before the server listens). */
  chatModel?: SimChatModel;
}

/** One admitted request: its slot, fault and client, and how its route writes errors. */
export interface SlotRun {
  readonly ctx: InferenceContext;
  readonly res: ServerResponse;
  readonly seq: Sequence;
  readonly fault: Fault;
  readonly signal: AbortSignal;
  readonly stream: boolean;
  readonly errors: ErrorDialect;
}

/** Takes a slot, or answers 429 when the waiting queue is full (returns undefined). */
function admit(engine: SimEngine, res: ServerResponse, signal: AbortSignal, errors: ErrorDialect): Promise<Sequence> | undefined {
  try {
    return engine.acquire(signal);
  } catch (err) {
    if (!(err instanceof QueueFullError)) throw err;
    errors.send(res, vllmError(429, 'RateLimitError', err.message));
    return undefined;
  }
}

/** Runs `work` on an admitted sequence; an abort (client gone) or error always frees the slot. */
async function withSequence(pending: Promise<Sequence>, work: (seq: Sequence) => Promise<void>): Promise<void> {
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

export interface SlotOptions {
  stream: boolean;
  /** How the route writes errors (default vLLM's). */
  errors?: ErrorDialect;
  /** Events a stream starts with as soon as the engine accepts the request (the Responses API's). */
  streamHead?: string;
  /** The served model the request named: a LoRA adapter's request first waits for its adapter (lora.ts). */
  model?: string;
}

/** Applies the request's fault, takes a slot and runs `work` in it (see the file comment). */
export async function inSlot(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse, options: SlotOptions, work: (run: SlotRun) => Promise<void>): Promise<void> {
  const { stream, errors = VLLM_ERRORS } = options;
  const fault = ctx.faultFor(req);
  if (await earlyFault(fault, res, errors)) return;
  const signal = abortOnClose(res);
  const adapter = options.model !== undefined && ctx.lora?.isAdapter(options.model) ? options.model : undefined;
  if (adapter !== undefined && !(await adapterReady(ctx, adapter, res, signal, errors))) return;
  const release = (): void => {
    if (adapter !== undefined) ctx.lora?.release(adapter);
  };
  const pending = admit(ctx.engine, res, signal, errors);
  if (!pending) return release();
  // Like vLLM, a streamed request gets its 200 and headers as soon as the engine accepts it;
  // the first data event comes after the prefill.
  if (stream) {
    res.writeHead(200, SSE_HEADERS);
    if (options.streamHead) res.write(options.streamHead);
    res.flushHeaders();
  }
  try {
    await withSequence(pending, (seq) => work({ ctx, res, seq, fault, signal, stream, errors }));
  } finally {
    release();
  }
}

/**
 * Waits for the request's LoRA adapter to be resident (lora.ts); false when the request ended instead:
 * the queue full (429), the adapter unloaded meanwhile (404), or the client gone.
 */
async function adapterReady(ctx: InferenceContext, adapter: string, res: ServerResponse, signal: AbortSignal, errors: ErrorDialect): Promise<boolean> {
  const lora = ctx.lora as SimLora;
  const waiting = ctx.engine.numWaiting + lora.numWaiting;
  if (waiting >= ctx.options.maxWaiting) {
    errors.send(res, vllmError(429, 'RateLimitError', new QueueFullError(ctx.options.maxWaiting).message));
    return false;
  }
  try {
    await lora.acquire(adapter, signal);
    return true;
  } catch (err) {
    if (err instanceof LoraAdapterError) errors.send(res, vllmError(err.status, err.type, err.message, 'model'));
    else if (!isAbortError(err)) throw err;
    return false;
  }
}

/**
 * The whole engine work of a pooling request (embeddings, rerank, score): one prefill of
 * `promptTokens`, then the faults due at token 0. False when a fault ended the request.
 */
export async function poolingPass(run: SlotRun, promptTokens: number): Promise<boolean> {
  await run.seq.prefill(promptTokens, [], run.fault.slowStartMs ?? 0, run.signal);
  if (await midFault(run.fault, 0, run.res, run.seq, run.signal, false, run.errors)) return false;
  run.seq.finish('stop');
  return true;
}
