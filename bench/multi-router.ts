/**
 * Several routers, one fleet: balance.ts's four simulator replicas (two of them twice as slow) and its
 * request mix (no shared prefix), open-loop Poisson arrivals at 85% of the fleet's measured capacity.
 * Cells, on the same arrivals and request lengths: (a) one modelgate process, default profile; (b) two
 * modelgate processes, default profile (engine-aware: each sees the other's traffic in the replicas'
 * /metrics), arrivals alternating between them; (c) two processes with only the `outstanding` scorer
 * (each sees its own requests only); (d) as (b) with `engineMetrics.intervalMs: 250`. Writes
 * bench/results/multi-router.{md,svg}.
 */
import { FAST, fleetCapacity, MAX_NUM_SEQS, mixBodies, REPLICAS, SLOW, startFleet } from './lib/fleet.js';
import { load } from './lib/loadgen.js';
import { pollQueues, scrape, series, type QueueStats } from './lib/metrics.js';
import { BENCH_KEY, startModelgate, type Proc } from './lib/procs.js';
import { barChart, machine, SMOKE, source, stack, summarize, table, write, type Summary } from './lib/report.js';

const MODEL = 'bench-model';
const LOAD = 0.85;
const WARMUP_MS = SMOKE ? 300 : 5_000;
const WINDOW_MS = SMOKE ? 1_000 : 40_000;
const CALIBRATE_MS = SMOKE ? 500 : 6_000;
const AUTH = { authorization: `Bearer ${BENCH_KEY}` };

interface Setup {
  key: string;
  name: string;
  /** Chart legend. */
  short: string;
  routers: number;
  pool: object;
}

const SETUPS: Setup[] = [
  { key: 'a', name: '(a) one modelgate, default profile', short: '(a) one router', routers: 1, pool: {} },
  { key: 'b', name: '(b) two modelgate, default profile', short: '(b) two, default', routers: 2, pool: {} },
  { key: 'c', name: '(c) two modelgate, `scorers: [outstanding]`', short: '(c) two, local only', routers: 2, pool: { routing: { scorers: [{ name: 'outstanding' }] } } },
  { key: 'd', name: '(d) as (b), `engineMetrics.intervalMs: 250`', short: '(d) two, 250 ms', routers: 2, pool: { routing: { engineMetrics: { intervalMs: 250 } } } },
];

interface Cell {
  setup: Setup;
  summary: Summary;
  share: number[];
  /** Per router process: its share of requests to each replica. */
  perRouter: number[][];
  queues: QueueStats;
  /** Successful engine scrapes per router process per second over the run. */
  scrapesPerSecond: number;
  maxSendLagMs: number;
}

async function runCell(setup: Setup, sims: Proc[], rate: number, tag: string): Promise<Cell> {
  const routers: Array<Proc & { adminUrl: string }> = [];
  try {
    for (let i = 0; i < setup.routers; i++)
      routers.push(
        await startModelgate(
          sims.map((s) => s.url),
          MODEL,
          setup.pool,
        ),
      );
    const started = performance.now();
    let poller: ReturnType<typeof pollQueues> | undefined;
    const mark = setTimeout(
      () =>
        (poller = pollQueues(
          sims.map((s) => s.url),
          MAX_NUM_SEQS,
          250,
        )),
      WARMUP_MS,
    );
    const result = await load({
      url: routers.map((r) => `${r.url}/v1/chat/completions`),
      headers: AUTH,
      bodies: mixBodies(MODEL, tag, 4000),
      mode: 'open',
      rate,
      arrivals: 'poisson',
      seed: Math.round(LOAD * 1000),
      warmupMs: WARMUP_MS,
      durationMs: WINDOW_MS,
      drainMs: 120_000,
    });
    clearTimeout(mark);
    const queues = poller ? await poller.stop() : { polls: 0, meanWaiting: [], meanRunning: [], misplaced: NaN };
    const seconds = (performance.now() - started) / 1000;
    let scrapes = 0;
    for (const r of routers)
      scrapes += series(await scrape(r.adminUrl), 'modelgate_engine_scrapes_total')
        .filter((s) => s.labels.result === 'ok')
        .reduce((n, s) => n + s.value, 0);
    const ok = result.samples.filter((s) => s.status === 200 && s.ttfbMs >= 0);
    const names = sims.map((s) => s.name);
    const shareOf = (samples: typeof ok): number[] => names.map((n) => samples.filter((s) => s.replica === n).length / Math.max(1, samples.length));
    return {
      setup,
      summary: summarize(result.samples, result.windowMs),
      share: shareOf(ok),
      perRouter: routers.map((_, i) => shareOf(ok.filter((s) => s.target === i))),
      queues,
      scrapesPerSecond: scrapes / routers.length / seconds,
      maxSendLagMs: result.maxSendLagMs,
    };
  } finally {
    await Promise.all(routers.map((r) => r.stop()));
  }
}

async function main(): Promise<void> {
  const sims = await startFleet(MODEL);
  const cells: Cell[] = [];
  try {
    const { perReplica, fleet } = await fleetCapacity(sims, MODEL, WARMUP_MS / 2, CALIBRATE_MS, 'multi-router');
    for (const [i, setup] of SETUPS.entries()) {
      const cell = await runCell(setup, sims, LOAD * fleet, `run${i}`);
      cells.push(cell);
      console.error(`multi-router: ${setup.name}: TTFT p50 ${cell.summary.ttfb.p50.toFixed(0)} ms p99 ${cell.summary.ttfb.p99.toFixed(0)} ms`);
    }
    report(cells, perReplica, fleet);
  } finally {
    await Promise.all(sims.map((s) => s.stop()));
  }
}

function report(cells: Cell[], perReplica: Array<{ name: string; rps: number }>, fleet: number): void {
  const f = (v: number): string => (Number.isFinite(v) ? v.toFixed(v < 10 ? 1 : 0) : 'n/a');
  const pct = (v: number): string => (Number.isFinite(v) ? `${Math.round(v * 100)}%` : 'n/a');
  const byKey = (key: string): Cell | undefined => cells.find((c) => c.setup.key === key);
  const lines: string[] = [
    '# Several routers in front of one fleet',
    '',
    `The balance harness's fleet — four simulator replicas (${MAX_NUM_SEQS} sequences per batch), two fast (\`${FAST.join(' ')}\`) and`,
    `two twice as slow (\`${SLOW.join(' ')}\`) — and its request mix (streamed, log-normal prompt median 256 tokens and output`,
    `median 48 tokens, no shared prefix), open-loop Poisson arrivals at ${Math.round(LOAD * 100)}% of the fleet's capacity measured in this run (same`,
    'seed and lengths in every cell). With two router processes the arrivals alternate between them, so each routes half the',
    "traffic and sees only its own requests in its outstanding counts; with the default profile it also scrapes each replica's",
    '`/metrics` (`vllm:num_requests_waiting` + `running`, every `routing.engineMetrics.intervalMs`, default 1,000 ms) and adds the',
    `requests it sent since the sample. TTFT = time to the first SSE event; E2E = time to the last byte. Windows of ${WINDOW_MS / 1000} s after ${WARMUP_MS / 1000} s`,
    'of warm-up. "queue while a slot is free" = share of 250 ms polls of the replicas\' `/metrics` in which one replica had',
    'requests waiting while another had a free batch slot (a routing miss). Every router is a fresh process.',
    ...(SMOKE ? ['', '**Smoke run: numbers are meaningless.**'] : []),
    '',
    ...machine(),
    source(),
    `- capacity: ${perReplica.map((r) => `${r.name} ${r.rps.toFixed(1)}`).join(', ')} → fleet ${fleet.toFixed(1)} requests/s; offered ${(LOAD * fleet).toFixed(1)} requests/s`,
    '',
    '## Results',
    '',
    table(
      [
        'setup',
        'TTFT p50 ms',
        'TTFT p99 ms',
        'E2E p50 ms',
        'E2E p99 ms',
        'throughput req/s',
        `share ${REPLICAS.map((r) => r.name).join('/')}`,
        'mean waiting per replica',
        'queue while a slot is free',
        'engine scrapes/s per router',
        'errors',
      ],
      cells.map((c) => [
        c.setup.name,
        f(c.summary.ttfb.p50),
        f(c.summary.ttfb.p99),
        f(c.summary.ttlb.p50),
        f(c.summary.ttlb.p99),
        c.summary.rps.toFixed(1),
        c.share.map(pct).join(' / '),
        c.queues.meanWaiting.map((w) => w.toFixed(2)).join(' / '),
        pct(c.queues.misplaced),
        c.scrapesPerSecond.toFixed(1),
        c.summary.errors,
      ]),
    ),
    '',
    '## Per router process (share of its own requests to each replica)',
    '',
    table(
      ['setup', 'router', `share ${REPLICAS.map((r) => r.name).join('/')}`],
      cells.flatMap((c) => c.perRouter.map((s, i) => [c.setup.name, `#${i + 1}`, s.map(pct).join(' / ')])),
    ),
    '',
  ];
  const a = byKey('a');
  const b = byKey('b');
  const c = byKey('c');
  const d = byKey('d');
  if (a && b && c && d) {
    const verdict = (ok: boolean): string => (ok ? 'met' : '**missed**');
    const ratio = (x: Cell): number => x.summary.ttfb.p99 / a.summary.ttfb.p99;
    lines.push(
      '## Targets',
      '',
      table(
        ['target', 'measured', 'verdict'],
        [
          ['(b) two engine-aware routers: p99 TTFT ≤ 1.2× (a) one router', `${ratio(b).toFixed(2)}× (${f(b.summary.ttfb.p99)} vs ${f(a.summary.ttfb.p99)} ms)`, verdict(ratio(b) <= 1.2)],
          ['(d) as (b), 250 ms scrapes (extra row): p99 TTFT ≤ 1.2× (a)', `${ratio(d).toFixed(2)}× (${f(d.summary.ttfb.p99)} ms)`, verdict(ratio(d) <= 1.2)],
          ['(c) two local-only routers (reference, no target)', `${ratio(c).toFixed(2)}× (${f(c.summary.ttfb.p99)} ms)`, '—'],
        ],
      ),
      '',
    );
  }
  const svg = stack([
    barChart('time to first token (ms, lower is better)', 'ms', [
      { label: 'p50', values: cells.map((x) => ({ name: x.setup.short, value: x.summary.ttfb.p50 })) },
      { label: 'p99', values: cells.map((x) => ({ name: x.setup.short, value: x.summary.ttfb.p99 })) },
    ]),
    barChart('end-to-end latency (ms, lower is better)', 'ms', [
      { label: 'p50', values: cells.map((x) => ({ name: x.setup.short, value: x.summary.ttlb.p50 })) },
      { label: 'p99', values: cells.map((x) => ({ name: x.setup.short, value: x.summary.ttlb.p99 })) },
    ]),
  ]);
  const out = write('multi-router', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`multi-router: wrote ${out.md} and ${out.svg}`);
}

await main();
