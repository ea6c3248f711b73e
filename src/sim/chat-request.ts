/**
 * Chat completion requests for the simulator: checked as vLLM checks them (same messages, same
 * `param`), and the messages rendered the way a chat template would, so that prompt length and
 * prefix blocks are stable.
 */
import { resumedTokens, type ResumePoint } from './chat-generation.js';
import { asObject, cacheSaltOf, fail, optionalBool, optionalInt, servedModel, type Body } from './request-checks.js';
import { countTokens } from './text.js';

export interface ChatLimits {
  models: readonly string[];
  maxModelLen: number;
  /** Range of the "natural" answer length (tokens until the synthetic EOS). */
  outputTokens: { min: number; max: number };
  /** `--tokenizer-dir`: the model's chat template renders the prompt (a continued final message excepted). */
  template?: { render(messages: readonly unknown[], addGenerationPrompt: boolean, tools: unknown): string };
}

export interface ChatJob {
  model: string;
  promptText: string;
  promptTokens: number;
  maxTokens: number;
  minTokens: number;
  ignoreEos: boolean;
  n: number;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  topLogprobs: number;
  seed: number | undefined;
  /** `continue_final_message` with the final assistant message being where the seed's answer begins: the answer picks up after it. */
  resume?: ResumePoint;
  /** vLLM's `cache_salt` (prefix caching per salt). */
  cacheSalt?: string;
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
/** vLLM's default `--max-logprobs`. */
export const MAX_LOGPROBS = 20;

/** One turn of the chat template every route renders its conversation with. */
export const renderTurn = (role: string, text: string): string => `<|im_start|>${role}\n${text}<|im_end|>\n`;

/** What the template appends so the model answers as the assistant. */
export const GENERATION_PROMPT = '<|im_start|>assistant\n';

/**
 * Renders messages the way a chat template would, so prompt length and prefix blocks are stable.
 * With `continueFinal` the last message (an assistant's) is left open, for the model to go on with it.
 */
export function renderPrompt(messages: unknown[], addGenerationPrompt = true, continueFinal = false): string {
  let out = '';
  messages.forEach((raw, i) => {
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail(`messages[${i}] must be an object.`, `messages[${i}]`);
    const message = raw as Body;
    const role = message.role;
    if (typeof role !== 'string' || !ROLES.has(role)) {
      fail(`messages[${i}].role must be one of ${[...ROLES].join(', ')}.`, `messages[${i}].role`);
    }
    const text = renderContent(message.content, i);
    out += continueFinal && i === messages.length - 1 ? GENERATION_PROMPT + text : renderTurn(role, text);
  });
  return addGenerationPrompt ? out + GENERATION_PROMPT : out;
}

/**
 * `add_generation_prompt` and `continue_final_message` as vLLM checks them: both true is refused, and
 * only an assistant's final message can be continued.
 */
function parseTemplateFlags(body: Body, messages: unknown[]): { addGenerationPrompt: boolean; continueFinal: boolean } {
  const continueFinal = optionalBool(body, 'continue_final_message') ?? false;
  const addGenerationPrompt = optionalBool(body, 'add_generation_prompt') ?? true;
  if (!continueFinal) return { addGenerationPrompt, continueFinal };
  if (addGenerationPrompt) fail('Cannot set both `continue_final_message` and `add_generation_prompt` to True.', 'continue_final_message');
  const last = messages[messages.length - 1] as Body | null;
  if (typeof last !== 'object' || last === null || last.role !== 'assistant') {
    fail('continue_final_message needs the final message to be an assistant message to continue.', 'continue_final_message');
  }
  return { addGenerationPrompt, continueFinal };
}

function renderContent(content: unknown, i: number): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) fail(`messages[${i}].content must be a string or an array of content parts.`, `messages[${i}].content`);
  return content
    .map((part: unknown, j) => {
      const p = part as Body | null;
      if (typeof p !== 'object' || p === null) fail(`messages[${i}].content[${j}] must be an object.`, `messages[${i}].content[${j}]`);
      if (p.type === 'text') {
        if (typeof p.text !== 'string') fail(`messages[${i}].content[${j}].text must be a string.`, `messages[${i}].content[${j}].text`);
        return p.text;
      }
      return `<${String(p.type)}>`; // images, audio…: a placeholder token or two
    })
    .join('\n');
}

/** Stop strings from `field` (a string or a list of strings). */
export function parseStop(body: Body, field = 'stop'): string[] {
  const stop = body[field];
  if (stop === undefined || stop === null) return [];
  if (typeof stop === 'string') return stop === '' ? [] : [stop];
  if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) return stop.filter((s) => s !== '');
  return fail(`${field} must be a string or a list of strings.`, field);
}

/** `stream` and `stream_options` as vLLM checks them (chat and completions). */
export function parseStreamOptions(body: Body): { stream: boolean; includeUsage: boolean } {
  const stream = optionalBool(body, 'stream') ?? false;
  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!stream) fail('Stream options can only be defined when `stream=True`.', 'stream_options');
    if (typeof streamOptions !== 'object' || Array.isArray(streamOptions)) fail('stream_options must be an object.', 'stream_options');
  }
  // vLLM's StreamOptions defaults include_usage to true once stream_options is present.
  return { stream, includeUsage: streamOptions ? (optionalBool(streamOptions as Body, 'include_usage') ?? true) : false };
}

/**
 * vLLM's context-length checks for a prompt and the tokens asked for (chat, completions, messages).
 * Returns the answer's token budget: `requested`, or the rest of the context.
 */
export function fitContext(promptTokens: number, requested: number | undefined, maxModelLen: number): number {
  if (promptTokens >= maxModelLen) {
    fail(`This model's maximum context length is ${maxModelLen} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`, 'input_tokens');
  }
  if (requested !== undefined && promptTokens + requested > maxModelLen) {
    fail(
      `'max_tokens' or 'max_completion_tokens' is too large: ${requested}. This model's maximum context length is ${maxModelLen} tokens and your request has ${promptTokens} input tokens (${requested} > ${maxModelLen} - ${promptTokens}).`,
      'max_tokens',
    );
  }
  return requested ?? maxModelLen - promptTokens;
}

/** The model's template over `messages`; a template that raises is the request's 400, as in vLLM. */
function templateText(template: NonNullable<ChatLimits['template']>, messages: readonly unknown[], addGenerationPrompt: boolean, tools: unknown): string {
  try {
    return template.render(messages, addGenerationPrompt, tools);
  } catch (err) {
    return fail(`The chat template could not be rendered: ${(err as Error).message}`, 'messages');
  }
}

/** Validates a chat request like vLLM and turns it into a job. Throws {@link RequestError}. */
export function parseChatRequest(raw: unknown, limits: ChatLimits): ChatJob {
  const body = asObject(raw);
  const model = servedModel(body, limits.models);
  if (!Array.isArray(body.messages) || body.messages.length === 0) fail('messages must be a non-empty list.', 'messages');
  const messages: unknown[] = body.messages;
  const { addGenerationPrompt, continueFinal } = parseTemplateFlags(body, messages);
  const ownText = renderPrompt(messages, addGenerationPrompt, continueFinal); // also checks the messages
  const promptText = limits.template && !continueFinal ? templateText(limits.template, messages, addGenerationPrompt, body.tools) : ownText;
  const seed = optionalInt(body, 'seed', Number.MIN_SAFE_INTEGER);
  const n = optionalInt(body, 'n', 1, 128) ?? 1;
  const resume = continueFinal && n === 1 ? resumeOf(messages, promptText, seed) : undefined;
  // the answer so far counts as the tokens it was generated as (a tokenizer reading back its own output)
  const promptTokens = resume ? countTokens(promptText.slice(0, promptText.length - resume.prefix.length)) + resume.tokens : countTokens(promptText);

  const { stream, includeUsage } = parseStreamOptions(body);

  const logprobs = optionalBool(body, 'logprobs') ?? false;
  const topLogprobs = optionalInt(body, 'top_logprobs', 0, MAX_LOGPROBS) ?? 0;
  if (topLogprobs > 0 && !logprobs) fail('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');

  const requested = optionalInt(body, 'max_completion_tokens', 1) ?? optionalInt(body, 'max_tokens', 1);
  const maxTokens = fitContext(promptTokens, requested, limits.maxModelLen);
  const minTokens = optionalInt(body, 'min_tokens', 0) ?? 0;
  if (minTokens > maxTokens) fail(`min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${minTokens}.`, 'min_tokens');

  return {
    model,
    promptText,
    promptTokens,
    maxTokens,
    minTokens,
    ignoreEos: optionalBool(body, 'ignore_eos') ?? false,
    n,
    stop: parseStop(body),
    stream,
    includeUsage,
    logprobs,
    topLogprobs,
    seed,
    ...(resume ? { resume } : {}),
    ...cacheSaltOf(body),
  };
}

/** The final assistant message continued, when it is where the seed's answer begins (without a seed, a new answer starts). */
function resumeOf(messages: unknown[], promptText: string, seed: number | undefined): ResumePoint | undefined {
  if (seed === undefined) return undefined;
  const last = messages[messages.length - 1] as Body;
  const prefix = renderContent(last.content, messages.length - 1);
  const tokens = resumedTokens(seed, 0, prefix);
  return tokens === undefined || !promptText.endsWith(prefix) ? undefined : { prefix, tokens };
}
