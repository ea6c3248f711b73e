/**
 * Scale: (1) the cost of one pick (breakers, health, per-replica limit, least outstanding,
 * admission) and the memory the router holds per endpoint, at 10, 100 and 1,000 endpoints, in
 * process with the router's own classes; (2) thousands of concurrent open streams through one router
 * process: its RSS and event-loop lag (prom-client's `nodejs_eventloop_lag_p99_seconds`, scraped
 * during the hold) and how long /metrics takes to answer. Writes bench/results/scale.{md,svg}.
 * Run with --expose-gc for the memory figures.
 */
import { readFileSync } from 'node:fs';
import { InFlight } from '../src/balancer/in-flight.js';
import { systemScheduler } from '../src/core/clock.js';
import { type Endpoint, type PoolSpec } from '../src/core/types.js';
import { AdmissionQueues } from '../src/resilience/admission.js';
import { BreakerRegistry } from '../src/resilience/breaker.js';
import { EndpointPicker } from '../src/resilience/picker.js';
import { RESILIENCE_DEFAULTS } from '../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../src/balancer/settings.js';
import { load } from './lib/loadgen.js';
import { BENCH_KEY, startModelgate, startSim, usage } from './lib/procs.js';
import { mulberry32 } from './lib/random.js';
import { barChart, machine, percentile, SMOKE, stack, table, write } from './lib/report.js';

const SIZES = [10, 100, 1000];
const STREAMS = SMOKE ? 200 : 5000;
const RAMP_RATE = SMOKE ? 400 : 500; // new streams per second
const TOKEN_INTERVAL_MS = 1000; // each stream emits one token a second
const HOLD_MS = SMOKE ? 1500 : 30_000;

const gc = (): void => (globalThis as { gc?: () => void }).gc?.();

interface PickRow {
  endpoints: number;
  nsPerPick: number;
  bytesPerEndpoint: number;
}

async function pickCost(size: number): Promise<PickRow> {
  gc();
  const before = process.memoryUsage().heapUsed;
  const pool: PoolSpec = { name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
  const endpoints: Endpoint[] = Array.from({ length: size }, (_, i) => ({ id: `ns/pod-${i}`, pool: 'p', url: new URL(`http://10.0.${i >> 8}.${i & 255}:8000`), weight: 1 }));
  const inFlight = new InFlight();
  const random = mulberry32(7);
  const picker = new EndpointPicker({
    endpoints: { snapshot: () => endpoints },
    inFlight,
    breakers: new BreakerRegistry(),
    health: { isHealthy: () => true },
    admission: new AdmissionQueues(systemScheduler, () => performance.now()),
    random,
  });
  // a busy fleet: 0-15 requests already running on each endpoint
  for (const ep of endpoints) for (let i = Math.floor(random() * 16); i > 0; i--) inFlight.acquire(ep.id, 'p');
  const none = new Set<string>();
  const once = async (): Promise<void> => {
    const picked = await picker.pick(pool, none);
    picked.ticket.settle('success');
    picked.release();
  };
  for (let i = 0; i < 2000; i++) await once(); // warm-up: JIT, and one breaker per endpoint created
  gc();
  const bytesPerEndpoint = (process.memoryUsage().heapUsed - before) / size;
  const picks = SMOKE ? 2000 : Math.max(20_000, 2_000_000 / size);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < picks; i++) await once();
  const nsPerPick = Number(process.hrtime.bigint() - t0) / picks;
  return { endpoints: size, nsPerPick, bytesPerEndpoint };
}

interface StreamRun {
  streams: number;
  opened: number;
  idleRssMiB: number;
  holdRssMiB: number;
  peakRssMiB: number;
  lagP99Ms: number[];
  scrapeMs: number[];
  inFlight: number;
  errors: number;
  events: number;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) / 1024;
}

async function scrape(adminUrl: string): Promise<{ ms: number; lagP99Ms: number; inFlight: number }> {
  const t0 = performance.now();
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const ms = performance.now() - t0;
  const lag = /^nodejs_eventloop_lag_p99_seconds (\S+)$/m.exec(text);
  let inFlight = 0;
  for (const m of text.matchAll(/^modelgate_endpoint_in_flight_requests\{[^}]*\} (\S+)$/gm)) inFlight += Number(m[1]);
  return { ms, lagP99Ms: Number(lag?.[1] ?? NaN) * 1000, inFlight };
}

async function manyStreams(): Promise<StreamRun> {
  const rampMs = (STREAMS / RAMP_RATE) * 1000;
  const tokens = Math.ceil((rampMs + HOLD_MS + 5000) / TOKEN_INTERVAL_MS);
  const sim = await startSim('upstream', [
    '--model',
    'bench-model',
    '--ttft-ms',
    '0',
    '--prefill-ms-per-token',
    '0',
    '--itl-ms',
    String(TOKEN_INTERVAL_MS),
    '--load-factor',
    '1',
    '--max-num-seqs',
    String(STREAMS + 100),
    '--max-waiting',
    '100000',
  ]);
  const router = await startModelgate([sim.url], 'bench-model');
  try {
    await scrape(router.adminUrl);
    const idleRssMiB = rssMiB(router.pid);
    const body = JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: tokens, ignore_eos: true, stream: true });
    const running = load({
      url: `${router.url}/v1/chat/completions`,
      headers: { authorization: `Bearer ${BENCH_KEY}` },
      bodies: [body],
      mode: 'open',
      rate: RAMP_RATE,
      arrivals: 'fixed',
      warmupMs: 0,
      durationMs: rampMs,
      drainMs: tokens * TOKEN_INTERVAL_MS * 3,
    });
    await new Promise((r) => setTimeout(r, rampMs + 1000));
    await scrape(router.adminUrl); // resets the lag histogram: the hold starts here
    const lag: number[] = [];
    const scrapeMs: number[] = [];
    let holdRssMiB = 0;
    let inFlight = 0;
    for (const end = performance.now() + HOLD_MS; performance.now() < end;) {
      await new Promise((r) => setTimeout(r, SMOKE ? 500 : 2000));
      const s = await scrape(router.adminUrl);
      lag.push(s.lagP99Ms);
      scrapeMs.push(s.ms);
      inFlight = Math.max(inFlight, s.inFlight);
      holdRssMiB = Math.max(holdRssMiB, rssMiB(router.pid));
    }
    const peakRssMiB = usage(router.pid).peakRssMiB;
    const result = await running;
    const ok = result.samples.filter((s) => s.status === 200);
    return {
      streams: STREAMS,
      opened: result.samples.length,
      idleRssMiB,
      holdRssMiB,
      peakRssMiB,
      lagP99Ms: lag,
      scrapeMs,
      inFlight,
      errors: result.samples.length - ok.length,
      events: ok.reduce((n, s) => n + s.events, 0),
    };
  } finally {
    await router.stop();
    await sim.stop();
  }
}

async function main(): Promise<void> {
  if (!(globalThis as { gc?: unknown }).gc) console.error('scale: run node with --expose-gc for the memory figures');
  const picks: PickRow[] = [];
  for (const size of SIZES) {
    picks.push(await pickCost(size));
    console.error(`scale: ${size} endpoints: ${picks.at(-1)!.nsPerPick.toFixed(0)} ns per pick`);
  }
  console.error(`scale: ${STREAMS} streams…`);
  const streams = await manyStreams();
  const base = picks[0]!;
  const maxLag = Math.max(...streams.lagP99Ms);
  const sortedScrape = [...streams.scrapeMs].sort((a, b) => a - b);
  const lines = [
    '# Scale',
    '',
    SMOKE ? '**Smoke run: numbers are meaningless.**\n' : '',
    ...machine(),
    '',
    '## Cost of a pick as endpoints grow',
    '',
    'One pick = filter the pool snapshot by health and breaker, skip endpoints at their concurrency limit, least',
    'outstanding requests per unit of weight, take a breaker ticket and an in-flight slot, then settle and release them: the',
    "router's own classes in one process, 0–15 requests already outstanding on each endpoint. Memory: heap held per endpoint",
    '(snapshot entry, breaker, in-flight counter) after a warm-up.',
    '',
    table(
      ['endpoints', 'µs per pick', 'ratio to 10 endpoints', 'heap bytes per endpoint'],
      picks.map((p) => [
        p.endpoints,
        (p.nsPerPick / 1000).toFixed(2),
        `${(p.nsPerPick / base.nsPerPick).toFixed(1)}×`,
        Number.isFinite(p.bytesPerEndpoint) && globalThis.gc ? Math.round(p.bytesPerEndpoint) : 'n/a',
      ]),
    ),
    '',
    `## ${STREAMS} concurrent streams through one router process`,
    '',
    `One simulator upstream emitting one token per second per stream (${Math.round(1000 / TOKEN_INTERVAL_MS)} event/s each, ${STREAMS * Math.round(1000 / TOKEN_INTERVAL_MS)} events/s in all);`,
    `streams opened at ${RAMP_RATE}/s, then held for ${HOLD_MS / 1000} s while /metrics is scraped every ${SMOKE ? 0.5 : 2} s. Event-loop lag is`,
    "prom-client's `nodejs_eventloop_lag_p99_seconds` (p99 since the previous scrape, 10 ms resolution); the worst scrape is reported.",
    '',
    table(
      ['figure', 'value', 'target'],
      [
        ['streams opened / answered with errors', `${streams.opened} / ${streams.errors}`, ''],
        ['in flight at the router (max seen)', streams.inFlight, ''],
        ['router RSS idle', `${streams.idleRssMiB.toFixed(0)} MiB`, 'baseline'],
        [
          'router RSS while holding',
          `${streams.holdRssMiB.toFixed(0)} MiB (${(streams.holdRssMiB / streams.idleRssMiB).toFixed(1)}× idle, ${(((streams.holdRssMiB - streams.idleRssMiB) * 1024) / STREAMS).toFixed(0)} KiB per stream)`,
          '< 1024 MiB',
        ],
        ['router peak RSS', `${streams.peakRssMiB.toFixed(0)} MiB`, '< 1024 MiB'],
        ['event-loop lag p99 (worst scrape)', `${maxLag.toFixed(1)} ms`, '< 50 ms'],
        ['/metrics answer time p50 / max', `${percentile(sortedScrape, 0.5).toFixed(1)} / ${sortedScrape.at(-1)?.toFixed(1)} ms`, ''],
        ['SSE events delivered', streams.events, ''],
      ],
    ),
    '',
    `Verdict: RSS ${streams.peakRssMiB < 1024 ? 'met' : '**missed**'}, event-loop lag ${maxLag < 50 ? 'met' : '**missed**'}.`,
    '',
  ];
  const svg = stack([
    barChart(
      'Cost of a pick (µs)',
      'µs',
      picks.map((p) => ({ label: `${p.endpoints} endpoints`, values: [{ name: 'pick + release', value: p.nsPerPick / 1000 }] })),
    ),
    barChart(`Router with ${STREAMS} open streams`, 'MiB / ms', [
      {
        label: 'RSS MiB',
        values: [
          { name: 'idle', value: streams.idleRssMiB },
          { name: 'holding', value: streams.holdRssMiB },
          { name: 'target', value: 1024 },
        ],
      },
      {
        label: 'loop lag p99 ms',
        values: [
          { name: 'holding', value: maxLag },
          { name: 'target', value: 50 },
        ],
      },
    ]),
  ]);
  const out = write('scale', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`scale: wrote ${out.md} and ${out.svg}`);
}

await main();
