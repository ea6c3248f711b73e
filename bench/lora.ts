/**
 * LoRA placement: four simulator replicas of one base model, each serving the same eight LoRA adapters
 * with two adapter slots (`--max-lora 2`, below the adapter count) and a load time per adapter swap-in.
 * A request for an adapter not resident on its replica waits for a slot to drain and then for the
 * load. Eight deployments, one per adapter, get traffic with a Zipf-like popularity (a few hot
 * adapters, a long tail). Closed loop, streamed, `ignore_eos`. Policies: modelgate's default profile
 * (its `lora` scorer places adapters), modelgate least outstanding (`scorers: [outstanding]`, adapter
 * blind), and the default profile without `lora` (load- and engine-aware, adapter blind). Reports the
 * adapter hit rate (requests whose adapter was resident on arrival, from the simulators), adapter
 * loads, TTFT and throughput. Writes bench/results/lora.{md,svg}.
 */
import { ROUTING_DEFAULTS } from '../src/balancer/settings.js';
import { load } from './lib/loadgen.js';
import { scrape, sum } from './lib/metrics.js';
import { BENCH_KEY, startModelgate, startSim, type Proc } from './lib/procs.js';
import { logNormal, mulberry32 } from './lib/random.js';
import { barChart, machine, SMOKE, source, stack, summarize, table, tools, write, type Summary } from './lib/report.js';

const MODEL = 'bench-base';
const WARMUP_MS = SMOKE ? 300 : Number(process.env.BENCH_LORA_WARMUP_MS ?? 5_000);
const WINDOW_MS = SMOKE ? 1_000 : Number(process.env.BENCH_LORA_WINDOW_MS ?? 20_000);
const BODIES = SMOKE ? 400 : 6_000;
const CLIENTS = Number(process.env.BENCH_LORA_CLIENTS ?? 16);
const REPLICAS = 4;
const ADAPTERS = 8;
const MAX_LORA = 2;
const LOAD_MS = Number(process.env.BENCH_LORA_LOAD_MS ?? 150);
const MAX_NUM_SEQS = 8;
const LATENCY = ['--ttft-ms', '10', '--prefill-ms-per-token', '0.02', '--itl-ms', '5'];
/** Zipf exponent of adapter popularity. */
const SKEW = 0.8;

const adapterName = (k: number): string => `adapter-${k}`;
const deploymentName = (k: number): string => `bot-${k}`;

interface Workload {
  bodies: string[];
  /** Per body: the adapter it asks for. */
  adapter: number[];
  /** Share of the requests per adapter. */
  popularity: number[];
}

function workload(count: number): Workload {
  const random = mulberry32(17);
  const weights = Array.from({ length: ADAPTERS }, (_, k) => 1 / (k + 1) ** SKEW);
  const total = weights.reduce((a, b) => a + b, 0);
  const popularity = weights.map((w) => w / total);
  const draw = (): number => {
    let u = random();
    for (let k = 0; k < ADAPTERS; k++) {
      u -= popularity[k] as number;
      if (u <= 0) return k;
    }
    return ADAPTERS - 1;
  };
  const bodies: string[] = [];
  const adapter: number[] = [];
  for (let i = 0; i < count; i++) {
    const k = draw();
    const output = Math.min(128, Math.max(8, Math.round(logNormal(random, 32, 0.6))));
    const prompt = `[request ${i}] Summarise the ticket for team ${k}: ` + 'the customer asked about the invoice and the refund. '.repeat(1 + Math.floor(random() * 8));
    bodies.push(JSON.stringify({ model: deploymentName(k), messages: [{ role: 'user', content: prompt }], max_tokens: output, ignore_eos: true, stream: true }));
    adapter.push(k);
  }
  return { bodies, adapter, popularity };
}

interface Policy {
  name: string;
  short: string;
  routing?: object;
}

const POLICIES: Policy[] = [
  { name: 'modelgate default profile (LoRA-aware: `lora` scorer)', short: 'lora-aware' },
  { name: 'modelgate least outstanding (`scorers: [outstanding]`, adapter blind)', short: 'least outstanding', routing: { scorers: [{ name: 'outstanding' }] } },
  {
    name: 'modelgate default profile without `lora` (load and engine aware, adapter blind)',
    short: 'default without lora',
    routing: { scorers: ROUTING_DEFAULTS.scorers.filter((scorer) => scorer.name !== 'lora') },
  },
];

interface LoraCounters {
  hits: number;
  misses: number;
  loads: number;
}

async function loraCounters(sims: readonly Proc[]): Promise<LoraCounters> {
  const all = await Promise.all(sims.map(async (s) => (await (await fetch(`${s.url}/sim/lora`)).json()) as LoraCounters));
  return all.reduce((a, b) => ({ hits: a.hits + b.hits, misses: a.misses + b.misses, loads: a.loads + b.loads }), { hits: 0, misses: 0, loads: 0 });
}

interface Cell {
  policy: Policy;
  summary: Summary;
  /** Requests whose adapter was resident and ready on their replica when they arrived, over the window. */
  hitRate: number;
  /** Adapter loads (swap-ins) per second over the window, all replicas. */
  loadsPerSecond: number;
  /** What the router believed (modelgate_lora_placements_total): held / all. */
  routerHeld: number;
  /** Per adapter, the replicas that served ≥ 10% of its requests (mean over adapters). */
  replicasPerAdapter: number;
  /** TTFT p50 of the hottest adapter and of the coldest one. */
  hot: number;
  cold: number;
}

async function routerPlacements(adminUrl: string): Promise<{ held: number; all: number }> {
  const text = await scrape(adminUrl);
  return { held: sum(text, 'modelgate_lora_placements_total', { placement: 'held' }), all: sum(text, 'modelgate_lora_placements_total') };
}

async function runCell(work: Workload, policy: Policy, simArgs: string[]): Promise<Cell> {
  // fresh replicas: every run starts with the same adapters resident
  const sims = await Promise.all(Array.from({ length: REPLICAS }, (_, i) => startSim(`replica-${i}`, simArgs)));
  const deployments = Array.from({ length: ADAPTERS }, (_, k) => ({ id: deploymentName(k), model: deploymentName(k), targets: [{ pool: 'bench' }], adapter: { name: adapterName(k) } }));
  const proxy = await startModelgate(
    sims.map((s) => s.url),
    MODEL,
    { routing: { engineMetrics: { intervalMs: 250 }, ...(policy.routing ?? {}) } },
    { config: { deployments: [{ id: 'bench', model: MODEL, targets: [{ pool: 'bench' }] }, ...deployments] } },
  ).catch(async (err: Error) => {
    await Promise.all(sims.map((s) => s.stop()));
    throw err;
  });
  try {
    let before: LoraCounters | undefined;
    let routerBefore: { held: number; all: number } | undefined;
    const mark = setTimeout(() => {
      void Promise.all([loraCounters(sims), routerPlacements(proxy.adminUrl)]).then(([c, r]) => {
        before = c;
        routerBefore = r;
      });
    }, WARMUP_MS);
    const result = await load({
      url: `${proxy.url}/v1/chat/completions`,
      headers: { authorization: `Bearer ${BENCH_KEY}` },
      bodies: work.bodies,
      mode: 'closed',
      concurrency: CLIENTS,
      warmupMs: WARMUP_MS,
      durationMs: WINDOW_MS,
    });
    clearTimeout(mark);
    const after = await loraCounters(sims);
    const routerAfter = await routerPlacements(proxy.adminUrl);
    const ok = result.samples.filter((s) => s.status === 200 && s.ttfbMs >= 0);
    const adapterOf = (seq: number): number => work.adapter[seq % work.bodies.length] ?? -1;
    const byAdapter = (k: number): number[] =>
      ok
        .filter((s) => adapterOf(s.seq) === k)
        .map((s) => s.ttfbMs)
        .sort((a, b) => a - b);
    const p50 = (xs: number[]): number => (xs.length ? (xs[Math.floor(xs.length / 2)] as number) : NaN);
    const hits = before ? after.hits - before.hits : NaN;
    const misses = before ? after.misses - before.misses : NaN;
    return {
      policy,
      summary: summarize(result.samples, result.windowMs),
      hitRate: hits / (hits + misses),
      loadsPerSecond: before ? ((after.loads - before.loads) * 1000) / result.windowMs : NaN,
      routerHeld: routerBefore ? (routerAfter.held - routerBefore.held) / Math.max(1, routerAfter.all - routerBefore.all) : NaN,
      replicasPerAdapter: spread(ok, adapterOf),
      hot: p50(byAdapter(0)),
      cold: p50(byAdapter(ADAPTERS - 1)),
    };
  } finally {
    await proxy.stop();
    await Promise.all(sims.map((s) => s.stop()));
  }
}

/** Mean over adapters of the number of replicas that served ≥ 10% of that adapter's requests. */
function spread(ok: ReadonlyArray<{ replica: string; seq: number }>, adapterOf: (seq: number) => number): number {
  const by = new Map<number, Map<string, number>>();
  for (const s of ok) {
    const m = by.get(adapterOf(s.seq)) ?? new Map<string, number>();
    m.set(s.replica, (m.get(s.replica) ?? 0) + 1);
    by.set(adapterOf(s.seq), m);
  }
  let total = 0;
  for (const m of by.values()) {
    const n = [...m.values()].reduce((a, b) => a + b, 0);
    total += [...m.values()].filter((c) => c >= 0.1 * n).length;
  }
  return by.size === 0 ? NaN : total / by.size;
}

async function main(): Promise<void> {
  const adapters = Array.from({ length: ADAPTERS }, (_, k) => adapterName(k)).join(',');
  const simArgs = [
    '--model',
    MODEL,
    '--lora-adapters',
    adapters,
    '--max-lora',
    String(MAX_LORA),
    '--lora-load-ms',
    String(LOAD_MS),
    '--max-num-seqs',
    String(MAX_NUM_SEQS),
    '--max-waiting',
    '100000',
    ...LATENCY,
  ];
  const work = workload(BODIES);
  const cells: Cell[] = [];
  for (const policy of POLICIES) {
    const cell = await runCell(work, policy, simArgs);
    cells.push(cell);
    console.error(
      `lora: ${policy.short}: adapter hits ${(cell.hitRate * 100).toFixed(0)}%, TTFT p50 ${cell.summary.ttfb.p50.toFixed(0)} ms p99 ${cell.summary.ttfb.p99.toFixed(0)} ms, ${cell.summary.rps.toFixed(1)} req/s`,
    );
  }
  report(cells, simArgs, work);
}

function report(cells: Cell[], simArgs: string[], work: Workload): void {
  const f = (v: number): string => (Number.isFinite(v) ? v.toFixed(v < 10 ? 1 : 0) : 'n/a');
  const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(0)}%` : 'n/a');
  const aware = cells.find((c) => c.policy.short === 'lora-aware');
  const blind = cells.find((c) => c.policy.short === 'least outstanding');
  const lines = [
    '# LoRA placement',
    '',
    `${REPLICAS} simulator replicas of one base model (\`modelgate sim ${simArgs.join(' ')}\`), each serving the same ${ADAPTERS} LoRA adapters`,
    `with **${MAX_LORA} adapter slots** (\`--max-lora\`): a request for an adapter not resident on its replica waits until a slot drains`,
    `(the replica's other adapters' requests finish; new ones for a draining adapter queue behind it) and then for a ${LOAD_MS} ms load.`,
    `The fleet holds ${REPLICAS * MAX_LORA} adapters at once, as many as there are: a placement exists where no request ever waits for an adapter.`,
    '',
    `- ${ADAPTERS} deployments, one per adapter (\`deployments[].adapter\`), on one pool; popularity Zipf-like (exponent ${SKEW}): ${work.popularity.map((p) => pct(p)).join(', ')}.`,
    `- closed loop: ${CLIENTS} clients, ${WINDOW_MS / 1000} s window after ${WARMUP_MS / 1000} s of warm-up; short prompts, \`max_tokens\` log-normal (median 32, 8–128),`,
    '  `ignore_eos`, streamed; fresh simulators for every policy, the same requests in the same order.',
    "- adapter hit rate = requests whose adapter was resident and ready on arrival, over the window (the simulators' `GET /sim/lora`",
    "  counters); router's view = share of `modelgate_lora_placements_total` that was `held`; adapter loads/s = swap-ins over the window;",
    '  "replicas per adapter" = replicas that served ≥ 10% of an adapter\'s requests (mean over adapters); hot / cold = TTFT p50 of the',
    '  most and the least requested adapter.',
    ...(SMOKE ? ['', '**Smoke run: numbers are meaningless.**'] : []),
    '',
    ...machine(),
    source(),
    ...tools(),
    '',
    '## Results',
    '',
    table(
      [
        'policy',
        'adapter hit rate',
        "router's view: held",
        'adapter loads/s',
        'TTFT p50 ms',
        'TTFT p99 ms',
        'E2E p50 ms',
        'E2E p99 ms',
        'throughput req/s',
        'replicas per adapter',
        'hot / cold TTFT p50 ms',
        'errors',
      ],
      cells.map((c) => [
        c.policy.name,
        pct(c.hitRate),
        pct(c.routerHeld),
        f(c.loadsPerSecond),
        f(c.summary.ttfb.p50),
        f(c.summary.ttfb.p99),
        f(c.summary.ttlb.p50),
        f(c.summary.ttlb.p99),
        c.summary.rps.toFixed(1),
        f(c.replicasPerAdapter),
        `${f(c.hot)} / ${f(c.cold)}`,
        c.summary.errors,
      ]),
    ),
    '',
  ];
  if (aware && blind) {
    lines.push(
      '## LoRA-aware against adapter-blind (least outstanding)',
      '',
      `- adapter hit rate ${pct(aware.hitRate)} against ${pct(blind.hitRate)}; adapter loads ${f(aware.loadsPerSecond)}/s against ${f(blind.loadsPerSecond)}/s.`,
      `- TTFT p50 ${f(aware.summary.ttfb.p50)} ms against ${f(blind.summary.ttfb.p50)} ms (${(blind.summary.ttfb.p50 / aware.summary.ttfb.p50).toFixed(1)}× better), p99 ${f(aware.summary.ttfb.p99)} ms against ${f(blind.summary.ttfb.p99)} ms (${(blind.summary.ttfb.p99 / aware.summary.ttfb.p99).toFixed(1)}×).`,
      `- throughput ${aware.summary.rps.toFixed(1)} against ${blind.summary.rps.toFixed(1)} req/s.`,
      '',
    );
  }
  const svg = stack([
    barChart('adapter hit rate (%, higher is better)', '%', [{ label: 'hit rate', values: cells.map((c) => ({ name: c.policy.short, value: Number.isFinite(c.hitRate) ? c.hitRate * 100 : 0 })) }]),
    barChart('time to first token (ms, lower is better)', 'ms', [
      { label: 'p50', values: cells.map((c) => ({ name: c.policy.short, value: c.summary.ttfb.p50 })) },
      { label: 'p99', values: cells.map((c) => ({ name: c.policy.short, value: c.summary.ttfb.p99 })) },
    ]),
  ]);
  const out = write('lora', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`lora: wrote ${out.md} and ${out.svg}`);
}

await main();
