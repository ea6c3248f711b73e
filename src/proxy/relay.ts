/**
 * The response leg of a 2xx answer: nothing reaches the client until the engine's first body byte,
 * then the body is relayed as it comes, with backpressure.
 *
 * - If the engine breaks, stalls past the idle timeout or the deadline passes, a stream ends with a
 *   final SSE error event and `data: [DONE]` (a JSON body is cut), so a cut answer never looks finished.
 *   So does a stream the engine ends without its API's last event ({@link endsStream}): to the client
 *   that is a stream cut short, however cleanly the engine's response ended.
 * - A stream's head loses the engine's `content-length`: the router may drop, rewrite or add events,
 *   so the client's response is framed by the router (chunked), never by the engine's byte count.
 * - While the router holds the engine's response paused because the client is not reading, the
 *   engine's silence is the router's doing: the idle clock stops and the client's stall clock runs
 *   instead. A client that accepts no bytes for `clientStallMs` is cut (`client_stalled`).
 * - A stream reaches the client whole events at a time: an event the engine has not finished is held
 *   until it is, so a stream cut mid-event ends with the error event, never half an event.
 * - With `stripUsageChunk`, the usage chunk the router asked for is removed: the rest of its chunk
 *   goes as the engine's bytes when the chunk starts and ends on event boundaries with valid UTF-8
 *   (nearly always), else as the text read; with `rewrite`, each whole event is written as it says.
 * - Once the answer is whole (a stream's last event, a sized body's last byte), neither the idle clock
 *   nor the deadline cuts it: the engine gets the idle timeout from then to end its response, and
 *   one that does not is cancelled with the client's response ended as it is, complete.
 * - A `resumable` stream that breaks, stalls or was cut is left open for the caller (director/resume.ts):
 *   nothing is written then, and the client is on an event boundary. A `continues` attempt appends
 *   to a response an earlier attempt committed.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { RouterError, streamErrorEvent } from '../core/errors.js';
import { type Clock } from '../core/clock.js';
import { type HeldEvents } from './held-events.js';
import { passed } from '../core/phases.js';
import { type WireDialect } from '../core/types.js';
import { clientResponseHeaders } from './headers.js';
import { SseTap, type SseEvent, type SseSegment } from './sse-tap.js';
import { OPENAI_ERROR } from './upstream-errors.js';
import { isUsageChunk } from './usage.js';
import { type AttemptResult, type AttemptSpec, type StreamDone, type StreamEnd } from './forwarder.js';

/** The attempt's single timer and its settlement, as the forwarder lends them to the relay. */
export interface AttemptControl {
  arm(ms: number, onTimeout: () => void): void;
  disarm(): void;
  /** Settles the attempt: committed at the first byte, or failed before it. */
  settle(result: AttemptResult): void;
}

/** The engine's 2xx answer as the relay holds it (the forwarder's attempt). */
export interface EngineResponse {
  readonly headers: IncomingHttpHeaders;
  /** The engine's body is not being read (backpressure from the client). */
  readonly paused: boolean;
  pause(): void;
  resume(): void;
  /** Cancels the engine's request: nothing more of its body comes (and no `broken()` for it). */
  destroy(): void;
}

/** What the forwarder hands the relay of the engine's body: each chunk, its end, or its break. */
export interface BodySink {
  data(chunk: Buffer): void;
  end(): void;
  /** The body stopped before its end: the connection broke. */
  broken(): void;
  /** The router's shutdown grace period is over: the engine's request was ended (SHUTTING_DOWN). */
  shutdown(): void;
}

export type BrokenEnd = Exclude<StreamEnd, 'complete' | 'client_gone' | 'client_stalled' | 'shutdown'>;

const BROKEN: Record<BrokenEnd, () => RouterError> = {
  upstream_broken: () => new RouterError('UPSTREAM_STREAM_BROKEN', 'The model server closed the stream before it finished.'),
  idle_timeout: () => new RouterError('UPSTREAM_TIMEOUT', 'The model server stopped sending for longer than the idle timeout.'),
  deadline: () => new RouterError('UPSTREAM_TIMEOUT', 'The request ran past its total timeout.'),
};

/** The error a broken stream ends with (for a caller that ends a resumable stream itself). */
export function brokenError(end: BrokenEnd): RouterError {
  return BROKEN[end]();
}

/** The longest event the relay holds while it waits for its blank line (characters). */
export const MAX_EVENT_CHARS = 32 * 1024 * 1024;

const RESPONSES_LAST = new Set(['response.completed', 'response.incomplete', 'response.failed', 'error']);
const RESPONSES_LAST_DATA = /^\{"type":\s*"(?:response\.(?:completed|incomplete|failed)|error)"/;
const ANTHROPIC_LAST_DATA = /^\{"type":\s*"(?:message_stop|error)"/;
/** A choice's finish reason: a non-empty string (Ollama and old TGI send `""` on every chunk). */
const FINISHED = /"finish_reason"\s*:\s*"[^"]/;

/**
 * Whether `event` ends a stream of the API's dialect: OpenAI's `data: [DONE]` (or, from an engine that
 * leaves it out, a chunk with a finish reason, or its error event), the Responses API's `response.completed`,
 * `response.incomplete`, `response.failed` or `error`, the Messages API's `message_stop` or `error`.
 */
export function endsStream(dialect: WireDialect, event: SseEvent): boolean {
  if (dialect === 'anthropic') return event.event !== undefined ? event.event === 'message_stop' || event.event === 'error' : ANTHROPIC_LAST_DATA.test(event.data);
  if (dialect === 'responses') return event.event !== undefined ? RESPONSES_LAST.has(event.event) : RESPONSES_LAST_DATA.test(event.data);
  return event.data === '[DONE]' || FINISHED.test(event.data) || isOpenAiError(event);
}

/** An OpenAI-dialect error event: `data: {"error": …}`, or an `event: error` (llama.cpp's `error:` block, as the tap reads it). */
function isOpenAiError(event: SseEvent): boolean {
  return event.event === 'error' || OPENAI_ERROR.test(event.data);
}

/** {@link endsStream} of each dialect, made once (a stream's attempt takes its dialect's). */
const ENDS_STREAM: Record<WireDialect, (event: SseEvent) => boolean> = {
  openai: (event) => endsStream('openai', event),
  anthropic: (event) => endsStream('anthropic', event),
  responses: (event) => endsStream('responses', event),
};

/**
 * Whether `event` is the very last a stream of the dialect carries: OpenAI's `data: [DONE]` (after a
 * chunk with a finish reason come the usage chunk and `[DONE]`), the Responses API's
 * `response.completed`, `.incomplete`, `.failed` or `error`, the Messages API's `message_stop` or `error`:
 * for those two, the event that ends the stream, the same function (the relay then reads it once an event).
 */
export const FINAL_EVENT: Record<WireDialect, (event: SseEvent) => boolean> = {
  openai: (event) => event.data === '[DONE]',
  anthropic: ENDS_STREAM.anthropic,
  responses: ENDS_STREAM.responses,
};

/** The indexes of the choices an OpenAI chunk finishes (none for a chunk that is not JSON). */
function finishedChoices(data: string): number[] {
  try {
    const chunk = JSON.parse(data) as { choices?: unknown };
    if (!Array.isArray(chunk.choices)) return [];
    return (chunk.choices as Array<{ index?: unknown; finish_reason?: unknown } | null>).flatMap((c) =>
      typeof c?.finish_reason === 'string' && c.finish_reason !== '' ? [typeof c.index === 'number' ? c.index : 0] : [],
    );
  } catch {
    return [];
  }
}

/**
 * {@link endsStream} for one stream, whose request asked for `choices` choices (OpenAI's `n`): with more
 * than one, a finish reason ends the stream (from an engine that leaves `[DONE]` out) only once every
 * choice has had one — a chunk that finishes choice 0 while choice 1 still streams is not the end.
 * Stateful: one per attempt.
 */
export function streamEnd(dialect: WireDialect, choices = 1): (event: SseEvent) => boolean {
  if (dialect !== 'openai' || choices <= 1) return ENDS_STREAM[dialect];
  const finished = new Set<number>();
  return (event) => {
    if (event.data === '[DONE]' || isOpenAiError(event)) return true;
    if (!FINISHED.test(event.data)) return false;
    for (const index of finishedChoices(event.data)) finished.add(index);
    return finished.size >= choices;
  };
}

function isEventStream(contentType: string | undefined): boolean {
  return contentType?.toLowerCase().startsWith('text/event-stream') ?? false;
}

/**
 * A `content-encoding` that compresses ({@link COMPRESSIONS}): the router asks no engine for one (it sends no
 * `accept-encoding`), and reads, meters and rewrites bodies as text. Passed on, a lying `gzip` over
 * plain JSON failed the client's SDK (it gunzipped it), and a really compressed answer went unmetered.
 */
function encoded(encoding: string): boolean {
  for (const token of encoding.toLowerCase().split(',')) if (COMPRESSIONS.has(token.trim())) return true;
  return false;
}

/** The content codings that compress (RFC 9110's registry and what engines' servers send): one the router cannot read. Any other value (`identity`, a stray `utf-8`) is no compression, and passes as before. */
const COMPRESSIONS: ReadonlySet<string> = new Set(['gzip', 'x-gzip', 'deflate', 'br', 'zstd', 'compress', 'x-compress']);

/** The error a stream still open when the router's shutdown grace period ends is ended with. */
const shutdownStreamError = (): RouterError =>
  new RouterError('ROUTER_SHUTTING_DOWN', 'This router is shutting down and ended the stream before it finished; retry the request (another router will take it).');

/** `heldEvents`: what every stream holds of unfinished events, router-wide (none: only this stream's {@link MAX_EVENT_CHARS} bounds it). */
export function relayResponse(spec: AttemptSpec, proxyRes: EngineResponse, res: ServerResponse, status: number, control: AttemptControl, clock: Clock, heldEvents?: HeldEvents): BodySink {
  const encoding = proxyRes.headers['content-encoding'];
  if (encoding !== undefined && encoded(encoding)) {
    // an answer the router cannot read: a failed attempt (retried elsewhere, counted against the replica), never the client's
    proxyRes.destroy();
    control.settle({ kind: 'failed', reason: 'invalid_answer', detail: `content-encoding ${encoding.slice(0, 40)}, which the router did not ask for` });
    return IGNORED;
  }
  const tap = isEventStream(proxyRes.headers['content-type']) ? new SseTap() : undefined;
  if (spec.continues && !tap) {
    // the client is mid-stream: a body that is not an event stream cannot be appended to it
    proxyRes.destroy();
    control.settle({ kind: 'failed', reason: 'reset', detail: `the continuation answered ${proxyRes.headers['content-type'] ?? 'without a content type'}, not an event stream` });
    return IGNORED;
  }
  /** Events may be rewritten: each is written by itself, never the engine's chunk as it came. */
  const rewrites = spec.rewrite !== undefined;
  const { endOfStream } = spec;
  /** The engine sent its stream's last event (or no one asked). */
  let sawEnd = endOfStream === undefined;
  const notes = (event: SseEvent | undefined): void => {
    if (!sawEnd && event && (endOfStream as (e: SseEvent) => boolean)(event)) sawEnd = true;
  };
  /**
   * The stream's final event (`spec.finalEvent`) was read: what the engine sends after it is not the
   * answer (it is dropped, unread: not counted, not written). Relayed, `data: [DONE]` then more content
   * reached the client, and each content event after it was counted as a token of the key. A stream
   * that may be resumed too: after `[DONE]` its attempt is over, whether the answer was whole or the
   * engine's error event before it sends the stream on elsewhere.
   */
  let final = false;
  const isFinal = spec.finalEvent;
  /** The final event is the one that ends the stream (the Responses and Messages APIs'): `sawEnd` says it, not a second reading. */
  const finalIsEnd = isFinal !== undefined && isFinal === endOfStream;
  let bytes = 0;
  let committed = false;
  let finish: (end: StreamEnd) => void = () => undefined;
  /** The engine's own error event, when it sent one (relayed re-wrapped). */
  let engineError: StreamDone['engineError'];
  /** This stream's share of `heldEvents`: the characters of an unfinished event its tap holds (0 once it ended). */
  let heldShare = 0;
  let ended = false;
  const done = new Promise<StreamDone>((resolve) => {
    finish = (end) => {
      if (ended) return;
      ended = true;
      if (heldShare > 0) heldEvents?.move(heldShare, 0);
      heldShare = 0;
      control.disarm();
      const done: StreamDone = { end, bytes };
      if (engineError) done.engineError = engineError;
      resolve(done);
    };
  });
  /**
   * The text to relay for a whole event: '' for the usage chunk the router asked for, the engine's error
   * event re-wrapped (unless the `rewrite` dropped it), the `rewrite`'s text, anything else as it came.
   */
  const textOf = (segment: SseSegment): string => {
    const { event } = segment;
    if (spec.stripUsageChunk && event && isUsageChunk(event)) return '';
    const own = spec.rewrite ? spec.rewrite(segment) : segment.raw;
    const found = own !== '' && event && spec.engineError ? spec.engineError(event) : undefined;
    if (!found) return own;
    engineError ??= { status: found.status, code: found.code };
    return found.text;
  };
  /** The chunk before ended in a line ending: the decoder holds no bytes of a character it cut. */
  let cleanEnd = true;
  /**
   * Once the answer is whole (`wasAnswered`, below) the deadline no longer cuts it: its last bytes may
   * wait for the Responses record's write, up to and past it. The engine then gets the idle timeout,
   * from when those bytes were written, to end its response (bytes it sends after them, keep-alive
   * comments, do not extend it); one that does not is cancelled and the client's response ended as it
   * is, complete: nothing is written after the answer's last event.
   */
  let endBy: number | undefined;
  const left = (ms: number): number => (wasAnswered ? ms : Math.min(ms, spec.deadline - clock.now()));
  // The idle clock is one timer per quiet stretch, not one per chunk (a stream is hundreds of chunks):
  // a chunk only notes when it came, and a timer that fires with a chunk come since is set again for
  // what is left. It fires idleMs after the last chunk, or at the deadline.
  let lastData = 0;
  /** The attempt's timer is the idle clock (not the first byte's, nor a stalled client's). */
  let idleSet = false;
  const setIdle = (ms: number): void => {
    idleSet = true;
    control.arm(ms, idleFired);
  };
  const idleFired = (): void => {
    idleSet = false;
    const now = clock.now();
    if (endBy !== undefined) {
      if (now < endBy) return setIdle(endBy - now);
      endWhole();
      return;
    }
    const due = Math.min(lastData + spec.timeouts.idleMs, spec.deadline);
    if (now < due) return setIdle(due - now);
    endBroken(now >= spec.deadline ? 'deadline' : 'idle_timeout');
    proxyRes.destroy();
  };
  const idle = (): void => {
    lastData = clock.now();
    if (!idleSet) setIdle(endBy !== undefined ? endBy - lastData : left(spec.timeouts.idleMs));
  };
  /** The answer went whole to the client and the engine did not end its response in time: it is cancelled, the client's ended. */
  const endWhole = (): void => {
    if (!res.writableEnded && !res.destroyed) res.end();
    finish('complete');
    proxyRes.destroy();
  };
  const endBroken = (end: BrokenEnd): void => {
    if (spec.resumable && tap && end !== 'deadline') {
      finish(end); // the caller goes on elsewhere, or ends the stream
      return;
    }
    if (!res.writableEnded && !res.destroyed) {
      // only whole events were written: the client is on a boundary
      if (tap) res.end((spec.errorEvent ?? streamErrorEvent)(BROKEN[end]()));
      else res.destroy(); // a JSON body cut short must not look complete
    }
    finish(end);
  };
  const commit = (): void => {
    committed = true;
    if (!spec.continues) {
      const headers = clientResponseHeaders(proxyRes.headers, spec.requestId);
      // a stream is framed by the router; a 204 has no body, whatever length the engine claims for it (304 never gets here: a 3xx is no answer)
      if (tap || status === 204) delete headers['content-length'];
      // a header the router set ahead (Anthropic's `request-id`) is the router's, not the engine's
      if (headers['request-id'] !== undefined && res.hasHeader('request-id')) delete headers['request-id'];
      res.writeHead(status, headers);
    }
    control.settle({ kind: 'committed', status, done });
    res.once('close', () => {
      if (!res.writableFinished) {
        finish('client_gone');
        proxyRes.destroy();
      }
    });
  };
  // The client is not reading: nothing is cut for the engine's silence while the router holds it.
  /** When the client last stopped taking the answer (the stall clock's start). */
  let stallSince = 0;
  const stalled = (): void => {
    // the answer became whole while the client was not reading: the deadline no longer cuts it, only the stall
    const due = stallSince + spec.timeouts.clientStallMs;
    if (wasAnswered && clock.now() < due) {
      control.arm(due - clock.now(), stalled);
      return;
    }
    if (!wasAnswered && clock.now() >= spec.deadline) {
      endBroken('deadline');
    } else {
      finish('client_stalled');
      res.destroy(); // it takes no bytes, so no closing event could reach it
    }
    proxyRes.destroy();
  };
  // The answer is whole, before the client can know it (its last bytes not yet written): the per-key
  // limits free its concurrency slot now, and a Responses API answer's id is in the records, so a client
  // that sends its next request the moment it has this answer, through any router, finds the slot free
  // and the id known. A body of known length is whole with its last byte; a stream with its last event
  // (the client's SDK stops reading there); any other at its end. What `answered` returns (the id's
  // write to the routers' shared records, while not done) holds those last bytes until it settles.
  let wasAnswered = false;
  const answered = (): Promise<unknown> | undefined => {
    if (wasAnswered) return undefined;
    wasAnswered = true;
    return spec.observe?.answered?.();
  };
  /** The answer's last bytes, waiting for what `answered` returned; the end of the engine's body waits behind them. */
  let holding: Promise<unknown> | undefined;
  /** Runs `go` (which writes the answer's last bytes) now, or once `gate` settles. */
  const after = (gate: Promise<unknown> | undefined, go: () => void, bodyLeft: boolean): void => {
    if (!gate) {
      go();
      if (bodyLeft) endBy = clock.now() + spec.timeouts.idleMs; // the timer set for the chunk finds it
      return;
    }
    if (bodyLeft) proxyRes.pause();
    // the answer is whole: neither the idle clock nor the deadline cuts it while it waits (a client gone meanwhile still ends it)
    control.disarm();
    idleSet = false;
    holding = gate.then(() => {
      holding = undefined;
      if (res.destroyed || res.writableEnded) return; // the client left meanwhile
      go(); // written with the engine's body paused: no backpressure is taken up here, only below
      if (!bodyLeft) return;
      endBy = clock.now() + spec.timeouts.idleMs;
      if (res.writableNeedDrain) drained();
      else {
        idle(); // what is left of the body (its end) comes on the idle clock again
        proxyRes.resume();
      }
    });
  };
  const length = tap ? NaN : Number(proxyRes.headers['content-length'] ?? NaN);
  /** A chunk's whole blocks and what each is written as: one a stream, emptied per chunk. */
  const blocks = new ChunkBlocks();
  let sent = false;
  const write = (data: Buffer | string): void => {
    const flowing = res.write(data);
    // Node holds a response's writes back until the end of the tick (it corks the socket), so that
    // what one tick writes goes in one system call: the engine's chunks that arrived together (often
    // a stream's whole burst) leave together. The first one is sent at once instead, ahead of the
    // rest of the tick (reading its events, the engine's next chunks): it is the time to first byte.
    // Sending every chunk at once cost about a third more CPU a stream (one write call per chunk).
    if (!sent) {
      sent = true;
      res.socket?.uncork();
      passed(res, 'first_byte');
    }
    if (flowing || proxyRes.paused) return;
    proxyRes.pause();
    drained();
  };
  /** The engine's body, paused, resumes when the client has taken what was written (or is cut as stalled). */
  const drained = (): void => {
    idleSet = false;
    stallSince = clock.now();
    control.arm(left(spec.timeouts.clientStallMs), stalled);
    res.once('drain', () => {
      // an answer's last bytes held meanwhile (an earlier event of their chunk met the backpressure):
      // the engine's body stays paused, or what it sends after them would reach the client first
      if (holding) return;
      idle();
      proxyRes.resume();
    });
  };
  const data = (chunk: Buffer): void => {
    const first = !committed;
    if (first) commit();
    bytes += chunk.length;
    // A stream's idle clock starts again with each chunk. A body that is not a stream is written by an
    // engine that has finished the answer: it gets the idle timeout from its first byte (and from each
    // time a client that held it back took it up again), not from each chunk, so a replica that drips
    // it a byte at a time is cut at the idle timeout, as a failure of its own, not at the deadline.
    if (tap || first) idle();
    // The client gets each chunk first (the first one sent at once, see `write`); what the router
    // reads from it (usage, token timing, the per-key token count) comes after.
    if (!tap) {
      if (bytes >= length) {
        // the last chunk of a body of known length: read first (a Responses API answer's id is in the body)
        spec.observe?.body(chunk);
        after(answered(), () => write(chunk), true);
        return;
      }
      write(chunk);
      spec.observe?.body(chunk);
      return;
    }
    if (final) return; // after the stream's last event: not even read (an event without end there is held by no one)
    const held = !tap.atBoundary;
    tap.feed(chunk);
    const last = chunk[chunk.length - 1];
    const lineEnd = last === 0x0a || last === 0x0d;
    // Only whole events reach the client: an event the engine has not finished is held until its blank
    // line comes, so a stream cut mid-event never hands the client half an event (the SDKs raise a
    // JSON error on it, not the router's error event, which follows on a boundary).
    // A chunk that ends on a boundary, with nothing held before it or in the decoder, is nearly every
    // chunk: written as it came, byte for byte, when no event of it is to be changed, and less the
    // bytes of an event dropped (the usage chunk the router asked for) when one is: what the router
    // reads is never encoded again to be written.
    const asItCame = !rewrites && !held && cleanEnd && lineEnd;
    cleanEnd = lineEnd;
    let text = '';
    let changed = false;
    /** Only whole events were dropped: nothing was rewritten. */
    let onlyDropped = true;
    /** The stream's last event is in this chunk: the answer is whole. */
    let whole = false;
    /** An event of this chunk waits to be written with the rest: none may go ahead of it. */
    let behind = false;
    for (let seg = tap.next(); seg !== undefined; seg = tap.next()) {
      if (final) {
        // after the stream's last event: neither relayed nor read (its bytes dropped as a usage chunk's are)
        blocks.add({ raw: seg.raw, event: undefined }, '');
        changed = true;
        continue;
      }
      notes(seg.event);
      if (isFinal && (finalIsEnd ? sawEnd : seg.event !== undefined && isFinal(seg.event))) final = true;
      const own = textOf(seg);
      // a stream whose API names no last event (the audio APIs') is whole only at its end; a resumable
      // one is whole at its last event too, unless that was the engine's error event its rewrite held
      // back (read just above): then the stream goes on elsewhere
      if (sawEnd && endOfStream && !wasAnswered && !spec.resumable?.cut()) whole = true;
      if (own !== seg.raw) {
        changed = true;
        if (own !== '') onlyDropped = false;
      }
      blocks.add(seg, own);
      if (own === '') continue;
      // The response's first event is written as soon as it is read, ahead of the rest of its chunk: a
      // fast engine's first chunk may hold many events (a zero-latency engine's, its whole stream), and
      // reading them (and, for a whole answer, what waits on it) is not the client's wait. Not the
      // answer's last event (it waits for `answered`), nor text whose bytes may not be the engine's
      // (bytes that are not UTF-8, read as U+FFFD: those go as they came, below).
      if (!sent && !behind && !whole && !(asItCame && own.includes('\uFFFD'))) {
        blocks.ahead = blocks.count - 1;
        write(own);
        continue;
      }
      behind = true;
      if (!asItCame) text += own;
    }
    let out: Buffer | string | Buffer[] = text;
    if (asItCame) {
      if (!tap.atBoundary)
        out = blocks.text(); // the chunk ended inside an event (on a line ending): what is whole goes
      else if (!changed)
        // as it came, less the first event's bytes when it went ahead: the first block, whose text held no
        // U+FFFD, so its bytes are its text's UTF-8 (the rest goes as it came, bytes that are not UTF-8 too)
        out = blocks.ahead < 0 ? chunk : chunk.subarray(Buffer.byteLength((blocks.segments[blocks.ahead] as SseSegment).raw, 'utf8'));
      else out = (onlyDropped && blocks.keptBytes(chunk)) || blocks.text();
    }
    if (whole) {
      // the last chunk's events are read before it is written (a Responses API stream's id is in its first one)
      observed();
      after(answered(), () => writeOut(out), true);
    } else writeOut(out);
    if (final) tap.rest(); // what came after the last event in its chunk, unfinished: dropped, not held
    const holding = tap.heldChars;
    // the router's share moves only while an event is held (never for a stream of whole events)
    let over = false;
    if (heldEvents && holding !== heldShare && !ended) {
      over = heldEvents.move(heldShare, holding);
      heldShare = holding;
    }
    if (holding > MAX_EVENT_CHARS || over) {
      // an event without end (or a body that is no event stream after all): not held without bound, nor
      // past its share while the router holds too much over every stream
      tooLong();
      return;
    }
    if (!whole) observed();
    blocks.clear();
  };
  const writeOut = (out: Buffer | string | Buffer[]): void => {
    if (!Array.isArray(out)) {
      if (out.length > 0) write(out);
      return;
    }
    for (const piece of out) write(piece);
  };
  const observed = (): void => {
    const { observe } = spec;
    const { count, segments } = blocks;
    if (!observe || count === 0) return;
    const at = lastData; // when the chunk came: its events were read together
    for (let i = 0; i < count; i++) {
      const { event } = segments[i] as SseSegment;
      if (event) observe.event(event, at);
    }
  };
  const end = (): void => {
    if (holding) {
      void holding.then(end);
      return;
    }
    if (!committed) commit(); // an empty 2xx body
    // a last event without its blank line (some llama.cpp builds): read as a whole one, its blank line added
    const last = tap?.closeTail();
    let tail = '';
    if (last && !final) {
      notes(last.event);
      if (sawEnd) {
        tail = textOf(last);
        if (last.event) spec.observe?.event(last.event, clock.now());
      }
    }
    if (tap && spec.resumable?.cut()) {
      if (tail !== '') write(tail);
      finish('upstream_broken'); // an error event the rewrite held back: the caller goes on elsewhere, or ends the stream
      return;
    }
    if (tap && !sawEnd) {
      // the engine ended its response mid-stream: the client's stream ends as a broken one (an
      // incomplete last event is not written: the client is on a boundary)
      endBroken('upstream_broken');
      return;
    }
    if (!tap) spec.observe?.bodyEnd();
    after(
      answered(),
      () => {
        if (tail !== '') write(tail);
        if (!res.writableEnded) res.end();
        finish('complete');
      },
      false,
    );
  };
  const broken = (): void => {
    if (holding) {
      void holding.then(broken);
      return;
    }
    if (!committed) control.settle({ kind: 'failed', reason: 'reset', detail: 'the connection closed before the first byte' });
    else if (tap && endOfStream && sawEnd && !spec.resumable?.cut())
      end(); // its last event came: the answer is whole
    else endBroken('upstream_broken');
  };
  /**
   * The router's grace period is over (its engine request ended with SHUTTING_DOWN): an answer whole by
   * now ends as it is; a stream still open ends as the router ends a stream it cannot finish (whole
   * events only were written: the client is on a boundary), with its error event; a body that is not a
   * stream is cut (it must not look complete). Nothing of it is the engine's doing.
   */
  const shutdown = (): void => {
    if (holding) {
      void holding.then(shutdown);
      return;
    }
    if (!committed) control.settle({ kind: 'failed', reason: 'shutdown', detail: 'the router is shutting down' });
    else if (ended) return;
    else if (wasAnswered || (tap && endOfStream && sawEnd && !spec.resumable?.cut())) end();
    else {
      if (!res.writableEnded && !res.destroyed) {
        if (tap) res.end((spec.errorEvent ?? streamErrorEvent)(shutdownStreamError()));
        else res.destroy();
      }
      finish('shutdown');
    }
  };
  const tooLong = (): void => {
    endBroken('upstream_broken');
    proxyRes.destroy();
  };
  return { data, end, broken, shutdown };
}

/** A block slot not in use (what a slot is emptied to: the arrays keep their storage and kind). */
const NO_SEGMENT: SseSegment = { raw: '', event: undefined };

/**
 * The whole blocks one chunk of a stream finished, with the text each is to be written as (`''`:
 * dropped). The arrays are the stream's, reused chunk after chunk: made per chunk they cost two
 * backing stores each time, and a stream is a chunk per token.
 */
export class ChunkBlocks {
  readonly segments: SseSegment[] = [];
  readonly owns: string[] = [];
  count = 0;
  /** The block written by itself ahead of the others (a response's first event), or -1: left out of {@link text} and {@link keptBytes}. */
  ahead = -1;

  add(segment: SseSegment, own: string): void {
    this.segments[this.count] = segment;
    this.owns[this.count] = own;
    this.count += 1;
  }

  /** Empties the slots used (nothing of the chunk is kept alive by them). */
  clear(): void {
    for (let i = 0; i < this.count; i++) {
      this.segments[i] = NO_SEGMENT;
      this.owns[i] = '';
    }
    this.count = 0;
    this.ahead = -1;
  }

  /** What the blocks are written as, joined (less the one written ahead). */
  text(): string {
    let text = '';
    for (let i = 0; i < this.count; i++) if (i !== this.ahead) text += this.owns[i] as string;
    return text;
  }

  /**
   * The bytes of `chunk` less the blocks dropped (and the one written ahead), as views of it, one per run of kept blocks: `chunk`
   * decodes to exactly the blocks' raw text, in order. Undefined when that text's UTF-8 is longer
   * than the chunk (bytes that are not UTF-8 were read as U+FFFD): the caller writes the text. A
   * U+FFFD never takes fewer bytes than what it stands for, so lengths that add up mean every
   * block's do, and each view starts and ends where its blocks did.
   */
  keptBytes(chunk: Buffer): Buffer[] | undefined {
    const pieces: Buffer[] = [];
    let at = 0;
    let from = 0;
    for (let i = 0; i < this.count; i++) {
      const size = Buffer.byteLength((this.segments[i] as SseSegment).raw, 'utf8');
      if (this.owns[i] === '' || i === this.ahead) {
        if (at > from) pieces.push(chunk.subarray(from, at));
        from = at + size;
      }
      at += size;
    }
    if (at !== chunk.length) return undefined;
    if (at > from) pieces.push(chunk.subarray(from, at));
    return pieces;
  }
}

/** The sink of an answer the relay turned down: its body is not wanted. */
const IGNORED: BodySink = { data: () => undefined, end: () => undefined, broken: () => undefined, shutdown: () => undefined };
