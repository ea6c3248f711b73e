/**
 * Balancing quality: four simulator replicas, two of them twice as slow, fed open-loop Poisson
 * arrivals of streamed requests with long-tailed prompt and output lengths at 70%, 85% and 95% of
 * the fleet's measured capacity. Policies, each on the same arrivals and the same request lengths:
 * random (HAProxy `random(1)`, what a Kubernetes Service's kube-proxy does), round robin, HAProxy
 * `leastconn`, and modelgate. Writes bench/results/balance.{md,svg}.
 */
import { FAST, fleetCapacity, MAX_NUM_SEQS, mixBodies, REPLICAS, SLOW, startFleet } from './lib/fleet.js';
import { load } from './lib/loadgen.js';
import { BENCH_KEY, startHaproxy, startModelgate, type Proc } from './lib/procs.js';
import { barChart, machine, SMOKE, stack, summarize, table, tools, write } from './lib/report.js';

const MODEL = 'bench-model';
const LOADS = SMOKE ? [0.85] : [0.7, 0.85, 0.95];
const WARMUP_MS = SMOKE ? 300 : 5_000;
const WINDOW_MS = SMOKE ? 1_000 : 40_000;
const CALIBRATE_MS = SMOKE ? 500 : 8_000;
const bodies = (tag: string, count: number): string[] => mixBodies(MODEL, tag, count);
/** The latency objective goodput is judged against (modelgate's \`slo\` in this run; the same rule for every policy). */
const SLO = { ttftMs: 500, itlMs: 100 };

/** The share of offered requests answered within SLO: 200, time to first token and mean gap between events within it (metrics/goodput.ts's rule). */
function goodput(samples: Array<{ status: number; ttfbMs: number; ttlbMs: number; events: number }>): number {
  if (samples.length === 0) return NaN;
  const within = samples.filter((s) => s.status === 200 && s.ttfbMs >= 0 && s.ttfbMs <= SLO.ttftMs && (s.events <= 1 || (s.ttlbMs - s.ttfbMs) / (s.events - 1) <= SLO.itlMs));
  return within.length / samples.length;
}

/** The router's own goodput from its counters (every request of the run, warm-up included). */
async function routerGoodput(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const count = (result: string): number => Number(new RegExp(`^modelgate_goodput_requests_total\\{deployment="bench",result="${result}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  const all = ['within', 'outside', 'rejected', 'failed'].reduce((sum, r) => sum + count(r), 0);
  return all > 0 ? count('within') / all : NaN;
}

interface Policy {
  name: string;
  start(upstreams: string[]): Promise<Proc>;
  headers: Record<string, string>;
}

const POLICIES: Policy[] = [
  { name: 'random', start: (up) => startHaproxy(up, 'random'), headers: {} },
  { name: 'round robin', start: (up) => startHaproxy(up, 'roundrobin'), headers: {} },
  { name: 'haproxy leastconn', start: (up) => startHaproxy(up, 'leastconn'), headers: {} },
  { name: 'modelgate', start: (up) => startModelgate(up, MODEL, {}, { config: { slo: SLO } }), headers: { authorization: `Bearer ${BENCH_KEY}` } },
];

interface Cell {
  policy: string;
  load: number;
  rate: number;
  ttft: { p50: number; p99: number };
  e2e: { p50: number; p99: number };
  rps: number;
  errors: number;
  /** Within SLO ÷ offered, from the client's samples of the window. */
  goodput: number;
  /** modelgate only: the same from its own counters over the whole run. */
  routerGoodput?: number;
  share: Record<string, number>;
}

async function main(): Promise<void> {
  const sims = await startFleet(MODEL);
  const cells: Cell[] = [];
  try {
    const { perReplica, fleet } = await fleetCapacity(sims, MODEL, WARMUP_MS / 2, CALIBRATE_MS, 'balance');
    let run = 0;
    for (const level of LOADS) {
      for (const policy of POLICIES) {
        const rate = level * fleet;
        const proxy = await policy.start(sims.map((s) => s.url));
        try {
          const result = await load({
            url: `${proxy.url}/v1/chat/completions`,
            headers: policy.headers,
            bodies: bodies(`run${run++}`, 4000),
            mode: 'open',
            rate,
            arrivals: 'poisson',
            seed: Math.round(level * 1000),
            warmupMs: WARMUP_MS,
            durationMs: WINDOW_MS,
            drainMs: 120_000,
          });
          const summary = summarize(result.samples, result.windowMs);
          const ok = result.samples.filter((s) => s.status === 200 && s.ttfbMs >= 0);
          const share: Record<string, number> = {};
          for (const s of ok) share[s.replica] = (share[s.replica] ?? 0) + 1 / ok.length;
          const own = 'adminUrl' in proxy && typeof proxy.adminUrl === 'string' ? await routerGoodput(proxy.adminUrl) : undefined;
          cells.push({
            policy: policy.name,
            load: level,
            rate,
            ttft: summary.ttfb,
            e2e: summary.ttlb,
            rps: summary.rps,
            errors: summary.errors,
            share,
            goodput: goodput(result.samples),
            ...(own === undefined ? {} : { routerGoodput: own }),
          });
          console.error(`balance: ${Math.round(level * 100)}% ${policy.name}: TTFT p99 ${summary.ttfb.p99.toFixed(0)} ms`);
        } finally {
          await proxy.stop();
        }
      }
    }
    report(cells, perReplica, fleet);
  } finally {
    await Promise.all(sims.map((s) => s.stop()));
  }
}

function report(cells: Cell[], perReplica: Array<{ name: string; rps: number }>, fleet: number): void {
  const f = (v: number): string => (Number.isFinite(v) ? v.toFixed(v < 10 ? 1 : 0) : 'n/a');
  const cell = (policy: string, level: number): Cell | undefined => cells.find((c) => c.policy === policy && c.load === level);
  const lines: string[] = [
    '# Balancing quality',
    '',
    `Four simulator replicas (\`modelgate sim\`, ${MAX_NUM_SEQS} sequences per batch): two fast (\`${FAST.join(' ')}\`) and two twice as`,
    `slow (\`${SLOW.join(' ')}\`). Streamed requests, log-normal prompt (median 256 tokens) and output (median 48 tokens)`,
    'lengths, arriving as a Poisson process (open loop, same seed and same lengths for every policy) at a share of the',
    "fleet's capacity, itself measured in this run (each replica alone, closed loop with its batch full, same request mix).",
    'Random is HAProxy `balance random(1)` (uniform, like kube-proxy behind a Service); round robin and least connections',
    `are HAProxy too. TTFT = time to the first SSE event; E2E = time to the last byte. Windows of ${WINDOW_MS / 1000} s after ${WARMUP_MS / 1000} s of warm-up.`,
    ...(SMOKE ? ['**Smoke run: numbers are meaningless.**'] : []),
    '',
    ...machine(),
    ...tools(),
    `- capacity: ${perReplica.map((r) => `${r.name} ${r.rps.toFixed(1)}`).join(', ')} → fleet ${fleet.toFixed(1)} requests/s`,
    '',
    '## Results',
    '',
    table(
      ['load', 'policy', 'offered req/s', 'TTFT p50 ms', 'TTFT p99 ms', 'E2E p50 ms', 'E2E p99 ms', 'throughput req/s', 'share fast-0/fast-1/slow-0/slow-1', 'errors'],
      cells.map((c) => [
        `${Math.round(c.load * 100)}%`,
        c.policy,
        c.rate.toFixed(1),
        f(c.ttft.p50),
        f(c.ttft.p99),
        f(c.e2e.p50),
        f(c.e2e.p99),
        c.rps.toFixed(1),
        REPLICAS.map((r) => `${Math.round((c.share[r.name] ?? 0) * 100)}%`).join(' / '),
        c.errors,
      ]),
    ),
    '',
    `## Goodput (within SLO: time to first token ≤ ${SLO.ttftMs} ms and mean gap between events ≤ ${SLO.itlMs} ms, ÷ offered)`,
    '',
    "From the client's samples of each window, the same rule for every policy; for modelgate also from its own",
    '`modelgate_goodput_requests_total` (the whole run, warm-up included).',
    '',
    table(
      ['load', ...POLICIES.map((p) => p.name), 'modelgate (its counters)', 'modelgate TTFT p99 ms'],
      LOADS.map((level) => [
        `${Math.round(level * 100)}%`,
        ...POLICIES.map((p) => {
          const c = cell(p.name, level);
          return c ? `${(c.goodput * 100).toFixed(1)}%` : 'n/a';
        }),
        ((g) => (g === undefined ? 'n/a' : `${(g * 100).toFixed(1)}%`))(cell('modelgate', level)?.routerGoodput),
        f(cell('modelgate', level)?.ttft.p99 ?? NaN),
      ]),
    ),
    '',
    '## modelgate against each policy (p99 TTFT ratio, lower is better)',
    '',
    table(
      ['load', ...POLICIES.filter((p) => p.name !== 'modelgate').map((p) => `vs ${p.name}`)],
      LOADS.map((level) => [
        `${Math.round(level * 100)}%`,
        ...POLICIES.filter((p) => p.name !== 'modelgate').map((p) => {
          const mine = cell('modelgate', level);
          const theirs = cell(p.name, level);
          return mine && theirs ? `${(mine.ttft.p99 / theirs.ttft.p99).toFixed(2)}×` : 'n/a';
        }),
      ]),
    ),
    '',
  ];
  const mg = cell('modelgate', 0.85);
  const rr = cell('round robin', 0.85);
  const rnd = cell('random', 0.85);
  const lc = cell('haproxy leastconn', 0.85);
  if (mg && rr && rnd && lc) {
    const verdict = (ok: boolean): string => (ok ? 'met' : '**missed**');
    lines.push(
      '## Targets (85% load)',
      '',
      table(
        ['target', 'measured', 'verdict'],
        [
          ['p99 TTFT ≤ 0.5× round robin', `${(mg.ttft.p99 / rr.ttft.p99).toFixed(2)}×`, verdict(mg.ttft.p99 <= 0.5 * rr.ttft.p99)],
          ['p99 TTFT ≤ random', `${(mg.ttft.p99 / rnd.ttft.p99).toFixed(2)}×`, verdict(mg.ttft.p99 <= rnd.ttft.p99)],
          ['p99 TTFT ≤ 1.1× HAProxy leastconn', `${(mg.ttft.p99 / lc.ttft.p99).toFixed(2)}×`, verdict(mg.ttft.p99 <= 1.1 * lc.ttft.p99)],
        ],
      ),
      '',
    );
  }
  const byLoad = (pick: (c: Cell) => number) =>
    LOADS.map((level) => ({ label: `${Math.round(level * 100)}% load`, values: POLICIES.map((p) => ({ name: p.name, value: cell(p.name, level) ? pick(cell(p.name, level)!) : 0 })) }));
  const svg = stack([
    barChart(
      'p99 time to first token (ms, lower is better)',
      'ms',
      byLoad((c) => c.ttft.p99),
    ),
    barChart(
      'p99 end-to-end latency (ms, lower is better)',
      'ms',
      byLoad((c) => c.e2e.p99),
    ),
  ]);
  const out = write('balance', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`balance: wrote ${out.md} and ${out.svg}`);
}

await main();
