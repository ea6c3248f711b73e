/**
 * The Anthropic Messages API as vLLM serves it (`vllm/entrypoints/anthropic`): the request turned
 * into a chat request (system first, `max_tokens` required, `stop_sequences` as stop strings), the
 * answer as a message (`exclude_none`, so no `stop_sequence` key) or as the events vLLM derives from
 * its chat stream: message_start, content_block_start, one content_block_delta per token,
 * content_block_stop, message_delta, message_stop. Every error uses Anthropic's envelope, with
 * vLLM's error type inside as vLLM's router does.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type GenerationParams } from './chat-generation.js';
import { fitContext, GENERATION_PROMPT, parseStop, renderTurn } from './chat-request.js';
import { choicesFor, decode } from './decode-loop.js';
import { newId, readJsonBody, sendJson, type ErrorDialect } from './http-io.js';
import { asObject, fail, optionalBool, RequestError, servedModel, type Body } from './request-checks.js';
import { inSlot, type InferenceContext, type SlotRun } from './slots.js';
import { countTokens } from './text.js';

interface MessagesJob extends GenerationParams {
  model: string;
  promptText: string;
  promptTokens: number;
  stream: boolean;
}

const event = (type: string, data: object): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

export const ANTHROPIC_ERRORS: ErrorDialect = {
  send: (res, err) => sendJson(res, err.status, JSON.stringify({ type: 'error', error: { type: err.type, message: err.message } }), err.headers),
  streamEnd: (err) => event('error', { error: { type: 'internal_error', message: err.message } }),
};

/** A message's text: text blocks as they are, other blocks (images, tool use…) as a placeholder. */
function blocksText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return fail(`${param} must be a string or a list of content blocks.`, param);
  return content
    .map((raw: unknown) => {
      const block = (typeof raw === 'object' && raw !== null ? raw : {}) as Body;
      return block.type === 'text' && typeof block.text === 'string' ? block.text : `<${String(block.type)}>`;
    })
    .join('\n');
}

function parseMessagesRequest(raw: unknown, limits: { models: readonly string[]; maxModelLen: number }): MessagesJob {
  const body = asObject(raw);
  if (typeof body.model !== 'string' || body.model === '') fail('model: Field required', 'model');
  const model = servedModel(body, limits.models);
  if (!Array.isArray(body.messages) || body.messages.length === 0) fail('messages must be a non-empty list.', 'messages');
  const maxTokens = body.max_tokens;
  if (maxTokens === undefined || maxTokens === null) fail('max_tokens: Field required', 'max_tokens');
  if (!Number.isInteger(maxTokens) || (maxTokens as number) <= 0) fail('max_tokens must be positive', 'max_tokens');
  // vLLM gathers the top-level system and any system messages into one system turn, first.
  const system: string[] = body.system === undefined || body.system === null ? [] : [blocksText(body.system, 'system')];
  let turns = '';
  body.messages.forEach((rawMessage: unknown, i) => {
    const message = (typeof rawMessage === 'object' && rawMessage !== null ? rawMessage : {}) as Body;
    const role = message.role === 'ctx' || message.role === 'msg' ? 'user' : message.role;
    if (role !== 'user' && role !== 'assistant' && role !== 'system') fail(`messages[${i}].role must be user, assistant or system.`, `messages[${i}].role`);
    const text = blocksText(message.content, `messages[${i}].content`);
    if (role === 'system') system.push(text);
    else turns += renderTurn(role, text);
  });
  const promptText = (system.length > 0 ? renderTurn('system', system.join('')) : '') + turns + GENERATION_PROMPT;
  const promptTokens = countTokens(promptText);
  return {
    model,
    promptText,
    promptTokens,
    stream: optionalBool(body, 'stream') ?? false,
    maxTokens: fitContext(promptTokens, maxTokens as number, limits.maxModelLen),
    minTokens: 0,
    ignoreEos: false,
    stop: parseStop(body, 'stop_sequences'),
    logprobs: false,
    topLogprobs: 0,
  };
}

export async function handleMessages(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  try {
    const job = parseMessagesRequest(await readJsonBody(req, ctx.options.maxBodyBytes), { models: ctx.options.model, maxModelLen: ctx.options.maxModelLen });
    await inSlot(ctx, req, res, { stream: job.stream, errors: ANTHROPIC_ERRORS, model: job.model }, (run) => generate(run, job));
  } catch (err) {
    if (!(err instanceof RequestError)) throw err;
    ANTHROPIC_ERRORS.send(res, err.error);
  }
}

async function generate(run: SlotRun, job: MessagesJob): Promise<void> {
  const { res } = run;
  const [choice] = choicesFor(run.ctx, () => job, 1, undefined);
  if (!choice) return;
  // vLLM answers with the id of the chat completion it ran.
  const id = `chatcmpl-${newId()}`;
  let blockOpen = false;
  const cached = await decode(run, { text: job.promptText, tokens: job.promptTokens }, [choice], {
    prefilled: () => {
      if (!job.stream) return;
      const usage = { input_tokens: job.promptTokens, output_tokens: 0 };
      res.write(event('message_start', { message: { id, content: [], model: job.model, stop_reason: null, stop_sequence: null, usage } }));
    },
    step: (_choice, step) => {
      if (!job.stream || step.delta === '') return;
      if (!blockOpen) res.write(event('content_block_start', { content_block: { type: 'text', text: '' }, index: 0 }));
      blockOpen = true;
      res.write(event('content_block_delta', { delta: { type: 'text_delta', text: step.delta }, index: 0 }));
    },
  });
  if (cached === undefined) return;
  const stopReason = choice.finishReason === 'length' ? 'max_tokens' : 'end_turn';
  const usage = { input_tokens: job.promptTokens, output_tokens: choice.tokens };
  if (!job.stream) {
    const content = choice.text === '' ? [] : [{ type: 'text', text: choice.text }];
    sendJson(res, 200, JSON.stringify({ id, type: 'message', role: 'assistant', content, model: job.model, stop_reason: stopReason, usage }));
    return;
  }
  const close = blockOpen ? event('content_block_stop', { index: 0 }) : '';
  res.end(close + event('message_delta', { delta: { stop_reason: stopReason }, usage }) + event('message_stop', {}));
}
