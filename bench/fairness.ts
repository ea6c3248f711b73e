/**
 * Fair sharing between API keys in the admission queue: one pool of two simulator replicas behind
 * modelgate with `maxConcurrencyPerReplica` set, so requests queue once every slot is busy. Two keys,
 * `flood` and `trickle`. Phases, on the same router: (1) trickle alone at a low rate (its baseline);
 * (2) flood open loop at several times the pool's capacity, keeping the queue full, while trickle sends
 * at the same low rate; (3) the same, but trickle sends with the flood key (one tenant: plain FIFO,
 * what the queue did before fair sharing). The target: trickle's p99 beside the flood is at most its
 * solo p99 plus one service time. Writes bench/results/fairness.{md,svg}.
 */
import os from 'node:os';
import { load, type LoadJob, type Sample } from './lib/loadgen.js';
import { startModelgate, startSim, usage, type ModelgateProc } from './lib/procs.js';
import { sum } from './lib/metrics.js';
import { barChart, machine, othersCpu, percentile, SMOKE, source, stack, table, write } from './lib/report.js';

const MODEL = 'bench-model';
const REPLICAS = 2;
const SLOTS_PER_REPLICA = 4;
const TTFT_MS = 20;
const ITL_MS = 5;
const OUTPUT_TOKENS = 16;
/** What one request costs an engine with no wait: prefill plus one ITL per token after the first. */
const SERVICE_MS = TTFT_MS + (OUTPUT_TOKENS - 1) * ITL_MS;
/** Each slot serves 1000 / SERVICE_MS requests/s. */
const CAPACITY = (REPLICAS * SLOTS_PER_REPLICA * 1000) / SERVICE_MS;
const QUEUE = { maxSize: 64, timeoutMs: 10_000 };
const TRICKLE_RATE = 10;
const FLOOD_RATE = Math.round(3 * CAPACITY);
/** CPU other processes may use during a phase (cores) before the report calls the run suspect. */
const QUIET_CORES = 0.25;
const WARMUP_MS = SMOKE ? 500 : 3_000;
const WINDOW_MS = SMOKE ? 1_500 : 30_000;
// `--load-factor 1`: a fuller batch does not slow the engine, so a request's service time is the same in every phase
const SIM_ARGS = ['--ttft-ms', `${TTFT_MS}`, '--itl-ms', `${ITL_MS}`, '--prefill-ms-per-token', '0', '--load-factor', '1'];
const SIM_LIMITS = ['--output-min', `${OUTPUT_TOKENS}`, '--output-max', `${OUTPUT_TOKENS}`, '--max-num-seqs', '64', '--max-waiting', '100000'];
const KEYS = { flood: 'sk-bench-flood-0123456789', trickle: 'sk-bench-trickle-0123456789' };
const BODY = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 64 });

/**
 * modelgate as a user starts it (lib/procs.ts's startModelgate: `node dist/cli.js serve --config FILE`),
 * with a keys file of the two keys and the pool's admission limits.
 */
function startRouter(upstreams: string[]): Promise<ModelgateProc> {
  const keysYaml = Object.entries(KEYS)
    .map(([name, key]) => `- name: ${name}\n  key: ${key}\n`)
    .join('');
  return startModelgate(upstreams, MODEL, { resilience: { maxConcurrencyPerReplica: SLOTS_PER_REPLICA, queue: QUEUE } }, { keysYaml });
}

interface Side {
  requests: number;
  ok: number;
  /** Answers 429 (QUEUE_FULL or QUEUE_TIMEOUT), and other failures. */
  rejected: number;
  failed: number;
  p50: number;
  p99: number;
  max: number;
  /** Completed requests per second in the window. */
  goodput: number;
}

function side(samples: Sample[], windowMs: number): Side {
  const ok = samples.filter((s) => s.status === 200 && !s.error);
  const sorted = ok.map((s) => s.ttlbMs).sort((a, b) => a - b);
  const rejected = samples.filter((s) => s.status === 429).length;
  return {
    requests: samples.length,
    ok: ok.length,
    rejected,
    failed: samples.length - ok.length - rejected,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    max: sorted.at(-1) ?? NaN,
    goodput: (ok.length * 1000) / windowMs,
  };
}

interface Phase {
  name: string;
  trickle: Side;
  flood?: Side;
  /** The pool's queue depth, sampled every 250 ms in the window (min / median / max). */
  depth?: { min: number; median: number; max: number };
  othersCores: number;
  routerCpuSeconds: number;
}

const job = (key: string, rate: number, seed: number, arrivals: LoadJob['arrivals']): LoadJob => ({
  url: '',
  headers: { authorization: `Bearer ${key}` },
  bodies: [BODY],
  mode: 'open',
  rate,
  arrivals,
  seed,
  warmupMs: WARMUP_MS,
  durationMs: WINDOW_MS,
  drainMs: QUEUE.timeoutMs + 5_000,
});

/** Samples the router's queue depth until `done` settles. */
async function depthsDuring(router: ModelgateProc, done: Promise<unknown>): Promise<number[]> {
  let finished = false;
  void done.finally(() => (finished = true));
  const depths: number[] = [];
  const start = performance.now();
  while (!finished) {
    await new Promise((r) => setTimeout(r, 250));
    const elapsed = performance.now() - start;
    if (elapsed < WARMUP_MS || elapsed > WARMUP_MS + WINDOW_MS) continue;
    const text = await fetch(`${router.adminUrl}/metrics`).then((r) => r.text());
    depths.push(sum(text, 'modelgate_queue_depth', { pool: 'bench' }));
  }
  return depths;
}

async function phase(router: ModelgateProc, name: string, trickleKey: string, withFlood: boolean, seed: number): Promise<Phase> {
  const url = `${router.url}/v1/chat/completions`;
  const others = othersCpu();
  const cpu0 = usage(router.pid).cpuSeconds;
  const trickleJob = load({ ...job(trickleKey, TRICKLE_RATE, seed, 'poisson'), url });
  const floodJob = withFlood ? load({ ...job(KEYS.flood, FLOOD_RATE, seed + 1, 'fixed'), url }) : undefined;
  const sampled = depthsDuring(router, Promise.all([trickleJob, floodJob]));
  const [trickle, flood, depths] = await Promise.all([trickleJob, floodJob, sampled]);
  const sorted = [...depths].sort((a, b) => a - b);
  const result: Phase = {
    name,
    trickle: side(trickle.samples, trickle.windowMs),
    ...(flood ? { flood: side(flood.samples, flood.windowMs) } : {}),
    ...(sorted.length ? { depth: { min: sorted[0]!, median: percentile(sorted, 0.5), max: sorted.at(-1)! } } : {}),
    othersCores: others(),
    routerCpuSeconds: usage(router.pid).cpuSeconds - cpu0,
  };
  console.error(`fairness: ${name}: trickle p50 ${result.trickle.p50.toFixed(1)} ms, p99 ${result.trickle.p99.toFixed(1)} ms${result.flood ? `; flood p99 ${result.flood.p99.toFixed(1)} ms` : ''}`);
  return result;
}

const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(1) : 'n/a');
const loadavg = (): string =>
  os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ');

function sideRow(phase: string, who: string, s: Side): Array<string | number> {
  return [phase, who, s.requests, s.ok, s.rejected, s.failed, ms(s.goodput), ms(s.p50), ms(s.p99), ms(s.max)];
}

async function main(): Promise<void> {
  const loadBefore = loadavg();
  const sims = await Promise.all(Array.from({ length: REPLICAS }, (_, i) => startSim(`sim-${i}`, ['--model', MODEL, ...SIM_ARGS, ...SIM_LIMITS])));
  const phases: Phase[] = [];
  let router: ModelgateProc | undefined;
  try {
    router = await startRouter(sims.map((s) => s.url));
    // JIT warm-up of the router's request path, queue included, before anything is measured
    await load({ ...job(KEYS.flood, CAPACITY * 2, 7, 'fixed'), url: `${router.url}/v1/chat/completions`, durationMs: 0 });
    phases.push(await phase(router, 'trickle alone', KEYS.trickle, false, 11));
    phases.push(await phase(router, 'trickle beside flood (own key)', KEYS.trickle, true, 11));
    phases.push(await phase(router, 'trickle beside flood, same key (one tenant: FIFO)', KEYS.flood, true, 11));
  } finally {
    await router?.stop();
    await Promise.all(sims.map((s) => s.stop()));
  }
  const loadAfter = loadavg();

  const [solo, fair, fifo] = phases as [Phase, Phase, Phase];
  // one service time as this machine delivers it: a request's latency with no wait (trickle's solo p50), not the engine's nominal cost
  const service = solo.trickle.p50;
  const bound = solo.trickle.p99 + service;
  const othersMax = Math.max(...phases.map((p) => p.othersCores));
  const busy = othersMax > QUIET_CORES ? othersMax : undefined;
  const check = (ok: boolean): string => (ok ? 'met' : '**missed**');
  const lines = [
    '# Fair sharing between API keys in the admission queue',
    '',
    `One pool of ${REPLICAS} simulator replicas (\`modelgate sim ${[...SIM_ARGS, ...SIM_LIMITS].join(' ')}\`: every answer ${OUTPUT_TOKENS} tokens,`,
    `${SERVICE_MS} ms of service, a batch that never slows) behind one modelgate with \`resilience: { maxConcurrencyPerReplica: ${SLOTS_PER_REPLICA}, queue: { maxSize: ${QUEUE.maxSize}, timeoutMs: ${QUEUE.timeoutMs} } }\`:`,
    `${REPLICAS * SLOTS_PER_REPLICA} slots, a capacity of ${ms(CAPACITY)} requests/s. Two API keys of weight 1 and priority \`standard\`: \`flood\` and \`trickle\`.`,
    `Non-streamed chat requests, latency to the last byte from the scheduled send time (open loop, a separate load-generator process per key;`,
    `\`bench/lib/loadgen.ts\`), a ${WINDOW_MS / 1000} s window after ${WARMUP_MS / 1000} s of warm-up per phase. trickle: Poisson arrivals at ${TRICKLE_RATE} requests/s;`,
    `flood: evenly spaced at ${FLOOD_RATE} requests/s (${ms(FLOOD_RATE / CAPACITY)}× capacity), so the queue stays full and most of flood's requests are`,
    `answered 429 at once. The third phase is the queue without fair sharing: trickle sends with the flood key, so both are one tenant and the queue`,
    `is plain FIFO.${SMOKE ? ' **Smoke run: numbers are meaningless.**' : ''}`,
    '',
    `modelgate is started as users start it, \`${router?.started ?? 'n/a'}\`, access log on at \`info\`, to a file.`,
    '',
    ...machine(),
    source(),
    `- load average (1 / 5 / 15 min) before the run: ${loadBefore}; after: ${loadAfter}`,
    ...(busy ? ['', `**Other processes used up to ${busy.toFixed(2)} cores during a phase: the machine was not quiet, the latencies are suspect.**`] : []),
    '',
    '## Targets',
    '',
    "A queued trickle request goes to the head of the queue (its start tag is the virtual time, the flood's waiters are behind it), so it waits",
    'for the next slot to free: at most one service time, and nearly that when the slots run in lockstep (a full queue refills every slot the',
    "moment it frees, so slots started together stay together). One service time is measured: trickle's solo p50, a request with no wait.",
    '',
    table(
      ['target', 'measured', 'verdict'],
      [
        [
          `trickle p99 beside the flood ≤ its solo p99 + one service time (solo p99 ${ms(solo.trickle.p99)} + solo p50 ${ms(service)} ms)`,
          `${ms(fair.trickle.p99)} ms`,
          check(fair.trickle.p99 <= bound),
        ],
        ['trickle never turned away beside the flood (429s and errors)', String(fair.trickle.rejected + fair.trickle.failed), check(fair.trickle.rejected + fair.trickle.failed === 0)],
      ],
    ),
    '',
    '## Latency (ms, to the last byte)',
    '',
    'rejected: answered 429 (queue full, or no slot within the queue timeout); goodput: 200s per second.',
    '',
    table(
      ['phase', 'key', 'requests', '200', 'rejected (429)', 'other errors', 'goodput (req/s)', 'p50', 'p99', 'max'],
      phases.flatMap((p) => [sideRow(p.name, 'trickle', p.trickle), ...(p.flood ? [sideRow(p.name, 'flood', p.flood)] : [])]),
    ),
    '',
    '## Queue and machine',
    '',
    table(
      ['phase', 'queue depth min / median / max (every 250 ms)', 'router CPU (s)', "others' CPU (cores)"],
      phases.map((p) => [p.name, p.depth ? `${p.depth.min} / ${p.depth.median} / ${p.depth.max}` : 'n/a', p.routerCpuSeconds.toFixed(1), p.othersCores.toFixed(2)]),
    ),
    '',
    `Without fair sharing (third phase) trickle waits behind the whole queue: p99 ${ms(fifo.trickle.p99)} ms, ${fifo.trickle.rejected} of its ${fifo.trickle.requests} requests turned away.`,
    '',
  ];
  const svg = stack([
    barChart(
      'trickle latency to the last byte (ms, lower is better)',
      'ms',
      phases.map((p, i) => ({
        label: ['alone', 'beside flood', 'same key (FIFO)'][i] ?? p.name,
        values: [
          { name: 'p50', value: Number.isFinite(p.trickle.p50) ? p.trickle.p50 : 0 },
          { name: 'p99', value: Number.isFinite(p.trickle.p99) ? p.trickle.p99 : 0 },
        ],
      })),
    ),
  ]);
  const out = write('fairness', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`fairness: wrote ${out.md} and ${out.svg}`);
}

await main();
