/**
 * Every inference API the router serves, direct to one zero-latency simulator and through modelgate,
 * at a fixed open-loop rate: p50/p99 latency (to first and last byte for streams), what the router
 * adds, errors (non-2xx and malformed answers, every answer checked) and the router's CPU per request.
 * Direct and modelgate alternate per API, in rounds, so background load hits both. The target: every
 * API adds no more than chat's added p99 + 1 ms (the table-driven routes cost what chat costs).
 * Writes bench/results/apis.{md,svg}.
 */
import os from 'node:os';
import { API_SPECS, loadApi, MAX_TOKENS, type ApiSample, type ApiSpec } from './lib/api-requests.js';
import { BENCH_KEY, startModelgate, startSim, usage, type ModelgateProc } from './lib/procs.js';
import { barChart, machine, othersCpu, percentile, SMOKE, source, stack, table, write } from './lib/report.js';

const MODEL = 'bench-model';
const OUTPUT_TOKENS = 16;
const RATE = SMOKE ? 40 : 200;
const WARMUP_MS = SMOKE ? 200 : 1_000;
const WINDOW_MS = SMOKE ? 500 : 8_000;
const ROUNDS = SMOKE ? 1 : 3;
/** What chat's added p99 may be exceeded by on any other API. */
const SLACK_MS = 1;
const CAPABILITIES = ['chat', 'completions', 'responses', 'messages', 'embeddings', 'rerank', 'score', 'tokenize', 'audio'];
const SIM_ARGS = ['--ttft-ms', '0', '--itl-ms', '0', '--prefill-ms-per-token', '0', '--output-min', `${OUTPUT_TOKENS}`, '--output-max', `${OUTPUT_TOKENS}`];

interface Side {
  ttfb: { p50: number; p99: number };
  ttlb: { p50: number; p99: number };
  requests: number;
  errors: number;
  /** A few distinct error messages, to show in the report. */
  examples: string[];
  maxSendLagMs: number;
}
interface Round {
  directFirst: boolean;
  direct: Side;
  modelgate: Side;
  /** The router's CPU in its window (warm-up included) per request finished in it. */
  cpuMsPerRequest: number;
  /** CPU other processes used during the pair (cores on average). */
  othersCores: number;
}
interface Row {
  spec: ApiSpec;
  rounds: Round[];
  cpuSeconds: number;
  requests: number;
}

function side(samples: ApiSample[], maxSendLagMs: number): Side {
  const ok = samples.filter((s) => !s.error);
  const q = (pick: (s: ApiSample) => number): { p50: number; p99: number } => {
    const sorted = ok.map(pick).sort((a, b) => a - b);
    return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
  };
  const examples = [...new Set(samples.flatMap((s) => (s.error ? [s.error] : [])))].slice(0, 3);
  return { ttfb: q((s) => s.ttfbMs), ttlb: q((s) => s.ttlbMs), requests: samples.length, errors: samples.length - ok.length, examples, maxSendLagMs };
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length === 0 ? NaN : sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a');
const loadavg = (): string =>
  os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ');

type Metric = 'ttfb' | 'ttlb';
const added = (r: Round, m: Metric, q: 'p50' | 'p99'): number => r.modelgate[m][q] - r.direct[m][q];
/** What the router adds, the median over the rounds. */
const addedMedian = (row: Row, m: Metric, q: 'p50' | 'p99'): number => median(row.rounds.map((r) => added(r, m, q)));
const errors = (row: Row): number => row.rounds.reduce((n, r) => n + r.direct.errors + r.modelgate.errors, 0);
const cpuPerRequest = (row: Row): number => (row.requests ? (row.cpuSeconds * 1000) / row.requests : NaN);

/** The key as modelgate takes it on this API; direct requests carry none (the simulator needs none). */
const routerHeaders = (spec: ApiSpec): Record<string, string> => (spec.auth === 'x-api-key' ? { 'x-api-key': BENCH_KEY } : { authorization: `Bearer ${BENCH_KEY}` });

async function measure(spec: ApiSpec, simUrl: string, mg: ModelgateProc, row: Row, directFirst: boolean): Promise<void> {
  const others = othersCpu();
  const direct = async (): Promise<Side> => {
    const r = await loadApi({ api: spec.id, model: MODEL, url: simUrl, headers: {}, rate: RATE, warmupMs: WARMUP_MS, durationMs: WINDOW_MS });
    return side(r.samples, r.maxSendLagMs);
  };
  let cpuMsPerRequest = NaN;
  const routed = async (): Promise<Side> => {
    const cpu0 = usage(mg.pid).cpuSeconds;
    const r = await loadApi({ api: spec.id, model: MODEL, url: mg.url, headers: routerHeaders(spec), rate: RATE, warmupMs: WARMUP_MS, durationMs: WINDOW_MS });
    const cpu = usage(mg.pid).cpuSeconds - cpu0;
    row.cpuSeconds += cpu;
    row.requests += r.finished;
    cpuMsPerRequest = r.finished ? (cpu * 1000) / r.finished : NaN;
    return side(r.samples, r.maxSendLagMs);
  };
  const first = directFirst ? await direct() : await routed();
  const second = directFirst ? await routed() : await direct();
  row.rounds.push({ directFirst, direct: directFirst ? first : second, modelgate: directFirst ? second : first, cpuMsPerRequest, othersCores: others() });
}

function apiTable(row: Row): string {
  const stream = row.spec.stream;
  const pair = (s: Side, m: Metric): string[] => [ms(s[m].p50), ms(s[m].p99)];
  const header = [
    'round',
    'first',
    ...(stream ? ['direct TTFB p50', 'direct TTFB p99', 'modelgate TTFB p50', 'modelgate TTFB p99'] : []),
    ...(stream ? ['direct TTLB p50', 'direct TTLB p99', 'modelgate TTLB p50', 'modelgate TTLB p99'] : ['direct p50', 'direct p99', 'modelgate p50', 'modelgate p99']),
    ...(stream ? ['added TTFB p50', 'added TTFB p99', 'added TTLB p50', 'added TTLB p99'] : ['added p50', 'added p99']),
    'router CPU ms/req',
    "others' CPU (cores)",
    'errors (direct / modelgate)',
  ];
  const metrics: Metric[] = stream ? ['ttfb', 'ttlb'] : ['ttlb'];
  const rows = row.rounds.map((r, i) => [
    String(i + 1),
    r.directFirst ? 'direct' : 'modelgate',
    ...metrics.flatMap((m) => [...pair(r.direct, m), ...pair(r.modelgate, m)]),
    ...metrics.flatMap((m) => [ms(added(r, m, 'p50')), ms(added(r, m, 'p99'))]),
    r.cpuMsPerRequest.toFixed(3),
    r.othersCores.toFixed(2),
    `${r.direct.errors} / ${r.modelgate.errors}`,
  ]);
  const blanks = (n: number): string[] => Array<string>(n).fill('');
  rows.push([
    'median (CPU, errors: all rounds)',
    '',
    ...blanks(metrics.length * 4),
    ...metrics.flatMap((m) => [ms(addedMedian(row, m, 'p50')), ms(addedMedian(row, m, 'p99'))]),
    cpuPerRequest(row).toFixed(3),
    '',
    String(errors(row)),
  ]);
  const examples = [...new Set(row.rounds.flatMap((r) => [...r.direct.examples.map((e) => `direct: ${e}`), ...r.modelgate.examples.map((e) => `modelgate: ${e}`)]))].slice(0, 4);
  return [table(header, rows), ...(examples.length ? ['', 'Errors seen (first few):', '', ...examples.map((e) => `- ${e.replace(/\|/g, '\\|')}`)] : [])].join('\n');
}

async function main(): Promise<void> {
  const loadBefore = loadavg();
  const sim = await startSim('upstream', ['--model', MODEL, ...SIM_ARGS, '--max-num-seqs', '1000', '--max-waiting', '100000']);
  const rows: Row[] = API_SPECS.map((spec) => ({ spec, rounds: [], cpuSeconds: 0, requests: 0 }));
  let mg: ModelgateProc | undefined;
  try {
    mg = await startModelgate([sim.url], MODEL, { capabilities: CAPABILITIES });
    // the router's code paths for every API warmed up (JIT) before anything is measured
    console.error(`apis: warming modelgate up on ${API_SPECS.length} APIs…`);
    for (const spec of API_SPECS) {
      await loadApi({ api: spec.id, model: MODEL, url: mg.url, headers: routerHeaders(spec), rate: RATE, warmupMs: 2 * WARMUP_MS, durationMs: 0 });
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, row] of rows.entries()) {
        console.error(`apis: round ${round + 1}/${ROUNDS}, ${row.spec.id}…`);
        await measure(row.spec, sim.url, mg, row, (round + i) % 2 === 0);
      }
    }
  } finally {
    await mg?.stop();
    await sim.stop();
  }
  const loadAfter = loadavg();

  const chat = rows[0]!;
  const bound = (m: Metric): number => addedMedian(chat, m, 'p99') + SLACK_MS;
  const verdicts = rows.slice(1).map((row) => {
    const metrics: Metric[] = row.spec.stream ? ['ttfb', 'ttlb'] : ['ttlb'];
    const ok = metrics.every((m) => addedMedian(row, m, 'p99') <= bound(m));
    return { row, ok, measured: metrics.map((m) => `${m.toUpperCase()} ${ms(addedMedian(row, m, 'p99'))} ms (bound ${ms(bound(m))})`).join('; ') };
  });
  const totalErrors = rows.reduce((n, r) => n + errors(r), 0);
  const maxLag = Math.max(...rows.flatMap((r) => r.rounds.flatMap((x) => [x.direct.maxSendLagMs, x.modelgate.maxSendLagMs])));
  const check = (ok: boolean): string => (ok ? 'met' : '**missed**');

  const lines: string[] = [
    '# Every API: what the router adds',
    '',
    `Each inference API the router serves, sent to one zero-latency simulator (\`modelgate sim ${SIM_ARGS.join(' ')}\`: every generation answers`,
    `${OUTPUT_TOKENS} tokens and stops, \`max_tokens\` ${MAX_TOKENS} never reached) directly and through one modelgate process, open loop at ${RATE} requests/s`,
    `(evenly spaced), latency measured from the scheduled send time by a separate load-generator process (\`bench/lib/api-requests.ts\`, keep-alive`,
    `connections). Per API and round: a ${WINDOW_MS / 1000} s window direct and one through modelgate, back to back (each after ${WARMUP_MS / 1000} s of warm-up), the`,
    `order alternating between APIs and rounds, ${ROUNDS} round(s); what the router adds is the median over the rounds. Every answer is checked:`,
    "a non-2xx status, a transport error or a malformed answer (a stream not ended by its API's last event — `[DONE]` for chat and completions,",
    "`response.completed` for responses, `message_stop` for messages — or a JSON answer without its API's shape) is an error and is left out of",
    `the latencies. Router CPU: \`/proc/PID/stat\` over each modelgate window, warm-up included, per request finished in it.${SMOKE ? ' **Smoke run: numbers are meaningless.**' : ''}`,
    '',
    `modelgate is started as users start it, \`${mg?.started ?? 'n/a'}\` (running as \`${mg?.running ?? 'n/a'}\`), access log on at \`info\`, to a file;`,
    `one pool with \`capabilities: [${CAPABILITIES.join(', ')}]\` and one simulator, one deployment, one key (\`Authorization: Bearer\`, on`,
    '`/v1/messages` `x-api-key`). Direct requests carry no key (the simulator needs none).',
    ...(mg?.nodeOptions ? ['', `**Diagnostic run: the router had \`NODE_OPTIONS=${mg.nodeOptions}\`: not the product as it ships.**`] : []),
    '',
    ...machine(),
    source(),
    `- rate: ${RATE} requests/s per API and target; load average (1 / 5 / 15 min) before the run: ${loadBefore}; after: ${loadAfter}`,
    `- largest send lag of the load generator in any window: ${ms(maxLag)} ms`,
    '',
    '## Requests',
    '',
    table(
      ['API', 'path', 'request', 'checked'],
      rows.map(({ spec }) => [spec.id, `\`${spec.path}\``, spec.what, spec.stream ? 'ends with its last event' : 'JSON shape']),
    ),
    '',
    '## Summary',
    '',
    'ms, to the last byte (TTFB: to the first byte, streams only); added = modelgate minus direct, the median over the rounds; errors over',
    'every round, direct and through modelgate.',
    '',
    table(
      ['API', 'direct p50', 'direct p99', 'added p50', 'added p99', 'added TTFB p50', 'added TTFB p99', 'router CPU ms/req', 'errors'],
      rows.map((row) => [
        row.spec.id,
        ms(median(row.rounds.map((r) => r.direct.ttlb.p50))),
        ms(median(row.rounds.map((r) => r.direct.ttlb.p99))),
        ms(addedMedian(row, 'ttlb', 'p50')),
        ms(addedMedian(row, 'ttlb', 'p99')),
        row.spec.stream ? ms(addedMedian(row, 'ttfb', 'p50')) : '—',
        row.spec.stream ? ms(addedMedian(row, 'ttfb', 'p99')) : '—',
        cpuPerRequest(row).toFixed(3),
        errors(row),
      ]),
    ),
    '',
    '## Targets',
    '',
    `"Every API adds no more than chat's added p99 + ${SLACK_MS} ms": per API, the added p99 to the last byte (median of the rounds) at most streamed`,
    `chat's + ${SLACK_MS} ms, and for a stream also the added p99 to the first byte at most chat's + ${SLACK_MS} ms.`,
    '',
    table(
      ['target', 'measured', 'verdict'],
      [
        ...verdicts.map((v) => [`${v.row.spec.id}: added p99 ≤ chat's + ${SLACK_MS} ms`, v.measured, check(v.ok)]),
        [`every API adds no more than chat's added p99 + ${SLACK_MS} ms`, `${verdicts.filter((v) => v.ok).length} of ${verdicts.length} APIs`, check(verdicts.every((v) => v.ok))],
        ['errors: 0 on every API, direct and through modelgate', String(totalErrors), check(totalErrors === 0)],
      ],
    ),
    '',
    ...rows.flatMap((row) => [`## ${row.spec.id} (\`POST ${row.spec.path}\`, ${row.spec.what}; ms)`, '', apiTable(row), '']),
  ];

  const svg = stack([
    barChart(
      'Added latency over direct, median of rounds (ms, lower is better)',
      'ms',
      rows.map((row) => ({
        label: row.spec.short,
        values: [
          { name: 'added p50 (to last byte)', value: Math.max(0, addedMedian(row, 'ttlb', 'p50')) },
          { name: 'added p99 (to last byte)', value: Math.max(0, addedMedian(row, 'ttlb', 'p99')) },
        ],
      })),
    ),
    barChart(
      'modelgate CPU per request (ms)',
      'ms',
      rows.map((row) => ({ label: row.spec.short, values: [{ name: 'router CPU ms/req', value: Math.max(0, cpuPerRequest(row)) }] })),
    ),
  ]);
  const out = write('apis', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`apis: wrote ${out.md} and ${out.svg}`);
}

await main();
