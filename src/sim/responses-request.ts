/**
 * Responses API requests (`POST /v1/responses`) checked as vLLM checks them. The input (a string or
 * a list of items) is rendered with the chat template after the `instructions` and after the stored
 * conversation of `previous_response_id`, which must be one this replica produced (vLLM's 404).
 */
import { type GenerationParams } from './chat-generation.js';
import { GENERATION_PROMPT, MAX_LOGPROBS, parseStop, renderTurn } from './chat-request.js';
import { vllmError } from './errors.js';
import { newId } from './http-io.js';
import { asObject, cacheSaltOf, fail, optionalBool, optionalInt, optionalString, RequestError, servedModel, type Body } from './request-checks.js';
import { type StoredResponse } from './responses-store.js';
import { countTokens } from './text.js';

export interface ResponsesJob extends GenerationParams {
  id: string;
  model: string;
  /** The conversation before this answer (stored with the answer for a follow-up). */
  conversation: string;
  promptTokens: number;
  stream: boolean;
  store: boolean;
  seed: number | undefined;
  /** vLLM's `cache_salt` (prefix caching per salt). */
  cacheSalt?: string;
  /** Request fields the response object repeats (vLLM's `ResponsesResponse.from_request`). */
  echo: {
    instructions: string | null;
    metadata: unknown;
    parallel_tool_calls: unknown;
    temperature: number;
    tool_choice: unknown;
    tools: unknown;
    top_p: number;
    max_tool_calls: unknown;
    previous_response_id: string | null;
    reasoning: unknown;
    service_tier: unknown;
    text: unknown;
    top_logprobs: number | null;
    truncation: unknown;
    user: unknown;
  };
}

const INPUT_ROLES = new Set(['user', 'assistant', 'system', 'developer']);
const TEXT_PARTS = new Set(['input_text', 'output_text', 'text']);

export const responseNotFound = (id: string): RequestError => new RequestError(vllmError(404, 'invalid_request_error', `Response with id '${id}' not found.`, 'response_id'));

function renderItem(raw: unknown, i: number): string {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return fail(`input[${i}] must be an object.`, `input[${i}]`);
  const item = raw as Body;
  if (item.role === undefined) return renderTurn('tool', `<${String(item.type)}>`); // function calls and their outputs, reasoning…
  if (typeof item.role !== 'string' || !INPUT_ROLES.has(item.role)) return fail(`input[${i}].role must be one of ${[...INPUT_ROLES].join(', ')}.`, `input[${i}].role`);
  if (typeof item.content === 'string') return renderTurn(item.role, item.content);
  if (!Array.isArray(item.content)) return fail(`input[${i}].content must be a string or a list of content parts.`, `input[${i}].content`);
  const parts = item.content.map((part: unknown) => {
    const p = (typeof part === 'object' && part !== null ? part : {}) as Body;
    return TEXT_PARTS.has(String(p.type)) && typeof p.text === 'string' ? p.text : `<${String(p.type)}>`;
  });
  return renderTurn(item.role, parts.join('\n'));
}

function renderInput(input: unknown): string {
  if (typeof input === 'string') return renderTurn('user', input);
  if (!Array.isArray(input)) return fail('input must be a string or a list of input items.', 'input');
  return input.map(renderItem).join('');
}

function optionalNumber(body: Body, field: string, fallback: number): number {
  const value = body[field] ?? fallback;
  if (typeof value !== 'number') fail(`${field} must be a number.`, field);
  return value;
}

/** Validates a Responses request; `lookup` finds a stored previous response. Throws `RequestError`. */
export function parseResponsesRequest(raw: unknown, limits: { models: readonly string[]; maxModelLen: number }, lookup: (id: string) => StoredResponse | undefined): ResponsesJob {
  const body = asObject(raw);
  const model = servedModel(body, limits.models);
  if (optionalBool(body, 'background')) fail('background mode is not supported by this server.', 'background');
  const include = body.include ?? [];
  if (!Array.isArray(include)) fail('include must be a list.', 'include');
  const logprobs = include.includes('message.output_text.logprobs');
  const instructions = optionalString(body, 'instructions') ?? null;
  const previousId = optionalString(body, 'previous_response_id') ?? null;
  const previous = previousId === null ? undefined : lookup(previousId);
  if (previousId !== null && !previous) throw responseNotFound(previousId);

  const conversation = (instructions === null ? '' : renderTurn('system', instructions)) + (previous?.conversation ?? '') + renderInput(body.input);
  const promptTokens = countTokens(conversation + GENERATION_PROMPT);
  if (promptTokens >= limits.maxModelLen) {
    throw new RequestError(vllmError(400, 'invalid_request_error', `The engine prompt length ${promptTokens} exceeds the max_model_len ${limits.maxModelLen}. Please reduce prompt.`, 'input'));
  }
  const topLogprobs = optionalInt(body, 'top_logprobs', 0, MAX_LOGPROBS) ?? 0;
  return {
    id: `resp_${newId()}`,
    model,
    conversation,
    promptTokens,
    stream: optionalBool(body, 'stream') ?? false,
    store: optionalBool(body, 'store') ?? true,
    seed: optionalInt(body, 'seed', Number.MIN_SAFE_INTEGER),
    ...cacheSaltOf(body),
    maxTokens: Math.min(optionalInt(body, 'max_output_tokens', 1) ?? Infinity, limits.maxModelLen - promptTokens),
    minTokens: 0,
    ignoreEos: optionalBool(body, 'ignore_eos') ?? false,
    stop: parseStop(body),
    logprobs,
    topLogprobs,
    echo: {
      instructions,
      metadata: body.metadata ?? null,
      parallel_tool_calls: body.parallel_tool_calls ?? true,
      temperature: optionalNumber(body, 'temperature', 1),
      tool_choice: body.tool_choice ?? 'auto',
      tools: body.tools ?? [],
      top_p: optionalNumber(body, 'top_p', 1),
      max_tool_calls: body.max_tool_calls ?? null,
      previous_response_id: previousId,
      reasoning: body.reasoning ?? null,
      service_tier: body.service_tier ?? 'auto',
      text: body.text ?? null,
      top_logprobs: logprobs ? topLogprobs : null,
      truncation: body.truncation ?? 'disabled',
      user: body.user ?? null,
    },
  };
}
