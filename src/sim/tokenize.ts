/**
 * vLLM's `POST /tokenize` (a prompt, or chat messages rendered with the chat template) and
 * `POST /detokenize`, with the simulator's reversible tokenizer. They need no engine slot: like
 * vLLM's, they answer at once (after the request's fault, if any).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { renderPrompt } from './chat-request.js';
import { earlyFault } from './fault-injection.js';
import { readJsonBody, sendJson } from './http-io.js';
import { asObject, fail, optionalBool, servedModel, type Body } from './request-checks.js';
import { type InferenceContext } from './slots.js';
import { checkTokenIds, detokenize, tokenize, tokenPieces } from './tokenizer.js';

async function readRequest(ctx: InferenceContext, req: IncomingMessage): Promise<Body> {
  const body = asObject(await readJsonBody(req, ctx.options.maxBodyBytes));
  servedModel(body, ctx.options.model);
  return body;
}

/** The text `/tokenize` tokenizes: the prompt, or the messages as the chat template renders them. */
function tokenizeText(body: Body): string {
  if (body.messages !== undefined) {
    if (!Array.isArray(body.messages)) fail('messages must be a list.', 'messages');
    return renderPrompt(body.messages, optionalBool(body, 'add_generation_prompt') ?? true);
  }
  if (typeof body.prompt !== 'string') fail('prompt must be a string (or send messages).', 'prompt');
  // Accepted as vLLM accepts it, but the simulator's tokenizer has no special tokens to add.
  optionalBool(body, 'add_special_tokens');
  return body.prompt;
}

export async function handleTokenize(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readRequest(ctx, req);
  const text = tokenizeText(body);
  if (await earlyFault(ctx.faultFor(req), res)) return;
  const tokens = tokenize(text);
  const tokenStrs = optionalBool(body, 'return_token_strs') ? tokenPieces(text) : null;
  sendJson(res, 200, JSON.stringify({ count: tokens.length, max_model_len: ctx.options.maxModelLen, tokens, token_strs: tokenStrs }));
}

export async function handleDetokenize(ctx: InferenceContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readRequest(ctx, req);
  if (!Array.isArray(body.tokens)) return fail('tokens must be a list of token ids.', 'tokens');
  const tokens = checkTokenIds(body.tokens, 'tokens');
  if (await earlyFault(ctx.faultFor(req), res)) return;
  sendJson(res, 200, JSON.stringify({ prompt: detokenize(tokens) }));
}
