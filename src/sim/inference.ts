/**
 * The simulator's inference routes, chat completions and embeddings: check the body like vLLM,
 * apply the request's fault, take an engine slot (429 when the waiting queue is full), prefill and
 * decode, and answer in JSON or SSE. The slot is freed however the request ends.
 */
import { type IncomingMessage, type ServerResponse } from 'node:http';
import { isAbortError } from '../core/clock.js';
import { ChoiceGenerator, type TokenLogprob } from './chat-generation.js';
import { parseChatRequest, type ChatJob } from './chat-request.js';
import { ChunkWriter, completionBody, DONE_EVENT, usageOf } from './chat-response.js';
import { embeddingBody, parseEmbeddingRequest } from './embeddings.js';
import { QueueFullError, type SimEngine } from './engine.js';
import { vllmError } from './errors.js';
import { earlyFault, midFault } from './fault-injection.js';
import { type Fault } from './faults.js';
import { abortOnClose, drained, newId, readJsonBody, sendError, sendJson, SSE_HEADERS, unixNow } from './http-io.js';
import { type SimOptions } from './options.js';
import { promptBlockHashes } from './prefix-cache.js';
import { type Sequence } from './sequence.js';

/** What the handlers use of the server they run in. */
export interface InferenceContext {
  readonly options: SimOptions;
  readonly engine: SimEngine;
  readonly random: () => number;
  /** The fault for this request: the configured one, the header's on top, then the random failure. */
  faultFor(req: IncomingMessage): Fault;
}

/** Takes a slot, or answers 429 when the waiting queue is full (returns undefined). */
function admit(engine: SimEngine, res: ServerResponse, signal: AbortSignal): Promise<Sequence> | undefined {
  try {
    return engine.acquire(signal);
  } catch (err) {
    if (!(err instanceof QueueFullError)) throw err;
    sendError(res, vllmError(429, 'RateLimitError', err.message));
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

export async function handleChat(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const job = parseChatRequest(await readJsonBody(req, ctx.options.maxBodyBytes), {
    models: ctx.options.model,
    maxModelLen: ctx.options.maxModelLen,
    outputTokens: { min: ctx.options.outputMin, max: ctx.options.outputMax },
  });
  const fault = ctx.faultFor(req);
  if (await earlyFault(fault, res)) return;
  const signal = abortOnClose(res);
  const pending = admit(ctx.engine, res, signal);
  if (!pending) return;
  // Like vLLM, a streamed request gets its 200 and headers as soon as the engine accepts it;
  // the first data event comes after the prefill.
  if (job.stream) {
    res.writeHead(200, SSE_HEADERS);
    res.flushHeaders();
  }
  await withSequence(pending, (seq) => generate(ctx, job, seq, fault, res, signal));
}

async function generate(ctx: InferenceContext, job: ChatJob, seq: Sequence, fault: Fault, res: ServerResponse, signal: AbortSignal): Promise<void> {
  const seed = job.seed ?? Math.floor(ctx.random() * 2 ** 31);
  const outputTokens = { min: ctx.options.outputMin, max: ctx.options.outputMax };
  const choices = Array.from({ length: job.n }, (_, i) => new ChoiceGenerator(job, i, seed, outputTokens));
  const id = `chatcmpl-${newId()}`;
  const writer = new ChunkWriter(id, unixNow(), job.model);
  // Streamed: log-probs of tokens whose text is held back ride on the next chunk. Not streamed: all of them.
  const logprobs: TokenLogprob[][] = choices.map(() => []);

  const cached = await seq.prefill(job.promptTokens, promptBlockHashes(job.promptText, ctx.engine.blockSize), fault.slowStartMs ?? 0, signal);
  if (job.stream) for (const c of choices) res.write(writer.role(c.index));
  for (let tokens = 0; ; tokens++) {
    const active = choices.filter((c) => !c.finished);
    if (active.length === 0) break;
    if (tokens === 0) seq.accountGenerated(active.length);
    else await seq.decode(active.length, signal);
    if (await midFault(fault, tokens, res, seq, signal, job.stream)) return;
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

export async function handleEmbeddings(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const job = parseEmbeddingRequest(await readJsonBody(req, ctx.options.maxBodyBytes), {
    models: ctx.options.model,
    maxModelLen: ctx.options.maxModelLen,
    dimension: ctx.options.embeddingDim,
  });
  const fault = ctx.faultFor(req);
  if (await earlyFault(fault, res)) return;
  const signal = abortOnClose(res);
  const pending = admit(ctx.engine, res, signal);
  if (!pending) return;
  await withSequence(pending, async (seq) => {
    await seq.prefill(job.promptTokens, [], fault.slowStartMs ?? 0, signal);
    if (await midFault(fault, 0, res, seq, signal, false)) return;
    seq.finish('stop');
    sendJson(res, 200, embeddingBody(`embd-${newId()}`, unixNow(), job, ctx.options.embeddingDim));
  });
}
