/**
 * Streams that survive a dying replica. When the engine streaming a chat or completions answer dies,
 * stalls or ends with an in-stream server error (not one the request caused: a 4xx other than 429 is
 * passed on, re-wrapped, and ends the stream) after the first byte, the router can ask another replica to
 * go on from the text the client already has, and splice that continuation into the same SSE stream:
 *
 * - chat: the request again, with the delivered text appended as an assistant message that the engine
 *   continues (`continue_final_message: true`, `add_generation_prompt: false`; a request already
 *   continuing its own final assistant message gets the text appended to it);
 * - completions: the delivered text appended to the prompt (a single string prompt only).
 *
 * In both, `max_tokens` / `max_completion_tokens` and `min_tokens` shrink by the tokens delivered
 * (completions without `max_tokens`: from vLLM's default of 16). The client keeps one `id`, `created`
 * and `model`, gets no second role chunk, and exactly one `[DONE]`.
 *
 * Tokens: the delivered tokens are the engine's own count where it reports usage in every chunk
 * (`stream_options.continuous_usage_stats`, which the client asks for), else the content events relayed
 * (one token each, as vLLM usually streams them; the count the per-key limits already take as a stream
 * flows). An event may carry several tokens (a speculative decoder's, text held back and released at
 * once), so without per-chunk usage the count errs low, and the continuation's `max_tokens` may let the
 * answer run past the client's by those tokens: chosen over erring high, which has no bound short of
 * the text's bytes (about four times the tokens), so a continuation would stop long before an honest
 * one-token-per-event answer reached its limit, or be refused as finished. The continuation's engine
 * counts the delivered text as prompt, so the client's usage is prompt = the continuation's prompt
 * tokens − delivered tokens (the original prompt), completion = delivered + the continuation's
 * completion tokens. Exact when the delivered count is and the text re-tokenizes to the same tokens.
 *
 * Refused (the stream ends with today's SSE error event) for `n` > 1 or beam search, tools, logprobs,
 * guided decoding or a `response_format`, a completions prompt that is not one string or is echoed, an
 * answer that streamed tool calls or reasoning, one already finished (or that delivered every token its
 * request allows), an engine that cannot continue
 * a message, and past {@link MAX_RESUMPTIONS} resumptions. Pure, apart from the counters it keeps.
 */
import { type ValidRequest } from '../api/validate.js';
import { type Engine, type RESUME_REASONS, type ResumeResult } from '../core/types.js';
import { patchTopLevel, scanMembers } from '../proxy/body-patch.js';
import { type SseEvent, type SseSegment } from '../proxy/sse-tap.js';
import { streamError } from '../proxy/upstream-errors.js';
import { MAX_REPORTED_TOKENS, type TokenUsage } from '../proxy/usage.js';

/** Resumptions one stream may have; the next break ends it with the error event. */
export const MAX_RESUMPTIONS = 2;

/**
 * Engines that continue a final assistant message (`continue_final_message`): vLLM, and SGLang, which
 * takes the same field. TGI, TEI, llama.cpp and OpenAI's API do not.
 */
export const RESUMING_ENGINES: ReadonlySet<Engine> = new Set(['vllm', 'sglang']);

/** vLLM's `max_tokens` of a completions request that sets none. */
const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;

export type BreakReason = (typeof RESUME_REASONS.resumed)[number];
export type RefusedReason = (typeof RESUME_REASONS.refused)[number];
export type FailedReason = (typeof RESUME_REASONS.failed)[number];

export type ResumableApi = 'chat' | 'completions';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The body as the engine reads it: `extra_body`'s members over the top level. */
function effective(body: ValidRequest): Json {
  const extra = body.extra_body;
  return isObject(extra) ? { ...body, ...extra } : body;
}

/** Whether the request asks for a stream (`extra_body` honoured). */
export function asksStream(body: ValidRequest): boolean {
  return effective(body).stream === true;
}

const set = (value: unknown): boolean => value !== undefined && value !== null && value !== false;
const GUIDED = ['guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'structured_outputs'];

/**
 * Why this request's stream could never be resumed, read from its body before it is sent; undefined
 * when it can be. The answer then still has to qualify as it streams ({@link StreamSplice.refusal}).
 */
export function requestRefusal(api: ResumableApi, raw: ValidRequest): RefusedReason | undefined {
  const body = effective(raw);
  if ((typeof body.n === 'number' && body.n > 1) || (typeof body.best_of === 'number' && body.best_of > 1) || body.use_beam_search === true) return 'n';
  if ((Array.isArray(body.tools) && body.tools.length > 0) || set(body.functions)) return 'tools';
  // chat's `top_logprobs` counts only with `logprobs: true` (some clients send 0 by default); completions' integer `logprobs`, 0 too, asks for them
  if (set(body.logprobs) || (api === 'completions' && set(body.top_logprobs)) || set(body.prompt_logprobs)) return 'logprobs';
  if ((isObject(body.response_format) && body.response_format.type !== 'text') || GUIDED.some((field) => set(body[field]))) return 'guided_decoding';
  // echoed, the prompt (chat: the last message) is in the answer already: a continuation would have the
  // engine echo the delivered text again (vLLM echoes the final message it is asked to continue)
  if (set(body.echo)) return 'prompt';
  if (api === 'completions') return typeof body.prompt === 'string' && !set(body.suffix) ? undefined : 'prompt';
  if (body.continue_final_message === true) {
    const last = Array.isArray(body.messages) ? (body.messages.at(-1) as unknown) : undefined;
    if (!isObject(last) || typeof last.content !== 'string') return 'prompt';
  }
  return undefined;
}

/**
 * The completion tokens a request allows, as vLLM reads them: chat's `max_completion_tokens`, else its
 * `max_tokens`; completions' `max_tokens`, else vLLM's default (but `null`, which vLLM reads as up to the
 * context). Undefined for a request that sets none.
 */
function budgetOf(api: ResumableApi, raw: ValidRequest): number | undefined {
  const body = effective(raw);
  const limit = (value: unknown): number | undefined => (typeof value === 'number' ? value : undefined);
  if (api === 'completions') return body.max_tokens === null ? undefined : (limit(body.max_tokens) ?? COMPLETIONS_DEFAULT_MAX_TOKENS);
  return limit(body.max_completion_tokens) ?? limit(body.max_tokens);
}

/** The identity every chunk the client gets carries: the first attempt's. */
interface StreamHead {
  id: unknown;
  created: unknown;
  model: unknown;
}

/**
 * One resumable stream across its attempts: what the client got (text, content events, the head),
 * whether the answer can still be continued, the continuation's body, and the rewrite of a
 * continuation's events into the client's stream.
 */
export class StreamSplice {
  /** The answer's text the client got, over every attempt. */
  text = '';
  /** The completion tokens the client got: its content events, or more where the engine's per-chunk usage says so. */
  tokens = 0;
  /** Continuations started. */
  resumptions = 0;
  /** The current attempt ended with the engine's in-stream error event (held back from the client). */
  errored = false;
  /** The attempt under way is a continuation. */
  private continuing = false;
  private head: StreamHead | undefined;
  /** Content events delivered before the current continuation began. */
  private tokensBefore = 0;
  private unfit: RefusedReason | undefined;
  private finished = false;
  /** The client got a role chunk (a continuation's is dropped then, and passed on when not). */
  private roled = false;
  /** The completion tokens the request allows, when it sets a limit ({@link budgetOf}). */
  private readonly budget: number | undefined;

  constructor(
    readonly api: ResumableApi,
    request: ValidRequest,
  ) {
    this.budget = budgetOf(api, request);
  }

  /**
   * Why the answer as streamed so far cannot be continued (or no more resumptions are allowed); undefined
   * when it can. An answer that delivered every token its request allows is finished, whether or not its
   * finish chunk came: a continuation (which asks for at least one token) would go past them.
   */
  refusal(): RefusedReason | undefined {
    if (this.unfit) return this.unfit;
    if (this.finished || (this.budget !== undefined && this.tokens >= this.budget)) return 'finished';
    return this.resumptions >= MAX_RESUMPTIONS ? 'max_resumptions' : undefined;
  }

  /** A continuation is about to be sent: its events are rewritten, and its usage counts from here. */
  begin(): void {
    this.continuing = true;
    this.tokensBefore = this.tokens;
    this.errored = false;
  }

  /** The continuation's first byte arrived: it took the stream over. */
  resumed(): void {
    this.resumptions += 1;
  }

  /**
   * The client's view of an event of the current attempt: an engine's error event (and the `[DONE]`
   * after it) is held back, as the stream may yet go on, unless the request caused it (a 4xx other than
   * 429: passed on, the stream ends with it); a continuation's chunks get the first
   * attempt's id, created and model, lose the role delta, and report usage from the answer's start.
   * Returns the text to write ('' drops the event).
   */
  rewrite(segment: SseSegment): string {
    const event = segment.event;
    if (!event) return segment.raw;
    if (event.data === '[DONE]') return this.errored ? '' : segment.raw;
    // the engine's error event (`{"error": …}`, llama.cpp's `error:` block): one the request caused (a 4xx
    // but 429) is passed on, for the relay to re-wrap as on any stream (another replica would fail the
    // same way); any other is held back
    const error = streamError('openai', event);
    if (error) {
      if (error.status < 500 && error.status !== 429) return segment.raw;
      this.errored = true;
      return '';
    }
    const chunk = parseChunk(event);
    if (!chunk) return segment.raw;
    if (isObject(chunk.error)) {
      this.errored = true;
      return '';
    }
    this.observe(chunk);
    if (!this.continuing) {
      this.roled ||= carriesRole(chunk);
      return segment.raw;
    }
    return this.continued(chunk);
  }

  /**
   * Records what a chunk delivers: its head (first attempt), text, content events, the engine's count of
   * its completion tokens so far where it reports one per chunk, and what cannot be continued.
   */
  private observe(chunk: Json): void {
    if (!this.head && typeof chunk.id === 'string') this.head = { id: chunk.id, created: chunk.created, model: chunk.model };
    if (Array.isArray(chunk.choices)) this.observeChoices(chunk.choices as unknown[]);
    // after the chunk's own content event: its usage (continuous usage stats) counts that token already
    if (isObject(chunk.usage)) this.reported(chunk.usage.completion_tokens);
  }

  /**
   * An engine that reports usage in every chunk (vLLM's and SGLang's `stream_options.continuous_usage_stats`)
   * says how many tokens its attempt has generated so far, which an event that carried several tokens (a
   * speculative decoder's, text held back and released at once) counts exactly where the content events
   * count one. Believed only upward: never fewer tokens than content events, and an unbelievable count
   * (no whole number, beyond {@link MAX_REPORTED_TOKENS}) is ignored. One comparison per chunk.
   */
  private reported(completion: unknown): void {
    if (typeof completion !== 'number' || !Number.isInteger(completion) || completion < 0 || completion > MAX_REPORTED_TOKENS) return;
    const delivered = this.tokensBefore + completion;
    if (delivered > this.tokens) this.tokens = delivered;
  }

  private observeChoices(choices: unknown[]): void {
    for (const choice of choices) {
      if (!isObject(choice)) continue;
      if (choice.index !== 0 && choice.index !== undefined) this.unfit ??= 'n';
      if (choice.finish_reason !== null && choice.finish_reason !== undefined) this.finished = true;
      const delta = this.api === 'chat' ? choice.delta : choice;
      if (!isObject(delta)) continue;
      const text = this.api === 'chat' ? delta.content : delta.text;
      if (typeof text === 'string' && text !== '') {
        this.text += text;
        this.tokens += 1;
      }
      if (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0) this.unfit ??= 'tools';
      if ((typeof delta.reasoning_content === 'string' && delta.reasoning_content !== '') || (typeof delta.reasoning === 'string' && delta.reasoning !== '')) this.unfit ??= 'reasoning';
    }
  }

  /** A continuation's chunk as the client gets it. */
  private continued(chunk: Json): string {
    if (this.head) Object.assign(chunk, this.head);
    let empty = Array.isArray(chunk.choices) && chunk.choices.length > 0;
    for (const choice of Array.isArray(chunk.choices) ? (chunk.choices as unknown[]) : []) {
      if (!isObject(choice)) continue;
      const delta = choice.delta;
      if (isObject(delta)) {
        // the client had its role chunk from the first attempt, unless that broke before its first whole event
        if (delta.role !== undefined) {
          if (this.roled) delete delta.role;
          else this.roled = true;
        }
        if (Object.keys(delta).some((key) => key !== 'content' || delta.content !== '')) empty = false;
      } else if (typeof choice.text === 'string' && choice.text !== '') empty = false;
      if (choice.finish_reason !== null && choice.finish_reason !== undefined) empty = false;
    }
    if (isObject(chunk.usage)) {
      chunk.usage = this.clientUsageObject(chunk.usage);
      empty = false;
    }
    return empty ? '' : `data: ${JSON.stringify(chunk)}\n\n`;
  }

  /** An engine `usage` object of the current continuation, counted from the answer's start. */
  private clientUsageObject(usage: Json): Json {
    const engine = { promptTokens: count(usage.prompt_tokens), completionTokens: count(usage.completion_tokens) };
    const client = this.usage(engine);
    const out: Json = { ...usage, prompt_tokens: client.promptTokens, completion_tokens: client.completionTokens, total_tokens: client.promptTokens + client.completionTokens };
    const details = usage.prompt_tokens_details;
    if (isObject(details) && typeof details.cached_tokens === 'number') out.prompt_tokens_details = { ...details, cached_tokens: Math.min(details.cached_tokens, client.promptTokens) };
    return out;
  }

  /**
   * The request's usage after the current continuation, from the engine's: its prompt less the
   * delivered text, and the delivered tokens added to its completion. Without the engine's usage
   * (it broke too), the content events delivered.
   */
  usage(engine: TokenUsage | undefined): TokenUsage {
    if (!this.continuing && engine && !engine.estimated) return engine;
    if (!engine || engine.estimated) return { promptTokens: 0, completionTokens: this.tokens, estimated: true };
    return { promptTokens: Math.max(0, engine.promptTokens - this.tokensBefore), completionTokens: this.tokensBefore + engine.completionTokens };
  }

  /**
   * The continuation's body, from the body the pool's engines got (model, usage option and
   * `extra_body` already applied): the delivered text appended, the token budgets reduced. Members
   * it does not change keep their exact text.
   */
  continuationBody(upstream: Buffer): Buffer {
    const text = upstream.toString('utf8');
    const body = JSON.parse(text) as Json;
    const members = new Map<string, string>();
    const shrink = (field: string, min: number, absent?: number): void => {
      const given = body[field];
      const value = typeof given === 'number' ? given : absent;
      if (value !== undefined) members.set(field, String(Math.max(min, value - this.tokens)));
    };
    if (this.api === 'completions') {
      members.set('prompt', JSON.stringify(`${String(body.prompt)}${this.text}`));
      shrink('max_tokens', 1, COMPLETIONS_DEFAULT_MAX_TOKENS);
    } else {
      members.set('messages', this.continuedMessages(text, body));
      members.set('continue_final_message', 'true');
      members.set('add_generation_prompt', 'false');
      shrink('max_tokens', 1);
      shrink('max_completion_tokens', 1);
    }
    shrink('min_tokens', 0);
    return Buffer.from(patchTopLevel(text, { set: members }), 'utf8');
  }

  /** `messages` with the delivered text as the final assistant message (appended to it when the request already continued its own). */
  private continuedMessages(text: string, body: Json): string {
    const messages = body.messages as unknown[];
    const last = messages.at(-1);
    if (body.continue_final_message === true && isObject(last) && typeof last.content === 'string') {
      return JSON.stringify([...messages.slice(0, -1), { ...last, content: last.content + this.text }]);
    }
    const open = text.indexOf('{');
    const member = scanMembers(text, open).members.find((m) => m.key === 'messages');
    const raw = member ? text.slice(member.valueStart, member.valueEnd) : JSON.stringify(messages);
    return `${raw.slice(0, raw.lastIndexOf(']'))},${JSON.stringify({ role: 'assistant', content: this.text })}]`;
  }
}

/** Whether a chat chunk gives a choice its role (`delta.role`). */
function carriesRole(chunk: Json): boolean {
  return Array.isArray(chunk.choices) && (chunk.choices as unknown[]).some((choice) => isObject(choice) && isObject(choice.delta) && choice.delta.role !== undefined);
}

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : 0;
}

function parseChunk(event: SseEvent): Json | undefined {
  if (!event.data.startsWith('{')) return undefined;
  try {
    const data = JSON.parse(event.data) as unknown;
    return isObject(data) ? data : undefined;
  } catch {
    return undefined;
  }
}

/** What the exchange needs to resume one request's stream (the director makes it for an opted-in deployment's stream). */
export interface ResumePlan {
  /** Why this request's stream may not be resumed, known from its body; then there is no splice. */
  refused?: RefusedReason;
  splice?: StreamSplice;
  /** Counts a broken stream's fate (modelgate_stream_resumptions_total). */
  record(result: ResumeResult, reason: BreakReason | RefusedReason | FailedReason): void;
}
