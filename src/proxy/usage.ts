/**
 * Token accounting and stream timing, read from responses as they pass, in each API's dialect.
 *
 * - Non-streamed: `usage` is read from the JSON body. Only a bounded copy is kept (engines put usage at
 *   the end), and only the `usage` object is parsed, never the whole body. OpenAI's names
 *   (`prompt_tokens`, `completion_tokens`) and the Responses and Messages APIs' (`input_tokens`,
 *   `output_tokens`) are both read; a pooling answer's `total_tokens` alone counts as prompt tokens.
 * - Streamed: each SSE event is looked at with string checks; only events carrying usage are parsed.
 *   Content events are chat/completions chunks with text, reasoning or a tool call (`openai`), the
 *   Responses API's `*.delta` events (`responses`), and the Messages API's `content_block_delta`
 *   (`anthropic`, whose input tokens come in `message_start` and output tokens in `message_delta`).
 *   Time to first token is the first content event after the request was sent; each gap between
 *   content events is one inter-token latency.
 * - A stream that ends without usage (the client left, the engine broke) still counts the completion
 *   tokens delivered: one per content event, as engines stream them (an estimate: an engine may put
 *   several tokens in one event, so it errs low). Its prompt tokens are unknown and not counted.
 * - On the Responses API the meter also reads the answer's `id` (for `previous_response_id`
 *   affinity) and the last event's `sequence_number` (so an error event the router adds follows it).
 */
import { type Clock } from '../core/clock.js';
import { tokensOfChars, type WireDialect } from '../core/types.js';
import { scanMembers, skipValue } from './body-patch.js';
import { type ResponseObserver } from './forwarder.js';
import { type SseEvent } from './sse-tap.js';

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  /** Counted from the streamed content events, not reported by the engine (promptTokens is then 0). */
  estimated?: true;
}

const CONTENT = /"(?:content|reasoning_content|reasoning|text)":"(?!")|"tool_calls":\[\{/;
const RESPONSES_DELTA = /^response\.[\w.]+\.delta$/;
const RESPONSES_DELTA_DATA = /"type":"response\.[\w.]+\.delta"/;
const SEQUENCE = /"sequence_number":(\d+)/;
/** Bytes of a non-streamed body kept for reading its usage; beyond that, only a tail of this size. */
const BODY_HEAD = 4 * 1024 * 1024;
const BODY_TAIL = 64 * 1024;

/** `usage` of a JSON response text, read from its last `"usage"` member, if it has one. */
export function usageFromJson(text: string): TokenUsage | undefined {
  const at = text.lastIndexOf('"usage"');
  if (at < 0) return undefined;
  const open = text.indexOf('{', at);
  const colon = text.indexOf(':', at);
  if (open < 0 || colon < 0 || text.slice(colon + 1, open).trim() !== '') return undefined;
  try {
    return toUsage(JSON.parse(text.slice(open, skipValue(text, open))) as unknown);
  } catch {
    return undefined;
  }
}

/**
 * Most tokens one answer may report in one count: more than any model's context (10M tokens the
 * largest served today), times the choices of a request. Believed as reported, a replica's
 * `"prompt_tokens": 1e15` spent the day's and the month's budget of whichever key's request it
 * answered (in Redis: at every router) and stuck the token counters of its deployment at 1e15.
 */
export const MAX_REPORTED_TOKENS = 2 ** 26;

/** A count a usage object reports: a whole number of tokens, 0 to {@link MAX_REPORTED_TOKENS}; `NaN` for any other number (the usage is not believed). */
function count(value: unknown): number | undefined {
  if (typeof value !== 'number') return undefined;
  return Number.isInteger(value) && value >= 0 && value <= MAX_REPORTED_TOKENS ? value : NaN;
}

/** Whether `value` is a number that is no count of tokens (every answer's usage is read: no array made to ask). */
function unbelieved(value: unknown): boolean {
  return Number.isNaN(count(value));
}

/**
 * A usage object's counts, or undefined when it reports none, or any it reports is no count of tokens
 * (a fraction, negative, beyond {@link MAX_REPORTED_TOKENS}): such an answer is charged as one that
 * reported no usage (a stream its content events, any other its prompt's estimate).
 */
function toUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const u = value as Record<string, unknown>;
  if (unbelieved(u.completion_tokens) || unbelieved(u.output_tokens) || unbelieved(u.prompt_tokens) || unbelieved(u.input_tokens) || unbelieved(u.total_tokens)) return undefined;
  const completion = count(u.completion_tokens) ?? count(u.output_tokens);
  const prompt = count(u.prompt_tokens) ?? count(u.input_tokens) ?? (completion === undefined ? count(u.total_tokens) : undefined);
  if (prompt === undefined && completion === undefined) return undefined;
  return { promptTokens: prompt ?? 0, completionTokens: completion ?? 0 };
}

/** The `usage` object of a streamed event in the dialect's place for it, as far as the event reports it. */
function eventUsage(dialect: WireDialect, data: Record<string, unknown>): Partial<Record<'prompt' | 'completion', number>> | undefined {
  const nested = (key: string): unknown => (typeof data[key] === 'object' && data[key] !== null ? (data[key] as Record<string, unknown>).usage : undefined);
  const raw = (dialect === 'responses' ? nested('response') : dialect === 'anthropic' && data.type === 'message_start' ? nested('message') : data.usage) as Record<string, unknown> | undefined;
  if (typeof raw !== 'object' || raw === null) return undefined;
  if (dialect === 'anthropic') {
    // message_start carries the input tokens, message_delta the output tokens so far (and sometimes input again)
    const prompt = count(raw.input_tokens);
    const completion = count(raw.output_tokens);
    if (Number.isNaN(prompt) || Number.isNaN(completion)) return undefined;
    return { ...(prompt !== undefined ? { prompt } : {}), ...(completion !== undefined && data.type === 'message_delta' ? { completion } : {}) };
  }
  const usage = toUsage(raw);
  return usage && { prompt: usage.promptTokens, completion: usage.completionTokens };
}

/** Whether an event's data holds a usage object; looked for once per event (the relay and the meter both ask). */
export function carriesUsage(event: SseEvent): boolean {
  return (event.usage ??= event.data.includes('"usage":{'));
}

/** Whether an event is the usage-only chunk (`"choices":[]` with a usage object). */
export function isUsageChunk(event: SseEvent): boolean {
  return carriesUsage(event) && event.data.includes('"choices":[]');
}

/** A chat or completions chunk with text: the usual one, `"content":"…"`, found without the regex. */
function isOpenAiContent(data: string): boolean {
  const at = data.indexOf('"content":"');
  return (at >= 0 && data.charCodeAt(at + 11) !== 0x22) || CONTENT.test(data);
}

/** Who hears of a stream's content events as they pass. */
export interface MeterWatch {
  /** Each gap between content events, in ms. */
  interToken?: (ms: number) => void;
  /** Each content event (one token, as counted while a stream flows: the per-key limits take them). */
  content?: () => void;
  /** The whole answer came, before its last bytes go to the client (the per-key limits free its concurrency slot). */
  answered?: () => void;
  /**
   * The Responses API answer's id, as soon as it is read (a stream's first event; a JSON body when it
   * is whole), and once more when the answer is whole if that write failed (false). A promise returned
   * holds the answer's last bytes until it settles.
   */
  responseId?: (id: string) => Promise<boolean> | undefined;
}

/** Reads a response as it passes (the forwarder's {@link ResponseObserver}): usage, timing, the Responses API's id. */
export class ResponseMeter implements ResponseObserver {
  usage: TokenUsage | undefined;
  /** ms from the request being sent to the first content event. */
  ttftMs: number | undefined;
  /** The Responses API answer's `id`, once seen. */
  responseId: string | undefined;
  /** The request went out to the engine. */
  sent = false;

  requestSent(): void {
    this.sent = true;
  }

  /** When the first content event came, on the clock (the attempt's send plus {@link ttftMs}). */
  get firstTokenAt(): number | undefined {
    return this.ttftMs === undefined ? undefined : this.sentAt + this.ttftMs;
  }
  private lastSequence: number | undefined;
  private lastContentAt: number | undefined;
  private contentEvents = 0;
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail = '';
  private overflow = false;

  constructor(
    private readonly clock: Clock,
    private readonly sentAt: number,
    private readonly dialect: WireDialect = 'openai',
    private readonly watch: MeterWatch = {},
    /** A non-streamed answer that reports no tokens is counted by its text (speech to text: see {@link answerTextTokens}). */
    private readonly countsText = false,
  ) {}

  /** The `sequence_number` an event added after the last one relayed should carry (Responses API). */
  nextSequence(): number | undefined {
    return this.lastSequence === undefined ? undefined : this.lastSequence + 1;
  }

  private isContent(event: SseEvent): boolean {
    if (this.dialect === 'openai') return isOpenAiContent(event.data);
    if (this.dialect === 'anthropic') return event.event === 'content_block_delta' || (event.event === undefined && event.data.includes('"type":"content_block_delta"'));
    return event.event !== undefined ? RESPONSES_DELTA.test(event.event) : RESPONSES_DELTA_DATA.test(event.data);
  }

  /** `at`: when the event was read (the clock's; one reading serves the events of a chunk, read together). */
  event(event: SseEvent, at?: number): void {
    if (event.data === '[DONE]') return;
    if (this.isContent(event)) {
      this.contentEvents += 1;
      this.watch.content?.();
      const now = at ?? this.clock.now();
      if (this.lastContentAt === undefined) this.ttftMs = now - this.sentAt;
      else this.watch.interToken?.(now - this.lastContentAt);
      this.lastContentAt = now;
    } else if (this.dialect === 'responses' && this.responseId === undefined && RESPONSE_OBJECT.test(event.data)) {
      const response = this.parse(event)?.response;
      const id = typeof response === 'object' && response !== null ? (response as Record<string, unknown>).id : undefined;
      if (typeof id === 'string') this.found(id);
    }
    if (this.dialect === 'responses') {
      const sequence = SEQUENCE.exec(event.data);
      if (sequence) this.lastSequence = Number(sequence[1]);
    }
    if (carriesUsage(event)) {
      const data = this.parse(event);
      const seen = data && eventUsage(this.dialect, data);
      if (seen) this.usage = { promptTokens: seen.prompt ?? this.usage?.promptTokens ?? 0, completionTokens: seen.completion ?? this.usage?.completionTokens ?? 0 };
    }
  }

  private parse(event: SseEvent): Record<string, unknown> | undefined {
    try {
      const data = JSON.parse(event.data) as unknown;
      return typeof data === 'object' && data !== null ? (data as Record<string, unknown>) : undefined;
    } catch {
      return undefined; // not JSON: nothing to read
    }
  }

  /** The engine's usage, or else the completion tokens counted from the content events streamed. */
  finalUsage(): TokenUsage | undefined {
    // A stream cut after the engine reported only part of its usage (the Messages API's input tokens
    // come first) still counts the content events delivered: never fewer completion tokens than those.
    if (this.usage) return this.usage.completionTokens >= this.contentEvents ? this.usage : { ...this.usage, completionTokens: this.contentEvents };
    return this.contentEvents > 0 ? { promptTokens: 0, completionTokens: this.contentEvents, estimated: true } : undefined;
  }

  /** Bytes of a non-streamed body read. */
  private bodyBytes = 0;
  /** The first byte of a non-streamed body that is not white space, once one came. */
  private lead: number | undefined;
  /** A non-streamed body ended (an empty one too). */
  private bodyEnded = false;

  /**
   * A non-streamed answer that ended whole but is no answer, from an API that answers JSON (`json`): an
   * empty body, or one that is not a JSON object or array (a page of HTML, a word). A replica that answers
   * so to everything does it at once, so least-outstanding scheduling sent it most of its pool's requests.
   * The audio APIs' answers are not JSON in every format, and may be empty (a `text` transcription of silence).
   */
  noAnswer(json: boolean): boolean {
    return json && this.bodyEnded && (this.lead === undefined || (this.lead !== 0x7b && this.lead !== 0x5b));
  }

  body(chunk: Buffer): void {
    this.bodyBytes += chunk.length;
    if (this.lead === undefined) {
      for (const byte of chunk) {
        // white space, and a UTF-8 byte order mark (fetch's json() drops it, so the SDKs read such an answer)
        if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09 || byte === 0xef || byte === 0xbb || byte === 0xbf) continue;
        this.lead = byte;
        break;
      }
    }
    if (!this.overflow && this.headBytes + chunk.length <= BODY_HEAD) {
      this.head.push(chunk);
      this.headBytes += chunk.length;
      return;
    }
    if (!this.overflow) {
      this.overflow = true;
      const head = Buffer.concat(this.head).toString('utf8');
      // a Responses API answer too long to be read whole still names its id first (vLLM's, OpenAI's)
      if (this.dialect === 'responses') this.leadingId = leadingId(head);
      this.tail = head.slice(-BODY_TAIL);
      this.head = [];
    }
    this.tail = (this.tail + chunk.toString('utf8')).slice(-BODY_TAIL);
  }

  /** The id's record, while its write is not done. */
  private recording: Promise<boolean> | undefined;
  /** Whether the id's record was written, once its write is done. */
  private recorded: boolean | undefined;
  /** The id a JSON body too long to read whole names first (Responses API). */
  private leadingId: string | undefined;

  private found(id: string): void {
    this.responseId = id;
    this.record(id);
  }

  private record(id: string): void {
    const write = this.watch.responseId?.(id);
    if (!write) return;
    this.recording = write;
    void write.then((written) => {
      if (this.recording !== write) return;
      this.recording = undefined;
      this.recorded = written;
    });
  }

  /** A JSON body's id, read when it is whole (its first member's when it was too long to keep); `text`: the body, when already decoded. */
  private bodyId(text?: string): string | undefined {
    if (this.overflow) return this.leadingId;
    return this.head.length > 0 ? topLevelId(text ?? Buffer.concat(this.head).toString('utf8')) : undefined;
  }

  /**
   * The whole answer came (a JSON body's last chunk read here first): the per-key limits hear of it,
   * and a Responses API answer's id is recorded if it was not yet, or again if its write failed (Redis
   * away when a stream began). What it returns (the record's write, while not done) holds the answer's
   * last bytes until it settles.
   */
  answered(): Promise<boolean> | undefined {
    this.watch.answered?.();
    if (this.dialect !== 'responses') return undefined;
    if (this.responseId === undefined) {
      const id = this.bodyId();
      if (id !== undefined) this.found(id);
    } else if (this.recorded === false) {
      this.recorded = undefined;
      this.record(this.responseId);
    }
    return this.recording;
  }

  bodyEnd(): void {
    this.bodyEnded = true;
    const text = this.overflow ? this.tail : Buffer.concat(this.head).toString('utf8');
    if (this.dialect === 'responses' && this.responseId === undefined) {
      const id = this.bodyId(text);
      if (id !== undefined) this.found(id);
    }
    this.usage = usageFromJson(text);
    if (this.usage === undefined && this.countsText) {
      // a body too long to keep is counted by its bytes (the text is most of it)
      const tokens = this.overflow ? tokensOfChars(this.bodyBytes) : answerTextTokens(text);
      if (tokens > 0) this.usage = { promptTokens: 0, completionTokens: tokens, estimated: true };
    }
    this.head = [];
    this.tail = '';
  }
}

/**
 * The tokens of a speech-to-text answer, which reports seconds of audio, not tokens: its `text` when it
 * is JSON (`json`, `verbose_json`: the segments repeat the text), else the whole body (`text`, `srt`,
 * `vtt`), by the router's estimate ({@link tokensOfChars}).
 */
export function answerTextTokens(body: string): number {
  const open = body.search(/\S/);
  if (open < 0) return 0;
  if (body[open] !== '{') return tokensOfChars(body.length);
  try {
    const member = scanMembers(body, open).members.find((m) => m.key === 'text');
    const value = member && (JSON.parse(body.slice(member.valueStart, member.valueEnd)) as unknown);
    return typeof value === 'string' ? tokensOfChars(value.length) : 0;
  } catch {
    return 0;
  }
}

/** A Responses API stream event carrying the response object (`response.created` first). */
const RESPONSE_OBJECT = /"response"\s*:\s*\{/;
/** A JSON object whose first member is a string `id`. */
const LEADING_ID = /^\s*\{\s*"id"\s*:\s*("(?:[^"\\]|\\.)*")/;

/** The `id` a JSON object text names first, if it is a string (for a text too long to scan whole). */
function leadingId(text: string): string | undefined {
  const match = LEADING_ID.exec(text);
  if (!match) return undefined;
  try {
    const id = JSON.parse(match[1] as string) as unknown;
    return typeof id === 'string' ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The top-level `id` of a JSON object text, if it is a string. */
function topLevelId(text: string): string | undefined {
  const open = text.indexOf('{');
  if (open < 0) return undefined;
  try {
    const member = scanMembers(text, open).members.find((m) => m.key === 'id');
    const value = member && (JSON.parse(text.slice(member.valueStart, member.valueEnd)) as unknown);
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}
