/**
 * Rules across fields that the request schemas cannot state cleanly, one function per API that has
 * any, run after the schema check passed. Each is a rule the engine (vLLM) or the API's spec states;
 * each throws an INVALID_REQUEST RouterError naming the field to fix in `param`.
 */
import { RouterError } from '../core/errors.js';

type Body = Record<string, unknown>;

function invalid(message: string, param: string): RouterError {
  return new RouterError('INVALID_REQUEST', message, { param });
}

/** Chat: `top_logprobs` (other than 0) needs `logprobs: true` (OpenAI, vLLM). */
export function chatCrossField(body: Body): void {
  const topLogprobs = body.top_logprobs;
  if (topLogprobs !== undefined && topLogprobs !== null && topLogprobs !== 0 && body.logprobs !== true) {
    throw invalid('top_logprobs is only allowed when logprobs is true', 'top_logprobs');
  }
}

/** `stream_options` only with `stream: true` (OpenAI, vLLM; vLLM lets an empty object pass, as here). */
function streamOptionsNeedStream(body: Body): void {
  const options = body.stream_options;
  if (typeof options === 'object' && options !== null && Object.keys(options).length > 0 && body.stream !== true) {
    throw invalid('stream_options is only allowed when stream is true', 'stream_options');
  }
}

/**
 * Completions: `stream_options` only with a stream. (`best_of` ≥ `n` is OpenAI's rule, but current
 * vLLM ignores `best_of`, so the router does not reject on it.)
 */
export function completionsCrossField(body: Body): void {
  streamOptionsNeedStream(body);
}

/** Responses: a `background` response is stored to be fetched later, so it cannot have `store: false` (OpenAI, vLLM). */
export function responsesCrossField(body: Body): void {
  if (body.background === true && body.store === false) {
    throw invalid('background is only allowed when store is true', 'background');
  }
}

/**
 * Messages: `tool_choice: {type: "tool", name}` forces that tool, so `tools` must define it
 * (Anthropic; vLLM fails to find the tool's schema otherwise).
 */
export function messagesCrossField(body: Body): void {
  const choice = body.tool_choice as { type?: unknown; name?: unknown } | null | undefined;
  if (choice?.type !== 'tool' || typeof choice.name !== 'string') return;
  const tools = Array.isArray(body.tools) ? (body.tools as unknown[]) : [];
  if (!tools.some((tool) => typeof tool === 'object' && tool !== null && (tool as { name?: unknown }).name === choice.name)) {
    throw invalid(`tool_choice names the tool ${JSON.stringify(choice.name)}, which tools does not define`, 'tool_choice.name');
  }
}

/**
 * Tokenize: a chat's template either continues the last message or adds a generation prompt, not
 * both (vLLM). A body with both `prompt` and `messages` is left to the engine, which picks one form.
 */
export function tokenizeCrossField(body: Body): void {
  if (body.continue_final_message === true && body.add_generation_prompt === true) {
    throw invalid('continue_final_message and add_generation_prompt cannot both be true', 'continue_final_message');
  }
}
