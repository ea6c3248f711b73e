/**
 * Legacy completions requests (`POST /v1/completions`) checked as vLLM checks them: the prompt as a
 * string, strings, token ids or lists of token ids (one engine prompt each), vLLM's default of 16
 * `max_tokens`, integer `logprobs`, `echo`, and `suffix` refused as vLLM refuses it.
 */
import { resumedSuffix, type GenerationParams, type ResumePoint } from './chat-generation.js';
import { fitContext, MAX_LOGPROBS, parseStop, parseStreamOptions } from './chat-request.js';
import { asObject, cacheSaltOf, fail, optionalBool, optionalInt, servedModel, type Body } from './request-checks.js';
import { countTokens } from './text.js';
import { checkTokenIds, detokenize } from './tokenizer.js';

export interface CompletionPrompt {
  text: string;
  tokens: number;
  /** The answer's token budget for this prompt. */
  maxTokens: number;
  /** The prompt ends with the start of the seed's answer (a cut answer sent back): the answer picks up after it. */
  resume?: ResumePoint;
}

export interface CompletionJob {
  model: string;
  prompts: CompletionPrompt[];
  /** Prompt tokens of all prompts (each counted once, whatever `n`). */
  promptTokens: number;
  n: number;
  stream: boolean;
  includeUsage: boolean;
  echo: boolean;
  /** `logprobs` as asked (an integer), or undefined for none. */
  logprobs: number | undefined;
  minTokens: number;
  ignoreEos: boolean;
  stop: string[];
  seed: number | undefined;
  /** vLLM's `cache_salt` (prefix caching per salt). */
  cacheSalt?: string;
}

/** vLLM's `CompletionRequest.max_tokens` default. */
const DEFAULT_MAX_TOKENS = 16;
const EMPTY_PROMPT = 'Either prompt or prompt_embeds must be provided and non-empty.';

const tokenPrompt = (ids: number[], param: string): { text: string; tokens: number } => ({ text: detokenize(checkTokenIds(ids, param)), tokens: ids.length });

const isNumberList = (value: unknown): value is number[] => Array.isArray(value) && value.length > 0 && value.every((t) => typeof t === 'number');

function parsePrompts(prompt: unknown): Array<{ text: string; tokens: number }> {
  if (typeof prompt === 'string') {
    if (prompt === '') fail(EMPTY_PROMPT, 'prompt');
    return [{ text: prompt, tokens: countTokens(prompt) }];
  }
  if (!Array.isArray(prompt) || prompt.length === 0) return fail(EMPTY_PROMPT, 'prompt');
  if (isNumberList(prompt)) return [tokenPrompt(prompt, 'prompt')];
  return prompt.map((item: unknown, i) => {
    if (typeof item === 'string' && item !== '') return { text: item, tokens: countTokens(item) };
    if (isNumberList(item)) return tokenPrompt(item, `prompt[${i}]`);
    return fail(`prompt[${i}] must be a non-empty string or a non-empty list of token ids.`, `prompt[${i}]`);
  });
}

/** Validates a completions request like vLLM and turns it into a job. Throws `RequestError`. */
export function parseCompletionRequest(raw: unknown, limits: { models: readonly string[]; maxModelLen: number }): CompletionJob {
  const body: Body = asObject(raw);
  const model = servedModel(body, limits.models);
  if (body.suffix !== undefined && body.suffix !== null) fail('suffix is not currently supported');
  const { stream, includeUsage } = parseStreamOptions(body);
  const requested = optionalInt(body, 'max_tokens', 1);
  const seed = optionalInt(body, 'seed', Number.MIN_SAFE_INTEGER);
  const n = optionalInt(body, 'n', 1, 128) ?? 1;
  const parsed = parsePrompts(body.prompt);
  const prompts = (parsed.length === 1 && n === 1 && typeof body.prompt === 'string' ? parsed.map((p) => resumed(p, seed)) : parsed).map((p) => ({
    ...p,
    maxTokens: requested === undefined ? Math.min(DEFAULT_MAX_TOKENS, fitContext(p.tokens, undefined, limits.maxModelLen)) : fitContext(p.tokens, requested, limits.maxModelLen),
  }));
  const minTokens = optionalInt(body, 'min_tokens', 0) ?? 0;
  // a fold, not Math.min(...list): a batch of 150,000 prompts overflowed the call stack (a 500 for a request vLLM serves)
  const smallest = prompts.reduce((least, p) => Math.min(least, p.maxTokens), Infinity);
  if (minTokens > smallest) fail(`min_tokens must be less than or equal to max_tokens=${smallest}, got ${minTokens}.`, 'min_tokens');
  return {
    model,
    prompts,
    promptTokens: prompts.reduce((sum, p) => sum + p.tokens, 0),
    n,
    stream,
    includeUsage,
    echo: optionalBool(body, 'echo') ?? false,
    logprobs: optionalInt(body, 'logprobs', 0, MAX_LOGPROBS),
    minTokens,
    ignoreEos: optionalBool(body, 'ignore_eos') ?? false,
    stop: parseStop(body),
    seed,
    ...cacheSaltOf(body),
  };
}

/**
 * A seeded single prompt that ends with the start of its own answer (a router resuming a cut stream
 * sends the prompt and the text delivered so far): the answer goes on after it, and that text counts
 * as the tokens it was generated as. Without a seed the text cannot be recognised: a new answer starts.
 */
function resumed(prompt: { text: string; tokens: number }, seed: number | undefined): { text: string; tokens: number; resume?: ResumePoint } {
  const resume = seed === undefined ? undefined : resumedSuffix(seed, 0, prompt.text);
  if (!resume) return prompt;
  return { text: prompt.text, tokens: countTokens(prompt.text.slice(0, prompt.text.length - resume.prefix.length)) + resume.tokens, resume };
}

/** What the choices of prompt `prompt` generate with. */
export function completionParams(job: CompletionJob, prompt: CompletionPrompt): GenerationParams {
  return {
    maxTokens: prompt.maxTokens,
    minTokens: job.minTokens,
    ignoreEos: job.ignoreEos,
    stop: job.stop,
    logprobs: job.logprobs !== undefined,
    topLogprobs: job.logprobs ?? 0,
    ...(prompt.resume ? { resume: prompt.resume } : {}),
  };
}
