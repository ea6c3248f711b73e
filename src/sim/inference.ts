/**
 * The simulator's chat completions and embeddings routes: check the body like vLLM, then run it in
 * an engine slot (see `slots.ts`) and answer in JSON or SSE.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type TokenLogprob } from './chat-generation.js';
import { parseChatRequest, type ChatJob } from './chat-request.js';
import { ChunkWriter, completionBody, DONE_EVENT, usageOf } from './chat-response.js';
import { choicesFor, decode } from './decode-loop.js';
import { embeddingBody, parseEmbeddingRequest } from './embeddings.js';
import { newId, readJsonBody, sendJson, unixNow } from './http-io.js';
import { inSlot, poolingPass, type InferenceContext, type SlotRun } from './slots.js';

export async function handleChat(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const job = parseChatRequest(await readJsonBody(req, ctx.options.maxBodyBytes), {
    models: ctx.options.model,
    maxModelLen: ctx.options.maxModelLen,
    outputTokens: { min: ctx.options.outputMin, max: ctx.options.outputMax },
    ...(ctx.chatModel ? { template: ctx.chatModel } : {}),
  });
  await inSlot(ctx, req, res, { stream: job.stream, model: job.model }, (run) => generate(run, job));
}

async function generate(run: SlotRun, job: ChatJob): Promise<void> {
  const { res } = run;
  const choices = choicesFor(run.ctx, () => job, job.n, job.seed);
  const id = `chatcmpl-${newId()}`;
  const writer = new ChunkWriter(id, unixNow(), job.model);
  // Streamed: log-probs of tokens whose text is held back ride on the next chunk. Not streamed: all of them.
  const logprobs: TokenLogprob[][] = choices.map(() => []);

  const cached = await decode(run, { text: job.promptText, tokens: job.promptTokens, ...(job.cacheSalt !== undefined ? { salt: job.cacheSalt } : {}) }, choices, {
    prefilled: () => {
      if (job.stream) for (const c of choices) res.write(writer.role(c.index));
    },
    step: (choice, step) => {
      const pending = logprobs[choice.index] ?? [];
      pending.push(...step.logprobs);
      if (job.stream && (step.delta !== '' || step.finishReason)) {
        res.write(writer.step(choice.index, step, pending));
        logprobs[choice.index] = [];
      }
    },
  });
  if (cached === undefined) return;
  const usage = usageOf(job, choices, cached);
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
  await inSlot(ctx, req, res, { stream: false }, async (run) => {
    if (await poolingPass(run, job.promptTokens)) sendJson(res, 200, embeddingBody(`embd-${newId()}`, unixNow(), job, ctx.options.embeddingDim));
  });
}
