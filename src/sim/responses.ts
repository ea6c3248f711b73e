/**
 * The OpenAI Responses API as vLLM serves it: `POST /v1/responses` answers one assistant message,
 * as a response object or as typed events (created, in_progress, the item and content-part events
 * around one `output_text.delta` per token, completed; no `[DONE]`), and keeps it in the replica's
 * store unless `store` is false; `GET /v1/responses/{id}` returns a stored one.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type TokenLogprob } from './chat-generation.js';
import { GENERATION_PROMPT, renderTurn } from './chat-request.js';
import { choicesFor, decode } from './decode-loop.js';
import { earlyFault } from './fault-injection.js';
import { newId, readJsonBody, sendError, sendJson, unixNow, type ErrorDialect } from './http-io.js';
import { outputMessage, outputText, ResponseEvents, responseObject, responseUsage } from './responses-body.js';
import { parseResponsesRequest, responseNotFound, type ResponsesJob } from './responses-request.js';
import { inSlot, type InferenceContext, type SlotRun } from './slots.js';

/** A token's log-prob as a delta event carries it (no bytes). */
const deltaLogprob = (t: TokenLogprob): object => ({ token: t.token, logprob: t.logprob, top_logprobs: t.top_logprobs.map((a) => ({ token: a.token, logprob: a.logprob })) });

export async function handleResponses(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const raw = await readJsonBody(req, ctx.options.maxBodyBytes);
  const job = parseResponsesRequest(raw, { models: ctx.options.model, maxModelLen: ctx.options.maxModelLen }, (id) => ctx.responses.get(id));
  const events = new ResponseEvents();
  const createdAt = unixNow();
  const errors: ErrorDialect = { send: sendError, streamEnd: (err) => events.event('error', { code: err.type, message: err.message, param: err.param }) };
  let streamHead: string | undefined;
  if (job.stream) {
    const initial = responseObject(job, createdAt, 'in_progress', [], null);
    streamHead = events.event('response.created', { response: initial }) + events.event('response.in_progress', { response: initial });
  }
  await inSlot(ctx, req, res, { stream: job.stream, errors, streamHead, model: job.model }, (run) => generate(run, job, events, createdAt));
}

async function generate(run: SlotRun, job: ResponsesJob, events: ResponseEvents, createdAt: number): Promise<void> {
  const { res } = run;
  const [choice] = choicesFor(run.ctx, () => job, 1, job.seed);
  if (!choice) return;
  const itemId = `msg_${newId()}`;
  const where = { content_index: 0, item_id: itemId, output_index: 0 };
  const logprobs: TokenLogprob[] = [];
  let unsent: TokenLogprob[] = [];
  let started = false;

  const cached = await decode(run, { text: job.conversation + GENERATION_PROMPT, tokens: job.promptTokens, ...(job.cacheSalt !== undefined ? { salt: job.cacheSalt } : {}) }, [choice], {
    step: (_choice, step) => {
      logprobs.push(...step.logprobs);
      unsent.push(...step.logprobs);
      if (!job.stream || step.delta === '') return;
      if (!started) {
        res.write(events.event('response.output_item.added', { item: outputMessage(itemId, [], 'in_progress'), output_index: 0 }));
        res.write(events.event('response.content_part.added', { ...where, part: outputText('', []) }));
        started = true;
      }
      res.write(events.event('response.output_text.delta', { ...where, delta: step.delta, logprobs: unsent.map(deltaLogprob) }));
      unsent = [];
    },
  });
  if (cached === undefined) return;
  const text = choice.text;
  const content = text === '' ? [] : [outputText(text, job.logprobs ? logprobs : null)];
  const status = choice.finishReason === 'length' ? 'incomplete' : 'completed';
  const response = responseObject(job, createdAt, status, [outputMessage(itemId, content, 'completed')], responseUsage(job.promptTokens, cached, choice.tokens));
  if (job.store) run.ctx.responses.set(job.id, { body: response, conversation: job.conversation + renderTurn('assistant', text) });
  if (!job.stream) return sendJson(res, 200, JSON.stringify(response));
  if (started) {
    res.write(events.event('response.output_text.done', { ...where, logprobs: [], text }));
    res.write(events.event('response.content_part.done', { ...where, part: outputText(text, null) }));
    res.write(events.event('response.output_item.done', { item: outputMessage(itemId, [outputText(text, null)], 'completed'), output_index: 0 }));
  }
  res.end(events.event('response.completed', { response }));
}

/** `GET /v1/responses/{id}`: a response this replica stored, else vLLM's 404. */
export async function retrieveResponse(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse, id: string): Promise<void> {
  if (await earlyFault(ctx.faultFor(req), res)) return;
  const stored = ctx.responses.get(id);
  if (!stored) throw responseNotFound(id);
  sendJson(res, 200, JSON.stringify(stored.body));
}
