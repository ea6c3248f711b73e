/**
 * Where the added latency goes, step by step: modelgate and the Node floor (lib/node-proxy.ts) at the
 * overhead benchmark's latency loads (500 requests/s and 500 streams/s offered, one zero-latency
 * simulator), each request's steps timed inside the process by the phase probe (src/core/phases.ts,
 * lib/phase-probe.ts, loaded with `--import`). Medians per step, so that the next thing to cut is
 * chosen from data; the end-to-end added latency of the same windows, against the simulator reached
 * directly, alongside. A diagnostic run: the probe costs a little itself, and overhead.ts is the
 * latency run. BENCH_PATH_AB=DIST/cli.js adds another build of modelgate in the same rounds (an A/B:
 * runs apart differ more than the builds do on this machine). Writes bench/results/path.{md,svg}.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { load } from './lib/loadgen.js';
import { STEPS, type ProbeDump, type Step } from './lib/phase-probe.js';
import { BENCH_KEY, startModelgate, startNodeProxy, startSim, type ModelgateProc, type Proc } from './lib/procs.js';
import { barChart, machine, percentile, SMOKE, source, summarize, table, write } from './lib/report.js';

const MODEL = 'bench-model';
const RATE = 500;
const ROUNDS = SMOKE ? 1 : 3;
const WINDOW_MS = SMOKE ? 500 : 10_000;
const WARM_MS = SMOKE ? 200 : 3_000;
const bodyOf = (stream: boolean): string =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Write a haiku about load balancers.' }], max_tokens: 16, ignore_eos: true, ...(stream ? { stream: true } : {}) });
const MODES = [
  { name: 'non-streamed', stream: false, latency: 'time to last byte' },
  { name: 'streamed', stream: true, latency: 'time to first byte' },
] as const;
type ModeName = (typeof MODES)[number]['name'];

/** What runs between the step before and this one. */
const WHAT: Record<Exclude<Step, 'received'>, string> = {
  authenticated: 'request context (id, client address), the key checked (against the one its connection remembers, else its SHA-256 against every key)',
  body_read: 'the body read (Node streams it in; one Buffer.concat)',
  validated: 'JSON parse, size and depth checks, schema validation (ajv)',
  planned: 'model resolved, priority, per-key limits, route planned, engine headers built',
  picked: 'admission, the pool view, prompt blocks hashed, the scheduler',
  sent: 'the attempt set up (one timer), the engine request built and handed to undici, which starts writing it once the kept-alive connection is checked idle (a setImmediate: what else the loop turn runs comes first); the Node floor: handed to Node http.request, written when its agent gives it the socket (next tick)',
  responded: 'the engine: both socket hops and its own work (the simulator answers at once)',
  first_byte: 'response head (headers filtered), the attempt settled, first chunk written to the socket',
  finished: 'the rest of the body (a stream: its other events), the end, the response finished (for the Node floor, its socket write)',
};

/** One mode's rounds of a target: what its probe gathered, and the load generator's p50 and p99 (TTLB, or TTFB for streams). */
interface Rounds {
  dumps: ProbeDump[];
  p50: number[];
  p99: number[];
}

interface Target {
  name: string;
  proc: Proc;
  url: string;
  headers: Record<string, string>;
  out?: string;
  modes: Record<ModeName, Rounds>;
}

const noRounds = (): Record<ModeName, Rounds> => ({ 'non-streamed': { dumps: [], p50: [], p99: [] }, streamed: { dumps: [], p50: [], p99: [] } });

/** Asks a probed process for what it gathered since it was last asked (and makes it start again). */
async function collect(target: Target): Promise<ProbeDump | undefined> {
  const file = target.out;
  if (!file) return undefined;
  rmSync(file, { force: true });
  process.kill(target.proc.pid, 'SIGUSR2');
  for (let waited = 0; waited < 5_000; waited += 20) {
    if (existsSync(file)) {
      try {
        return JSON.parse(readFileSync(file, 'utf8')) as ProbeDump;
      } catch {
        // still being written
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${target.name}: the phase probe wrote nothing to ${file}`);
}

/** The q-quantile of values in any order. */
const quantile =
  (q: number) =>
  (values: readonly number[]): number =>
    percentile(
      [...values].sort((a, b) => a - b),
      q,
    );
const median = quantile(0.5);
const p90 = quantile(0.9);
const p99 = quantile(0.99);
const merged = (dumps: readonly ProbeDump[], pick: (d: ProbeDump) => number[] | undefined): number[] => dumps.flatMap((d) => pick(d) ?? []);

const dir = mkdtempSync(join(tmpdir(), 'mg-path-'));
const sim = await startSim('upstream', ['--model', MODEL, '--ttft-ms', '0', '--itl-ms', '0', '--prefill-ms-per-token', '0', '--max-num-seqs', '1000', '--max-waiting', '100000']);
const modelgate: ModelgateProc = await startModelgate([sim.url], MODEL, {}, { phaseProbe: join(dir, 'modelgate.json') });
/** BENCH_PATH_AB=DIST/cli.js: another build of modelgate (with src/core/phases.ts) beside this one, in the same rounds. */
const other = process.env.BENCH_PATH_AB;
const otherGate = other ? await startModelgate([sim.url], MODEL, {}, { phaseProbe: join(dir, 'other.json'), cli: other }) : undefined;
const floor = await startNodeProxy(sim.url, join(dir, 'floor.json'));
const direct: Target = { name: 'direct', proc: sim, url: `${sim.url}/v1/chat/completions`, headers: {}, modes: noRounds() };
const auth = { authorization: `Bearer ${BENCH_KEY}` };
const probed: Target[] = [
  { name: 'modelgate', proc: modelgate, url: `${modelgate.url}/v1/chat/completions`, headers: auth, out: join(dir, 'modelgate.json'), modes: noRounds() },
  ...(otherGate ? [{ name: 'other build', proc: otherGate, url: `${otherGate.url}/v1/chat/completions`, headers: auth, out: join(dir, 'other.json'), modes: noRounds() }] : []),
  { name: 'Node floor', proc: floor, url: `${floor.url}/v1/chat/completions`, headers: {}, out: join(dir, 'floor.json'), modes: noRounds() },
];
const targets = [direct, ...probed];
try {
  for (const t of targets) {
    for (const mode of MODES) await load({ url: t.url, headers: t.headers, bodies: [bodyOf(mode.stream)], mode: 'closed', concurrency: 32, warmupMs: 0, durationMs: WARM_MS });
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      for (const mode of MODES) {
        const job = { url: t.url, headers: t.headers, bodies: [bodyOf(mode.stream)], mode: 'open' as const, rate: RATE, arrivals: 'fixed' as const, concurrency: 32 };
        await load({ ...job, warmupMs: 0, durationMs: WARM_MS / 3 });
        await collect(t); // what the warm-up left is dropped
        const result = await load({ ...job, warmupMs: 0, durationMs: WINDOW_MS });
        const dump = await collect(t);
        const rounds = t.modes[mode.name];
        if (dump) rounds.dumps.push(dump);
        const summary = summarize(result.samples, result.windowMs);
        const latency = mode.stream ? summary.ttfb : summary.ttlb;
        rounds.p50.push(latency.p50);
        rounds.p99.push(latency.p99);
      }
    }
  }
} finally {
  await modelgate.stop();
  await otherGate?.stop();
  await floor.stop();
  await sim.stop();
  rmSync(dir, { recursive: true, force: true });
}

const added = (t: Target, mode: ModeName, stat: 'p50' | 'p99'): number => {
  const base = direct.modes[mode][stat];
  return median(t.modes[mode][stat].map((v, i) => v - (base[i] as number)));
};
const gaps = (t: Target, mode: ModeName, step: Step): number[] => merged(t.modes[mode].dumps, (d) => d.gaps[step]);
const cell = (t: Target, mode: ModeName, step: Step, stat: (v: readonly number[]) => number): string => {
  const values = gaps(t, mode, step);
  return values.length === 0 ? '—' : stat(values).toFixed(1);
};
const steps = STEPS.filter((s): s is Exclude<Step, 'received'> => s !== 'received');
const stats = [
  ['p50', median],
  ['p90', p90],
  ['p99', p99],
] as const;
const per = (t: Target, mode: ModeName, pick: (d: ProbeDump) => number[]): number[] => merged(t.modes[mode].dumps, pick);
const count = (t: Target, mode: ModeName): number => t.modes[mode].dumps.reduce((n, d) => n + d.requests, 0);
const leftOut = (t: Target, mode: ModeName): number => t.modes[mode].dumps.reduce((n, d) => n + d.leftOut, 0);

const section = (mode: (typeof MODES)[number]): string[] => [
  `## ${mode.name === 'streamed' ? 'Streamed (SSE, 18 events), 500 streams/s' : 'Non-streamed, 500 requests/s'}`,
  '',
  table(
    ['step', 'what runs since the step before', ...stats.flatMap(([label]) => probed.map((t) => `${t.name} ${label}`))],
    steps.map((step) => [`→ ${step}`, WHAT[step], ...stats.flatMap(([, stat]) => probed.map((t) => cell(t, mode.name, step, stat)))]),
  ),
  '',
  table(
    ['', ...probed.map((t) => t.name)],
    [
      ['requests timed (left out: retried)', ...probed.map((t) => `${count(t, mode.name)} (${leftOut(t, mode.name)})`)],
      ...stats.map(([label, stat]) => [
        `in the process up to the first byte, not waiting for the engine: ${label} µs`,
        ...probed.map((t) => stat(per(t, mode.name, (d) => d.ownToFirstByte)).toFixed(1)),
      ]),
      ['in the process to the end, not waiting for the engine: p50 µs', ...probed.map((t) => median(per(t, mode.name, (d) => d.own)).toFixed(1))],
      [
        `end to end, ${mode.latency} added over direct: p50 / p99 ms (medians of the rounds)`,
        ...probed.map((t) => `${added(t, mode.name, 'p50').toFixed(3)} / ${added(t, mode.name, 'p99').toFixed(2)}`),
      ],
    ],
  ),
  '',
];

const md = [
  '# Where the added latency goes, step by step',
  '',
  `modelgate and the Node floor (\`bench/lib/node-proxy.ts\`: read, parse, forward, relay; nothing else) at ${RATE} requests/s`,
  'and 500 streams/s offered (fixed arrivals, one zero-latency simulator), as in the overhead benchmark. Inside each process',
  'the phase probe (`bench/lib/phase-probe.ts`, loaded with `--import`) times the gap between the steps each request',
  'passes (`src/core/phases.ts`; the floor marks the steps it has, so a step it lacks is folded into its next one). µs,',
  `over ${ROUNDS} alternated rounds of ${WINDOW_MS / 1000} s per target and mode. A diagnostic run: the probe's own`,
  "work is in the gaps, and `overhead.md` is the latency measurement. A step's p99 is where a pause of the whole process",
  '(a garbage collection, the thread not scheduled) shows: it lands in whichever step it interrupts.',
  '',
  ...machine(),
  source(),
  `- modelgate started as \`${modelgate.started}\`, with NODE_OPTIONS \`${modelgate.nodeOptions ?? ''}\``,
  ...(otherGate ? [`- other build (BENCH_PATH_AB): \`${otherGate.started}\``] : []),
  '',
  ...MODES.flatMap(section),
  'The floor writes its first chunk when the tick ends (Node corks a response until then), so its socket write is in',
  '`→ finished`; modelgate sends its first chunk at once (src/proxy/relay.ts), so its write is in `→ first_byte`. Compare',
  'the sums from `→ responded` on, and the time in the process.',
  '',
].join('\n');

const svg = barChart(
  'Time in each step at 500 requests/s, non-streamed (p50)',
  'µs',
  steps.filter((step) => step !== 'responded').map((step) => ({ label: step, values: probed.map((t) => ({ name: t.name, value: median(gaps(t, 'non-streamed', step)) || 0 })) })),
);
const written = write('path', md, svg);
console.log(md);
console.log(`wrote ${written.md} and ${written.svg}`);
