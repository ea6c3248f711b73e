/**
 * Token accounting and stream timing, read from responses as they pass.
 *
 * - Non-streamed: `usage` is read from the JSON body. Only a bounded copy is kept (engines put usage at
 *   the end), and only the `usage` object is parsed, never the whole body.
 * - Streamed: each SSE event is looked at with string checks; only the usage chunk is parsed. Time to
 *   first token is the first event carrying content (text, reasoning or a tool call) after the request
 *   was sent; each gap between content events is one inter-token latency.
 * - A stream that ends without usage (the client left, the engine broke) still counts the completion
 *   tokens delivered: one per content event, as engines stream them (an estimate: an engine may put
 *   several tokens in one event, so it errs low). Its prompt tokens are unknown and not counted.
 */
import { type Clock } from '../core/clock.js';
import { scanMembers } from './body-patch.js';
import { type SseEvent } from './sse-tap.js';

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  /** Counted from the streamed content events, not reported by the engine (promptTokens is then 0). */
  estimated?: true;
}

const CONTENT = /"(?:content|reasoning_content|reasoning)":"(?!")|"tool_calls":\[\{/;
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
    const { close } = scanMembers(text, open);
    return toUsage(JSON.parse(text.slice(open, close + 1)) as unknown);
  } catch {
    return undefined;
  }
}

function toUsage(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const u = value as { prompt_tokens?: unknown; completion_tokens?: unknown };
  if (typeof u.prompt_tokens !== 'number') return undefined;
  return { promptTokens: u.prompt_tokens, completionTokens: typeof u.completion_tokens === 'number' ? u.completion_tokens : 0 };
}

/** Whether an event is the usage-only chunk (`"choices":[]` with a usage object). */
export function isUsageChunk(event: SseEvent): boolean {
  return event.data.includes('"choices":[]') && event.data.includes('"usage":{');
}

export class ResponseMeter {
  usage: TokenUsage | undefined;
  /** ms from the request being sent to the first content event. */
  ttftMs: number | undefined;
  private lastContentAt: number | undefined;
  private contentEvents = 0;
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail = '';
  private overflow = false;

  constructor(
    private readonly clock: Clock,
    private readonly sentAt: number,
    private readonly onInterToken?: (ms: number) => void,
  ) {}

  onEvent(event: SseEvent): void {
    if (event.data === '[DONE]') return;
    if (CONTENT.test(event.data)) {
      this.contentEvents += 1;
      const now = this.clock.now();
      if (this.lastContentAt === undefined) this.ttftMs = now - this.sentAt;
      else this.onInterToken?.(now - this.lastContentAt);
      this.lastContentAt = now;
    }
    if (event.data.includes('"usage":{')) {
      try {
        this.usage = toUsage((JSON.parse(event.data) as { usage?: unknown }).usage) ?? this.usage;
      } catch {
        // not JSON: nothing to count
      }
    }
  }

  /** The engine's usage, or else the completion tokens counted from the content events streamed. */
  finalUsage(): TokenUsage | undefined {
    if (this.usage) return this.usage;
    return this.contentEvents > 0 ? { promptTokens: 0, completionTokens: this.contentEvents, estimated: true } : undefined;
  }

  onBody(chunk: Buffer): void {
    if (!this.overflow && this.headBytes + chunk.length <= BODY_HEAD) {
      this.head.push(chunk);
      this.headBytes += chunk.length;
      return;
    }
    if (!this.overflow) {
      this.overflow = true;
      this.tail = Buffer.concat(this.head).toString('utf8').slice(-BODY_TAIL);
      this.head = [];
    }
    this.tail = (this.tail + chunk.toString('utf8')).slice(-BODY_TAIL);
  }

  onBodyEnd(): void {
    this.usage = usageFromJson(this.overflow ? this.tail : Buffer.concat(this.head).toString('utf8'));
    this.head = [];
    this.tail = '';
  }
}
