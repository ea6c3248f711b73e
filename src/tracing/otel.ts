/**
 * Request traces with OpenTelemetry (off by default; `tracing.enabled`). One span per inference
 * request with the GenAI semantic conventions' attributes, children for admission, scheduling and
 * each upstream attempt, an event at the first token, and W3C trace context both ways: a client's
 * `traceparent` makes the request span its child, and each attempt sends the engine its own (vLLM
 * reads it). Spans go to an OTLP/HTTP collector in batches; the exporter reads the standard
 * `OTEL_EXPORTER_OTLP_*` variables, the batch processor is given the `OTEL_BSP_*` ones (this SDK's
 * processor reads none itself: {@link batchSettings}), and `OTEL_SERVICE_NAME` names the service. This module is loaded only when tracing is on, so a router without it never loads the SDK.
 * Every span names its parent explicitly: no context manager, no async hooks on the request path.
 *
 * No prompt or completion text is ever put on a span: only model names, token counts, endpoints,
 * outcomes and timings.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { hostname } from 'node:os';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type Span as SdkSpan,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { type AttemptSpan, type Endpoint, type RequestTrace, type TraceSpan, type Tracing } from '../core/types.js';

export interface TracingSettings {
  /** The OTLP/HTTP traces URL; absent: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, or localhost:4318. */
  endpoint?: string;
  /** The share of traces kept when the client did not decide (a sampled parent is always kept). */
  sampleRatio: number;
  /** The service name when OTEL_SERVICE_NAME is not set. */
  serviceName: string;
}

const propagator = new W3CTraceContextPropagator();
const headerGetter = {
  keys: (carrier: Readonly<Record<string, string | string[] | undefined>>): string[] => Object.keys(carrier),
  get: (carrier: Readonly<Record<string, string | string[] | undefined>>, key: string): string | string[] | undefined => carrier[key],
};
const recordSetter = { set: (carrier: Record<string, string>, key: string, value: string): void => void (carrier[key] = value) };

/**
 * A trace's clock: epoch milliseconds with their fraction, anchored to the wall clock once, when the
 * trace starts, and moved by the monotonic clock from there. Every span of the request takes its times
 * from it, so they nest and keep their fraction: given a start time, the SDK would take a span's end and
 * events from \`Date.now()\` (whole milliseconds), and a time of \`performance.now()\`'s with an offset of
 * its own per span (up to a millisecond apart between spans); a time in epoch milliseconds it takes as
 * it is (\`TimeInput\`). Anchored per trace, not to \`performance.timeOrigin\` once: the monotonic clock
 * drifts from the wall clock over a long uptime, and the engines' spans in the same trace are on the wall clock.
 */
type TraceClock = () => number;
function traceClock(): TraceClock {
  const origin = Date.now() - performance.now();
  return () => origin + performance.now();
}

function attributes(values: Record<string, string | number | boolean | undefined>): Attributes {
  const out: Attributes = {};
  for (const [key, value] of Object.entries(values)) if (value !== undefined) out[key] = value;
  return out;
}

class SpanHandle implements TraceSpan {
  private ended = false;
  constructor(
    protected readonly span: Span,
    private readonly now: TraceClock,
  ) {}

  set(values: Record<string, string | number | boolean | undefined>): void {
    this.span.setAttributes(attributes(values));
  }

  end(error?: string): void {
    if (this.ended) return;
    this.ended = true;
    if (error !== undefined) this.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    this.span.end(this.now());
  }
}

class AttemptHandle extends SpanHandle implements AttemptSpan {
  readonly traceparent: string;
  readonly tracestate: string | undefined;
  constructor(span: Span, now: TraceClock) {
    super(span, now);
    const carrier: Record<string, string> = {};
    propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, recordSetter);
    this.traceparent = carrier.traceparent ?? '';
    this.tracestate = carrier.tracestate;
  }
}

class OtelRequestTrace implements RequestTrace {
  private readonly ctx: Context;
  private firstTokenSeen = false;
  private ended = false;

  constructor(
    private readonly tracer: Tracer,
    private readonly span: Span,
    private readonly now: TraceClock,
  ) {
    this.ctx = trace.setSpan(ROOT_CONTEXT, span);
  }

  get traceId(): string {
    return this.span.spanContext().traceId;
  }

  get sampled(): boolean {
    return (this.span.spanContext().traceFlags & TraceFlags.SAMPLED) !== 0;
  }

  child(name: string): TraceSpan {
    return new SpanHandle(this.tracer.startSpan(name, { kind: SpanKind.INTERNAL, startTime: this.now() }, this.ctx), this.now);
  }

  attempt(endpoint: Endpoint): AttemptSpan {
    const port = Number(endpoint.url.port) || (endpoint.url.protocol === 'https:' ? 443 : 80);
    const span = this.tracer.startSpan(
      'modelgate.attempt',
      { kind: SpanKind.CLIENT, startTime: this.now(), attributes: { 'http.request.method': 'POST', 'server.address': endpoint.url.hostname, 'server.port': port, 'modelgate.endpoint': endpoint.id } },
      this.ctx,
    );
    return new AttemptHandle(span, this.now);
  }

  rename(name: string): void {
    if (!this.ended) this.span.updateName(name);
  }

  firstToken(): void {
    if (this.firstTokenSeen || this.ended) return;
    this.firstTokenSeen = true;
    this.span.addEvent('gen_ai.first_token', this.now());
  }

  end(values: Record<string, string | number | boolean | undefined>, error?: string): void {
    if (this.ended) return;
    this.ended = true;
    this.span.setAttributes(attributes(values));
    if (error !== undefined) this.span.setStatus({ code: SpanStatusCode.ERROR, message: error });
    this.span.end(this.now());
  }
}

/** What becomes of the spans: how each batch fared at the collector (`ok`, how many spans, why it failed), and spans dropped for a full queue. */
export interface ExportWatch {
  exported(ok: boolean, spans: number, error?: Error): void;
  /** Spans the batch processor dropped because its queue (`OTEL_BSP_MAX_QUEUE_SIZE`) was full: the collector is down or slower than the spans come. */
  queueFull(spans: number): void;
}

/** The batch processor's settings (its documented options), from the standard `OTEL_BSP_*` variables; an unset or invalid one keeps the specification's default. */
export interface BatchSettings {
  scheduledDelayMillis: number;
  exportTimeoutMillis: number;
  maxQueueSize: number;
  maxExportBatchSize: number;
}

export function batchSettings(env: Readonly<Record<string, string | undefined>>): BatchSettings {
  const read = (name: string, fallback: number): number => {
    const raw = env[name]?.trim();
    const value = raw ? Number(raw) : NaN;
    return Number.isSafeInteger(value) && value > 0 ? value : fallback;
  };
  const maxQueueSize = read('OTEL_BSP_MAX_QUEUE_SIZE', 2048);
  return {
    scheduledDelayMillis: read('OTEL_BSP_SCHEDULE_DELAY', 5000),
    exportTimeoutMillis: read('OTEL_BSP_EXPORT_TIMEOUT', 30_000),
    maxQueueSize,
    // a batch is never larger than the queue (the processor would say so and cut it)
    maxExportBatchSize: Math.min(read('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512), maxQueueSize),
  };
}

/**
 * In front of the batch processor (the SDK's documented SpanProcessor interface): counts the sampled
 * spans it holds, as its queue does (each ended sampled span is queued, each batch handed to the
 * exporter leaves it), so the spans it drops for a full queue are known: the processor only counts
 * them for a debug line. The exporter says when a batch leaves (`taken`), synchronously with the
 * processor's taking it, as the router's resource has no attributes still to come.
 */
class QueueWatch implements SpanProcessor {
  private held = 0;
  private closed = false;
  constructor(
    private readonly inner: SpanProcessor,
    private readonly capacity: number,
    private readonly full: (spans: number) => void,
  ) {}

  onStart(span: SdkSpan, context: Context): void {
    this.inner.onStart(span, context);
  }

  onEnd(span: ReadableSpan): void {
    if (!this.closed && (span.spanContext().traceFlags & TraceFlags.SAMPLED) !== 0) {
      if (this.held >= this.capacity) this.full(1);
      else this.held += 1;
    }
    this.inner.onEnd(span);
  }

  taken(spans: number): void {
    this.held = Math.max(0, this.held - spans);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    this.closed = true;
    return this.inner.shutdown();
  }
}

/** The methods HTTP's semantic conventions name; any other is `_OTHER`, with the method as sent beside it. */
const KNOWN_METHODS = new Set(['CONNECT', 'DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'TRACE']);

/** `http.request.method` as the conventions say it (and `http.request.method_original` for one they do not know). */
export function methodAttributes(method: string): Attributes {
  return KNOWN_METHODS.has(method) ? { 'http.request.method': method } : { 'http.request.method': '_OTHER', 'http.request.method_original': method };
}

/** The OTLP exporter, its results heard (through the SDK's documented SpanExporter interface): a collector that refuses is said, not silent. */
class WatchedExporter implements SpanExporter {
  /** Hears each batch as it leaves the processor's queue. */
  taken: (spans: number) => void = () => undefined;

  constructor(
    private readonly inner: SpanExporter,
    private readonly watch: ExportWatch,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.taken(spans.length);
    this.inner.export(spans, (result) => {
      this.watch.exported(result.code === ExportResultCode.SUCCESS, spans.length, result.error);
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

export function createTracing(settings: TracingSettings, onExport?: ExportWatch, env: Readonly<Record<string, string | undefined>> = process.env): Tracing {
  const otlp = new OTLPTraceExporter(settings.endpoint ? { url: settings.endpoint } : {});
  const batch = batchSettings(env);
  let processor: SpanProcessor;
  if (onExport) {
    const exporter = new WatchedExporter(otlp, onExport);
    const queue = new QueueWatch(new BatchSpanProcessor({ exporter, ...batch }), batch.maxQueueSize, (spans) => onExport.queueFull(spans));
    exporter.taken = (spans) => queue.taken(spans);
    processor = queue;
  } else processor = new BatchSpanProcessor({ exporter: otlp, ...batch });
  const provider = new TracerProvider({
    // the instance: the pod's name in Kubernetes (its HOSTNAME), so one router's spans can be told from another's
    resource: resourceFromAttributes({ 'service.name': process.env.OTEL_SERVICE_NAME ?? settings.serviceName, 'service.instance.id': process.env.HOSTNAME ?? hostname() }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.sampleRatio) }),
    spanProcessors: [processor],
  });
  const tracer = provider.getTracer('modelgate');
  return {
    start(name, headers, agoMs, method) {
      const parent = propagator.extract(ROOT_CONTEXT, headers, headerGetter);
      const now = traceClock();
      const span = tracer.startSpan(name, { kind: SpanKind.SERVER, startTime: now() - agoMs, ...(method ? { attributes: methodAttributes(method) } : {}) }, parent);
      return new OtelRequestTrace(tracer, span, now);
    },
    shutdown: () => provider.shutdown(),
  };
}
