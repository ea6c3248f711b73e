/**
 * Chat completions for the simulator: request checks as vLLM does them, synthetic generation per
 * choice, and the exact response and stream-chunk shapes vLLM emits.
 */
import { modelNotFound } from './errors.js';
import { createRng, hash53, type Rng } from './prng.js';
import { asObject, fail, optionalBool, optionalInt, RequestError, type Body } from './request-checks.js';
import { alternativeTokens, countTokens, sampleToken } from './text.js';

export interface ChatLimits {
  models: readonly string[];
  maxModelLen: number;
  /** Range of the "natural" answer length (tokens until the synthetic EOS). */
  outputTokens: { min: number; max: number };
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
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant', 'tool', 'function']);
const MAX_LOGPROBS = 20;

/** Renders messages the way a chat template would, so prompt length and prefix blocks are stable. */
function renderPrompt(messages: unknown[]): string {
  let out = '';
  messages.forEach((raw, i) => {
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail(`messages[${i}] must be an object.`, `messages[${i}]`);
    const message = raw as Body;
    const role = message.role;
    if (typeof role !== 'string' || !ROLES.has(role)) {
      fail(`messages[${i}].role must be one of ${[...ROLES].join(', ')}.`, `messages[${i}].role`);
    }
    out += `<|im_start|>${role}\n${renderContent(message.content, i)}<|im_end|>\n`;
  });
  return out + '<|im_start|>assistant\n';
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

function parseStop(body: Body): string[] {
  const stop = body.stop;
  if (stop === undefined || stop === null) return [];
  if (typeof stop === 'string') return stop === '' ? [] : [stop];
  if (Array.isArray(stop) && stop.every((s) => typeof s === 'string')) return (stop).filter((s) => s !== '');
  return fail('stop must be a string or a list of strings.', 'stop');
}

/** Validates a chat request like vLLM and turns it into a job. Throws {@link RequestError}. */
export function parseChatRequest(raw: unknown, limits: ChatLimits): ChatJob {
  const body = asObject(raw);
  const model = body.model ?? limits.models[0];
  if (typeof model !== 'string') fail('model must be a string.', 'model');
  if (!limits.models.includes(model)) throw new RequestError(modelNotFound(model));
  if (!Array.isArray(body.messages) || body.messages.length === 0) fail('messages must be a non-empty list.', 'messages');
  const promptText = renderPrompt(body.messages);
  const promptTokens = countTokens(promptText);

  const stream = optionalBool(body, 'stream') ?? false;
  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!stream) fail('Stream options can only be defined when `stream=True`.', 'stream_options');
    if (typeof streamOptions !== 'object' || Array.isArray(streamOptions)) fail('stream_options must be an object.', 'stream_options');
  }
  // vLLM's StreamOptions defaults include_usage to true once stream_options is present.
  const includeUsage = streamOptions ? optionalBool(streamOptions as Body, 'include_usage') ?? true : false;

  const logprobs = optionalBool(body, 'logprobs') ?? false;
  const topLogprobs = optionalInt(body, 'top_logprobs', 0, MAX_LOGPROBS) ?? 0;
  if (topLogprobs > 0 && !logprobs) fail('when using `top_logprobs`, `logprobs` must be set to true.', 'top_logprobs');

  if (promptTokens >= limits.maxModelLen) {
    fail(
      `This model's maximum context length is ${limits.maxModelLen} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
      'input_tokens',
    );
  }
  const requested = optionalInt(body, 'max_completion_tokens', 1) ?? optionalInt(body, 'max_tokens', 1);
  if (requested !== undefined && promptTokens + requested > limits.maxModelLen) {
    fail(
      `'max_tokens' or 'max_completion_tokens' is too large: ${requested}. This model's maximum context length is ${limits.maxModelLen} tokens and your request has ${promptTokens} input tokens (${requested} > ${limits.maxModelLen} - ${promptTokens}).`,
      'max_tokens',
    );
  }
  const maxTokens = requested ?? limits.maxModelLen - promptTokens;
  const minTokens = optionalInt(body, 'min_tokens', 0) ?? 0;
  if (minTokens > maxTokens) fail(`min_tokens must be less than or equal to max_tokens=${maxTokens}, got ${minTokens}.`, 'min_tokens');

  return {
    model,
    promptText,
    promptTokens,
    maxTokens,
    minTokens,
    ignoreEos: optionalBool(body, 'ignore_eos') ?? false,
    n: optionalInt(body, 'n', 1, 128) ?? 1,
    stop: parseStop(body),
    stream,
    includeUsage,
    logprobs,
    topLogprobs,
    seed: optionalInt(body, 'seed', Number.MIN_SAFE_INTEGER),
  };
}

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export type ChoiceFinish = 'stop' | 'length';

/** What one decode step produced for one choice. */
export interface ChoiceStep {
  /** Text released to the client this step (may be empty while a stop string could still match). */
  delta: string;
  logprobs: TokenLogprob[];
  finishReason: ChoiceFinish | null;
  stopReason: string | null;
}

const bytesOf = (s: string): number[] => [...Buffer.from(s, 'utf8')];

/**
 * One choice's synthetic generation. Text is a pure function of (seed, choice index); the answer
 * ends at a synthetic EOS drawn from the output-length range, at `max_tokens`, or at a stop string.
 */
export class ChoiceGenerator {
  text = '';
  tokens = 0;
  finishReason: ChoiceFinish | null = null;
  stopReason: string | null = null;
  private released = 0;
  private readonly rng: Rng;
  /** Separate stream so asking for log-probs never changes the text. */
  private readonly logprobRng: Rng;
  private readonly eosAt: number;
  private readonly holdBack: number;

  constructor(
    private readonly job: ChatJob,
    readonly index: number,
    seed: number,
    outputTokens: { min: number; max: number },
  ) {
    this.rng = createRng(hash53(`${seed}:${index}`));
    this.logprobRng = createRng(hash53(`${seed}:${index}:logprobs`));
    const lengthRng = createRng(hash53(`${seed}:${index}:length`));
    const natural = outputTokens.min + Math.floor(lengthRng() * (outputTokens.max - outputTokens.min + 1));
    this.eosAt = job.ignoreEos ? Infinity : Math.max(job.minTokens, natural);
    this.holdBack = Math.max(0, ...job.stop.map((s) => s.length - 1));
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  /** Generates the next token. */
  next(): ChoiceStep {
    const token = sampleToken(this.rng);
    const logprobs = this.job.logprobs ? [this.logprobFor(token)] : [];
    const searchFrom = Math.max(0, this.text.length - this.holdBack);
    this.text += token;
    this.tokens += 1;
    for (const stop of this.job.stop) {
      const at = this.text.indexOf(stop, searchFrom);
      if (at >= 0 && this.tokens > this.job.minTokens) {
        this.text = this.text.slice(0, at);
        return this.release('stop', stop, logprobs);
      }
    }
    if (this.tokens >= this.eosAt) return this.release('stop', null, logprobs);
    if (this.tokens >= this.job.maxTokens) return this.release('length', null, logprobs);
    const until = this.text.length - this.holdBack;
    const delta = until > this.released ? this.text.slice(this.released, until) : '';
    this.released = Math.max(this.released, until);
    return { delta, logprobs, finishReason: null, stopReason: null };
  }

  private release(reason: ChoiceFinish, stop: string | null, logprobs: TokenLogprob[]): ChoiceStep {
    this.finishReason = reason;
    this.stopReason = stop;
    const delta = this.text.slice(this.released);
    this.released = this.text.length;
    return { delta, logprobs, finishReason: reason, stopReason: stop };
  }

  private logprobFor(token: string): TokenLogprob {
    const rng = this.logprobRng;
    const logprob = -rng() * 1.5;
    const alternatives = alternativeTokens(rng, token, Math.max(0, this.job.topLogprobs - 1));
    const top = this.job.topLogprobs > 0 ? [{ token, logprob, bytes: bytesOf(token) }] : [];
    let next = logprob;
    for (const alt of alternatives) {
      next -= 0.1 + rng() * 2;
      top.push({ token: alt, logprob: next, bytes: bytesOf(alt) });
    }
    return { token, logprob, bytes: bytesOf(token), top_logprobs: top };
  }
}

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usageOf(job: ChatJob, choices: readonly ChoiceGenerator[], cachedTokens: number): Usage {
  const completion = choices.reduce((sum, c) => sum + c.tokens, 0);
  return {
    prompt_tokens: job.promptTokens,
    total_tokens: job.promptTokens + completion,
    completion_tokens: completion,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

/** The non-streamed body, with the null fields vLLM's `model_dump()` leaves in. */
export function completionBody(id: string, created: number, job: ChatJob, choices: readonly ChoiceGenerator[], usage: Usage, logprobs: TokenLogprob[][]): string {
  return JSON.stringify({
    id,
    object: 'chat.completion',
    created,
    model: job.model,
    choices: choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: c.text,
        refusal: null,
        annotations: null,
        audio: null,
        function_call: null,
        tool_calls: [],
        reasoning_content: null,
      },
      logprobs: job.logprobs ? { content: logprobs[c.index] ?? [] } : null,
      finish_reason: c.finishReason,
      stop_reason: c.stopReason,
    })),
    service_tier: null,
    system_fingerprint: null,
    usage,
    prompt_logprobs: null,
    kv_transfer_params: null,
  });
}

/** Serialises stream chunks that share one id, creation time and model. */
export class ChunkWriter {
  private readonly head: string;

  constructor(id: string, created: number, model: string) {
    this.head = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},`;
  }

  role(index: number): string {
    return `${this.head}"choices":[{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  step(index: number, step: ChoiceStep, logprobs: TokenLogprob[]): string {
    const choice: Record<string, unknown> = {
      index,
      delta: step.delta === '' && step.finishReason ? {} : { content: step.delta },
      logprobs: logprobs.length > 0 ? { content: logprobs } : null,
      finish_reason: step.finishReason,
    };
    if (step.finishReason) choice.stop_reason = step.stopReason;
    return `${this.head}"choices":[${JSON.stringify(choice)}]}\n\n`;
  }

  usage(usage: Usage): string {
    return `${this.head}"choices":[],"usage":${JSON.stringify(usage)}}\n\n`;
  }
}

export const DONE_EVENT = 'data: [DONE]\n\n';
