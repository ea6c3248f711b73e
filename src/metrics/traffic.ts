/**
 * What clients got: requests by route and status, durations, and for streams the time to first
 * token, inter-token gaps, token counts and how each response ended. Buckets span an embedding's
 * few milliseconds to a long generation's minutes.
 */
import { Histogram } from './prom.js';
import type { HistogramConfiguration, Registry } from 'prom-client';
import { HotCounter } from './hot-counter.js';
import { HotHistogram } from './hot-histogram.js';
import { type ResponseEnd, type Route } from './labels.js';

/**
 * Seconds; from a few ms (an embedding) to 30 minutes, the default `resilience.timeouts.totalMs`: a
 * request can last that long, and one past the last bucket only lands in +Inf.
 */
export const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800];
/**
 * Time to first token: 10 ms (a cached prefix) to 180 s, the default `resilience.timeouts.firstByteMs`
 * (a long prompt on a busy engine may wait that long for its first token).
 */
export const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 30, 60, 120, 180];
/**
 * Inter-token latency: 1 ms (a small model on a fast GPU emits a token every few ms) upward; a long
 * gap means a stall.
 */
export const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 10, 60];

export interface TrafficMetrics {
  requests: HotCounter<'route' | 'deployment' | 'pool' | 'code', [route: Route, deployment: string, pool: string, code: number]>;
  duration: Histogram<'route' | 'deployment' | 'pool'>;
  ttft: Histogram<'deployment' | 'pool'>;
  itl: HotHistogram<'deployment' | 'pool'>;
  promptTokens: HotCounter<'deployment' | 'pool', [deployment: string, pool: string]>;
  completionTokens: HotCounter<'deployment' | 'pool', [deployment: string, pool: string]>;
  streamEnds: HotCounter<'deployment' | 'pool' | 'end', [deployment: string, pool: string, end: ResponseEnd]>;
}

/** `exemplars`: the duration and TTFT histograms keep each bucket's last exemplar (a trace id). */
export function trafficMetrics(registers: Registry[], exemplars = false): TrafficMetrics {
  return {
    requests: new HotCounter({
      name: 'modelgate_requests_total',
      help: 'Requests answered, by route, deployment, pool and HTTP status code.',
      labelNames: ['route', 'deployment', 'pool', 'code'],
      registers,
    }),
    duration: latencyHistogram(
      {
        name: 'modelgate_request_duration_seconds',
        help: 'Time from the request arriving to its response (or stream) ending.',
        labelNames: ['route', 'deployment', 'pool'],
        buckets: DURATION_BUCKETS,
      },
      registers,
      exemplars,
    ),
    ttft: latencyHistogram(
      {
        name: 'modelgate_time_to_first_token_seconds',
        help: 'Streams: from the request sent to the engine to the first event carrying content.',
        labelNames: ['deployment', 'pool'],
        buckets: TTFT_BUCKETS,
      },
      registers,
      exemplars,
    ),
    itl: new HotHistogram({
      name: 'modelgate_inter_token_latency_seconds',
      help: 'Streams: time between consecutive content events.',
      labelNames: ['deployment', 'pool'],
      buckets: ITL_BUCKETS,
      registers,
    }),
    promptTokens: new HotCounter({
      name: 'modelgate_prompt_tokens_total',
      help: 'Prompt tokens, from the usage the engines report (a stream that ended without usage adds none).',
      labelNames: ['deployment', 'pool'],
      registers,
    }),
    completionTokens: new HotCounter({
      name: 'modelgate_completion_tokens_total',
      help: 'Completion tokens, from the usage the engines report; for a stream that ended without usage (client gone, stream broken), estimated as one per content event delivered.',
      labelNames: ['deployment', 'pool'],
      registers,
    }),
    streamEnds: new HotCounter({
      name: 'modelgate_response_ends_total',
      help: 'How responses that had started ended: complete, client_gone, client_stalled (the client accepted no bytes for server.clientStallTimeoutMs), upstream_broken, idle_timeout, deadline, engine_error (the engine ended its stream with its own error event), shutdown (a stream still open when the shutdown grace period of the router ended, ended with its error event).',
      labelNames: ['deployment', 'pool', 'end'],
      registers,
    }),
  };
}

/**
 * A histogram that keeps each bucket's last exemplar when `exemplars`. prom-client refuses to build
 * one into a registry typed for the classic text format (which leaves exemplars out), so it is built
 * unregistered and then registered: the classic text is unchanged, and the OpenMetrics text
 * (`openmetrics.ts`) writes the exemplars.
 */
function latencyHistogram<L extends string>(config: HistogramConfiguration<L>, registers: Registry[], exemplars: boolean): Histogram<L> {
  if (!exemplars) return new Histogram({ ...config, registers });
  const histogram = new Histogram({ ...config, registers: [], enableExemplars: true });
  for (const registry of registers) registry.registerMetric(histogram);
  return histogram;
}
