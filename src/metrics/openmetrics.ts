/**
 * The registry in the OpenMetrics text format (what Prometheus asks for first), with the histograms'
 * exemplars; `/metrics` serves it to a scraper whose `Accept` prefers it and the classic text format
 * to every other.
 *
 * prom-client renders OpenMetrics only from a registry typed so, and its `metrics()` then renames every
 * registered counter in place (`modelgate_requests_total` becomes `modelgate_requests`, for the
 * `# TYPE` line) for good: a classic scrape after an OpenMetrics one would lose the `_total` of every
 * counter. So the one classic registry stays as it is, and this module renders the OpenMetrics text
 * from its documented `getMetricsAsJSON()`, which carries each histogram bucket's exemplar.
 */
import type { Registry } from 'prom-client';

export const OPENMETRICS_CONTENT_TYPE = 'application/openmetrics-text; version=1.0.0; charset=utf-8';

/**
 * Whether a scraper's `Accept` header prefers OpenMetrics to the classic text format: an
 * `application/openmetrics-text` entry with a q-value above 0 and not below that of `text/plain`
 * (Prometheus sends `application/openmetrics-text;version=1.0.0,…,text/plain;version=0.0.4;q=0.5,…`).
 */
export function prefersOpenMetrics(accept: string | undefined): boolean {
  if (accept === undefined || !accept.includes('openmetrics')) return false;
  let openMetrics = 0;
  let text = 0;
  for (const entry of accept.split(',')) {
    const [type = '', ...params] = entry.split(';').map((p) => p.trim().toLowerCase());
    const qParam = params.find((p) => p.startsWith('q='));
    const q = qParam === undefined ? 1 : Number(qParam.slice(2));
    if (!Number.isFinite(q)) continue;
    if (type === 'application/openmetrics-text') openMetrics = Math.max(openMetrics, q);
    else if (type === 'text/plain') text = Math.max(text, q);
  }
  return openMetrics > 0 && openMetrics >= text;
}

interface Exemplar {
  labelSet: Record<string, string | number>;
  value: number;
  timestamp?: number;
}

interface Sample {
  value: number;
  labels: Record<string, string | number | undefined>;
  metricName?: string;
  exemplar?: Exemplar | null;
}

const escapeLabel = (value: string): string => value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

function number(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return String(value);
}

function labels(set: Record<string, string | number | undefined>): string {
  const parts: string[] = [];
  for (const [name, value] of Object.entries(set)) if (value !== undefined) parts.push(`${name}="${escapeLabel(String(value))}"`);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

/** The sample's exemplar, when it has one: ` # {trace_id="…"} value timestamp`. */
function exemplarOf(sample: Sample): string {
  const exemplar = sample.exemplar;
  if (!exemplar || Object.keys(exemplar.labelSet).length === 0) return '';
  const timestamp = exemplar.timestamp === undefined ? '' : ` ${exemplar.timestamp}`;
  return ` # ${labels(exemplar.labelSet) || '{}'} ${number(exemplar.value)}${timestamp}`;
}

/** Renders every metric of `registry` in the OpenMetrics text format, ending with `# EOF`. */
export async function openMetricsText(registry: Registry): Promise<string> {
  const families = await registry.getMetricsAsJSON();
  const lines: string[] = [];
  for (const family of families) {
    // prom-client's types declare a numeric enum; at run time the type is its name
    const kind = String(family.type);
    const counter = kind === 'counter';
    // OpenMetrics names a counter's family without `_total`; its samples keep it
    const name = counter ? family.name.replace(/_total$/, '') : family.name;
    lines.push(`# HELP ${name} ${escapeLabel(family.help)}`, `# TYPE ${name} ${kind === 'untyped' ? 'unknown' : kind}`);
    for (const sample of family.values as Sample[]) {
      let sampleName = sample.metricName ?? family.name;
      if (counter && !sampleName.endsWith('_total')) sampleName += '_total';
      lines.push(`${sampleName}${labels(sample.labels)} ${number(sample.value)}${exemplarOf(sample)}`);
    }
  }
  lines.push('# EOF');
  return `${lines.join('\n')}\n`;
}
