/**
 * The most completion (output) tokens an honest answer to a request can report, read from its body as
 * the engine reads it (`extra_body` already in place): what the router charges a key and counts at
 * most, whatever the engine's usage says ({@link ApiRoute.completionLimit}). Undefined where the request
 * sets no limit, or where an honest answer may go past the one it sets; generous where engines differ
 * (several choices' tokens, `best_of`'s discarded ones, all count), since a limit that cuts an honest
 * answer short would undercharge it, and the point is only to stop a lying or buggy replica charging a
 * key up to 2^26 tokens for one request. No allocation: a few members read.
 */
import { choicesOf, type ValidRequest } from './valid-request.js';

/** A whole number of tokens a member sets; undefined for none (absent, `null`). */
function tokens(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

/** `best_of` generates that many sequences per prompt, of which `n` are returned; OpenAI bills them all. */
function bestOf(body: ValidRequest): number {
  return typeof body.best_of === 'number' && body.best_of > 1 ? body.best_of : 1;
}

/**
 * Chat: `max_completion_tokens` or `max_tokens` (the larger when both are set: engines differ on which
 * wins), for each of `n` choices. Reasoning tokens are within it (vLLM, OpenAI).
 */
export function chatCompletionLimit(body: ValidRequest): number | undefined {
  const a = tokens(body.max_completion_tokens);
  const b = tokens(body.max_tokens);
  const limit = a === undefined ? b : b === undefined || a >= b ? a : b;
  return limit === undefined ? undefined : limit * choicesOf('chat', body) * bestOf(body);
}

/**
 * Completions: `max_tokens` for each choice of each prompt. None without it (engines' defaults differ:
 * vLLM's 16, llama.cpp's none), with `null` (up to the context) or with `echo` (an engine may count the
 * echoed prompt as completion).
 */
export function completionsCompletionLimit(body: ValidRequest): number | undefined {
  const limit = tokens(body.max_tokens);
  if (limit === undefined || (body.echo !== undefined && body.echo !== null && body.echo !== false)) return undefined;
  return limit * choicesOf('completions', body) * bestOf(body);
}

/**
 * Responses: `max_output_tokens`, reasoning included — unless the request offers a tool other than a
 * function (a built-in one: web search, code interpreter, MCP), which the engine may run itself,
 * generating once per turn, each turn bounded on its own.
 */
export function responsesCompletionLimit(body: ValidRequest): number | undefined {
  const limit = tokens(body.max_output_tokens);
  if (limit === undefined) return undefined;
  if (Array.isArray(body.tools)) {
    for (const tool of body.tools as unknown[]) if (typeof tool !== 'object' || tool === null || (tool as { type?: unknown }).type !== 'function') return undefined;
  }
  return limit;
}

/** Messages: `max_tokens` (required), extended thinking's budget within it. */
export function messagesCompletionLimit(body: ValidRequest): number | undefined {
  return tokens(body.max_tokens);
}
