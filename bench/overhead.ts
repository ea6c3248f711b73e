/**
 * Proxy overhead: one zero-latency simulator reached directly, through modelgate, nginx (least_conn),
 * HAProxy (leastconn) and Portkey's gateway, in the same run. Per target: max requests/s at fixed
 * concurrency and latency at a fixed offered rate, non-streamed and streamed, plus the proxy's CPU
 * time per request and peak RSS. Writes bench/results/overhead.{md,svg}.
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import { load, type LoadJob } from './lib/loadgen.js';
import { BENCH_KEY, startHaproxy, startModelgate, startNginx, startNodeProxy, startPortkey, startSim, usage, type ModelgateProc, type Proc } from './lib/procs.js';
import { barChart, machine, othersCpu, SMOKE, source, stack, summarize, table, tools, write, type Summary } from './lib/report.js';

const MODEL = 'bench-model';
const WARMUP_MS = SMOKE ? 200 : 2_000;
/**
 * Load every target gets once, before its first phase: closed-loop requests, then streams, for this
 * long each. A JIT-compiled process (modelgate, Portkey) starts with cold code and a heap still
 * growing to its working size: modelgate's first seconds under load ran at about two thirds of its
 * later rate, and the throughput window, opening 2 s after the process started, mostly measured
 * them. The report shows each target's rate second by second through this warm-up.
 */
const STEADY_MS = SMOKE ? 200 : 8_000;
const WINDOW_MS = SMOKE ? 500 : 10_000;
const CONCURRENCY = 32;
const RATE = 500;
const STREAM_RATE = 500;
/** Diagnostic runs: only these targets (name prefixes, comma-separated) besides the direct baseline. */
const ONLY = process.env.BENCH_OVERHEAD_TARGETS?.split(',').filter(Boolean);
const body = (stream: boolean): string =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Write a haiku about load balancers.' }], max_tokens: 16, ignore_eos: true, ...(stream ? { stream: true } : {}) });

interface Target {
  name: string;
  start(upstream: string): Promise<Proc | undefined>;
  url(proc: Proc | undefined, upstream: string): string;
  headers(upstream: string): Record<string, string>;
  available(): boolean;
}

const hasCommand = (cmd: string): boolean => process.env.PATH!.split(':').some((dir) => existsSync(`${dir}/${cmd}`));
const PORTKEY = new URL('../../bench/portkey/node_modules/@portkey-ai/gateway/build/start-server.js', import.meta.url).pathname.replace('/.bench/bench/', '/bench/');

const TARGETS: Target[] = [
  { name: 'direct', start: () => Promise.resolve(undefined), url: (_, up) => `${up}/v1/chat/completions`, headers: () => ({}), available: () => true },
  {
    name: 'modelgate',
    start: (up) => startModelgate([up], MODEL),
    url: (p) => `${p!.url}/v1/chat/completions`,
    headers: () => ({ authorization: `Bearer ${BENCH_KEY}` }),
    available: () => true,
  },
  // the floor for a router on Node's HTTP stack (bench/lib/node-proxy.ts): how much of modelgate's cost is Node's own
  { name: 'node http proxy', start: (up) => startNodeProxy(up), url: (p) => `${p!.url}/v1/chat/completions`, headers: () => ({}), available: () => true },
  { name: 'nginx least_conn', start: (up) => startNginx([up]), url: (p) => `${p!.url}/v1/chat/completions`, headers: () => ({}), available: () => hasCommand('nginx') },
  { name: 'haproxy leastconn', start: (up) => startHaproxy([up], 'leastconn'), url: (p) => `${p!.url}/v1/chat/completions`, headers: () => ({}), available: () => hasCommand('haproxy') },
  {
    name: 'portkey',
    start: () => startPortkey(),
    url: (p) => `${p!.url}/v1/chat/completions`,
    // Portkey's load-balance config, sent per request as its docs describe
    headers: (up) => ({
      'x-portkey-config': JSON.stringify({ strategy: { mode: 'loadbalance' }, targets: [{ provider: 'openai', custom_host: `${up}/v1`, api_key: 'unused', weight: 1 }] }),
    }),
    available: () => existsSync(PORTKEY) && process.env.BENCH_NO_PORTKEY !== '1',
  },
];

interface Row {
  name: string;
  throughput: Summary;
  latency: Summary;
  streamThroughput: Summary;
  streamLatency: Summary;
  cpuMsPerRequest: number;
  peakRssMiB: number;
  maxSendLagMs: number;
  /** CPU other processes on the machine used while this target was measured (cores on average). */
  othersCores: number;
  /** modelgate only: how it was started and what ran. */
  router?: Pick<ModelgateProc, 'started' | 'running' | 'nodeOptions'>;
  /** Requests answered in each second of the closed-loop warm-up (non-streamed), from the process's first request. */
  warmUp: number[];
}

/** Answers per second of a window, by when each was scheduled. */
function perSecond(samples: ReadonlyArray<{ at: number; status: number }>, windowMs: number): number[] {
  const counts = new Array<number>(Math.floor(windowMs / 1000)).fill(0);
  for (const s of samples) {
    const second = Math.floor(s.at / 1000);
    if (s.status === 200 && second < counts.length) counts[second]! += 1;
  }
  return counts;
}

async function measure(target: Target, upstream: string): Promise<Row> {
  const others = othersCpu();
  const proc = await target.start(upstream);
  try {
    const base = { url: target.url(proc, upstream), headers: target.headers(upstream), warmupMs: WARMUP_MS, durationMs: WINDOW_MS };
    const steady = await load({ ...base, bodies: [body(false)], mode: 'closed', concurrency: CONCURRENCY, warmupMs: 0, durationMs: STEADY_MS });
    await load({ ...base, bodies: [body(true)], mode: 'closed', concurrency: CONCURRENCY, warmupMs: 0, durationMs: STEADY_MS });
    const cpu0 = proc ? usage(proc.pid).cpuSeconds : 0;
    let requests = 0;
    let lag = 0;
    const phase = async (job: Omit<LoadJob, 'url' | 'headers' | 'warmupMs' | 'durationMs'>): Promise<Summary> => {
      // diagnostic runs: when each phase ran, to line it up with the router's GC log
      if (process.env.BENCH_ROUTER_GC_LOG) console.error(`overhead: ${target.name} ${job.mode} ${job.bodies[0]!.includes('"stream"') ? 'streamed' : 'non-streamed'} from ${Date.now()}`);
      const result = await load({ ...base, ...job });
      requests += result.finished;
      lag = Math.max(lag, result.maxSendLagMs);
      return summarize(result.samples, result.windowMs);
    };
    const throughput = await phase({ bodies: [body(false)], mode: 'closed', concurrency: CONCURRENCY });
    const latency = await phase({ bodies: [body(false)], mode: 'open', rate: RATE, arrivals: 'fixed' });
    const streamThroughput = await phase({ bodies: [body(true)], mode: 'closed', concurrency: CONCURRENCY });
    const streamLatency = await phase({ bodies: [body(true)], mode: 'open', rate: STREAM_RATE, arrivals: 'fixed' });
    const use = proc ? usage(proc.pid) : { cpuSeconds: 0, peakRssMiB: 0 };
    // CPU over every phase, warm-ups included, per request finished in them
    const router = proc && 'running' in proc ? (proc as ModelgateProc) : undefined;
    return {
      name: target.name,
      throughput,
      latency,
      streamThroughput,
      streamLatency,
      cpuMsPerRequest: requests ? ((use.cpuSeconds - cpu0) * 1000) / requests : 0,
      peakRssMiB: use.peakRssMiB,
      maxSendLagMs: lag,
      othersCores: others(),
      warmUp: perSecond(steady.samples, steady.windowMs),
      ...(router ? { router: { started: router.started, running: router.running, ...(router.nodeOptions ? { nodeOptions: router.nodeOptions } : {}) } } : {}),
    };
  } finally {
    await proc?.stop();
  }
}

/** Latency through one target at the paired rates: non-streamed at RATE, streamed at STREAM_RATE. */
interface Latencies {
  plain: Summary;
  stream: Summary;
}
/** One round of the paired latency measurement: direct, through modelgate and through the Node floor, each kind back to back. */
interface Round {
  direct: Latencies;
  modelgate: Latencies;
  node: Latencies;
  othersCores: number;
}
const ROUNDS = SMOKE ? 1 : 5;
/** One round of the paired throughput measurement: closed-loop requests/s through each proxy, back to back. */
interface ThroughputRound {
  modelgate: number;
  node: number;
  haproxy: number | undefined;
  othersCores: number;
}
const THROUGHPUT_WINDOW_MS = SMOKE ? 500 : 5_000;

/**
 * Latency at RATE (non-streamed) and STREAM_RATE (streamed TTFB), direct, through one modelgate
 * process and through the Node floor (node-proxy.ts), in turn for ROUNDS rounds: in each round the
 * non-streamed windows, then the streamed ones, back to back, each target first, second and last in
 * turn. Every difference compares windows seconds apart, so a burst of load from elsewhere on the
 * machine shows up as one odd round instead of deciding the verdict (a single window's p99 moved by
 * several ms from one run to the next on a shared 2-core machine). Both proxies are warmed up first
 * as in the sweep.
 *
 * Then throughput the same way: ROUNDS rounds of closed-loop requests through modelgate, the Node floor
 * and HAProxy, each first, second and last in turn. On this machine the same build's closed-loop rate
 * moved by up to 1.75× between windows minutes apart (its CPU per request with it: the host's
 * contention, which the guest does not see as steal time), so a ratio of two windows measured minutes
 * apart in the sweep says as much about the minute as about the proxies. The throughput target takes
 * the median of the rounds' ratios.
 */
async function paired(upstream: string): Promise<{ rounds: Round[]; throughput: ThroughputRound[] }> {
  const find = (name: string): Target => TARGETS.find((t) => t.name === name)!;
  const [direct, mgTarget, nodeTarget, hapTarget] = [find('direct'), find('modelgate'), find('node http proxy'), find('haproxy leastconn')];
  const procs = new Map<Target, Proc | undefined>();
  try {
    for (const t of [mgTarget, nodeTarget]) procs.set(t, await t.start(upstream));
    const haproxy = hapTarget.available() ? hapTarget : undefined;
    if (haproxy) procs.set(haproxy, await haproxy.start(upstream));
    const job = (t: Target, stream: boolean): LoadJob => ({
      url: t.url(procs.get(t), upstream),
      headers: t.headers(upstream),
      bodies: [body(stream)],
      mode: 'open',
      rate: stream ? STREAM_RATE : RATE,
      arrivals: 'fixed',
      warmupMs: WARMUP_MS,
      durationMs: WINDOW_MS,
    });
    for (const t of [mgTarget, nodeTarget]) {
      for (const stream of [false, true]) await load({ ...job(t, stream), mode: 'closed', concurrency: CONCURRENCY, durationMs: WINDOW_MS / 2 });
    }
    const rounds: Round[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const others = othersCpu();
      const run = async (t: Target, stream: boolean): Promise<Summary> => {
        const result = await load(job(t, stream));
        return summarize(result.samples, result.windowMs);
      };
      // each target first, second and last in turn
      const all = [direct, mgTarget, nodeTarget];
      const order = [...all.slice(i % 3), ...all.slice(0, i % 3)];
      const got = new Map<Target, Latencies>(order.map((t) => [t, {} as Latencies]));
      for (const stream of [false, true]) for (const t of order) got.get(t)![stream ? 'stream' : 'plain'] = await run(t, stream);
      rounds.push({ direct: got.get(direct)!, modelgate: got.get(mgTarget)!, node: got.get(nodeTarget)!, othersCores: others() });
    }
    const throughput: ThroughputRound[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const others = othersCpu();
      const all = [mgTarget, nodeTarget, ...(haproxy ? [haproxy] : [])];
      const order = [...all.slice(i % all.length), ...all.slice(0, i % all.length)];
      const rps = new Map<Target, number>();
      for (const t of order) {
        const result = await load({ ...job(t, false), mode: 'closed', concurrency: CONCURRENCY, warmupMs: WARMUP_MS / 2, durationMs: THROUGHPUT_WINDOW_MS });
        rps.set(t, summarize(result.samples, result.windowMs).rps);
      }
      throughput.push({ modelgate: rps.get(mgTarget)!, node: rps.get(nodeTarget)!, haproxy: haproxy && rps.get(haproxy), othersCores: others() });
    }
    return { rounds, throughput };
  } finally {
    for (const proc of procs.values()) await proc?.stop();
  }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a');
const ratio = (a: number, b: number): string => (b > 0 && Number.isFinite(a / b) ? `${(a / b).toFixed(2)}×` : 'n/a');

const loadavg = (): string =>
  os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ');

async function main(): Promise<void> {
  const loadBefore = loadavg();
  const sim = await startSim('upstream', ['--model', MODEL, '--ttft-ms', '0', '--itl-ms', '0', '--prefill-ms-per-token', '0', '--max-num-seqs', '1000', '--max-waiting', '100000']);
  const rows: Row[] = [];
  const skipped: string[] = [];
  let rounds: Round[] = [];
  let throughputRounds: ThroughputRound[] = [];
  try {
    for (const target of TARGETS) {
      if (ONLY && target.name !== 'direct' && !ONLY.some((n) => target.name.startsWith(n))) {
        skipped.push(`${target.name} (BENCH_OVERHEAD_TARGETS)`);
        continue;
      }
      if (!target.available()) {
        skipped.push(`${target.name} (not installed: bench/setup.sh)`);
        console.error(`overhead: ${target.name} not installed (run bench/setup.sh), skipped`);
        continue;
      }
      console.error(`overhead: ${target.name}…`);
      rows.push(await measure(target, sim.url));
    }
    if (rows.some((r) => r.name === 'modelgate')) {
      console.error(`overhead: latency at ${RATE}/s and TTFB at ${STREAM_RATE}/s, direct, modelgate and the Node floor in turn; then throughput, modelgate, the Node floor and HAProxy in turn…`);
      ({ rounds, throughput: throughputRounds } = await paired(sim.url));
    }
  } finally {
    await sim.stop();
  }
  const loadAfter = loadavg();
  const direct = rows[0]!;
  const by = (name: string): Row | undefined => rows.find((r) => r.name === name);
  const added = (r: Row, pick: (r: Row) => number): number => pick(r) - pick(direct);

  const mgRouter = rows.find((r) => r.router)?.router;
  const modelgateStart = mgRouter
    ? [
        `modelgate is started as users start it, \`${mgRouter.started}\`, with no Node flags and the default configuration but for`,
        'ports, the API key file and a zero shutdown delay (access log on, at `info`, to a file). The running process',
        `(\`/proc/PID/cmdline\`) was \`${mgRouter.running}\`: the flags the executable adds itself (\`src/runtime.ts\`).`,
        ...(mgRouter.nodeOptions
          ? [`**Diagnostic run: the router had \`NODE_OPTIONS=${mgRouter.nodeOptions}\` (BENCH_ROUTER_NODE_OPTIONS or BENCH_ROUTER_GC_LOG): not the product as it ships.**`]
          : []),
      ]
    : [];
  const lines: string[] = [
    '# Proxy overhead',
    '',
    'One zero-latency simulator (`modelgate sim --ttft-ms 0 --itl-ms 0 --prefill-ms-per-token 0`, 16 output tokens) reached',
    'directly and through each proxy, in this one run. Load generator: a separate Node process (`bench/lib/loadgen.ts`),',
    'keep-alive connections, latency measured from the scheduled send time. nginx runs one worker, HAProxy one thread,',
    'modelgate and Portkey one Node process each: every proxy gets one core, like the router would per replica of its Deployment.',
    `Throughput: closed loop, ${CONCURRENCY} requests in flight. Latency: open loop at ${RATE} requests/s (non-streamed) and`,
    `${STREAM_RATE} streams/s (streamed). Windows of ${WINDOW_MS / 1000} s after ${WARMUP_MS / 1000} s of warm-up each, once every target has had`,
    `${STEADY_MS / 1000} s of closed-loop requests and ${STEADY_MS / 1000} s of closed-loop streams after it started (a JIT-compiled process needs`,
    'seconds to reach its working speed: the rates through that warm-up are at the end).',
    '',
    ...(modelgateStart.length ? [...modelgateStart, ''] : []),
    ...machine(),
    source(),
    `- load average (1 / 5 / 15 min) before the run: ${loadBefore}; after: ${loadAfter}`,
    ...tools(),
    '- Portkey gateway 1.15.2 (`bench/portkey`, @hono/node-server 1.13.5)',
    ...(skipped.length ? [`- skipped: ${skipped.join(', ')}`] : []),
    '',
    '## Non-streamed chat completion',
    '',
    table(
      ['target', 'max req/s', 'p50 ms', 'p99 ms', 'added p50 ms', 'added p99 ms', 'proxy CPU ms/req', 'proxy peak RSS MiB', 'errors'],
      rows.map((r) => [
        r.name,
        r.throughput.rps,
        ms(r.latency.ttlb.p50),
        ms(r.latency.ttlb.p99),
        r === direct ? '—' : ms(added(r, (x) => x.latency.ttlb.p50)),
        r === direct ? '—' : ms(added(r, (x) => x.latency.ttlb.p99)),
        r === direct ? '—' : r.cpuMsPerRequest.toFixed(3),
        r === direct ? '—' : r.peakRssMiB,
        r.throughput.errors + r.latency.errors,
      ]),
    ),
    '',
    '## Streamed chat completion (SSE, 18 events per stream)',
    '',
    table(
      ['target', 'max streams/s', 'events/s', 'TTFB p50 ms', 'TTFB p99 ms', 'added TTFB p50 ms', 'added TTFB p99 ms', 'TTLB p50 ms', 'TTLB p99 ms', 'errors'],
      rows.map((r) => [
        r.name,
        r.streamThroughput.rps,
        Math.round(r.streamThroughput.eventsPerSecond),
        ms(r.streamLatency.ttfb.p50),
        ms(r.streamLatency.ttfb.p99),
        r === direct ? '—' : ms(added(r, (x) => x.streamLatency.ttfb.p50)),
        r === direct ? '—' : ms(added(r, (x) => x.streamLatency.ttfb.p99)),
        ms(r.streamLatency.ttlb.p50),
        ms(r.streamLatency.ttlb.p99),
        r.streamThroughput.errors + r.streamLatency.errors,
      ]),
    ),
    '',
  ];
  const hapRounds = throughputRounds.filter((r) => r.haproxy !== undefined && r.haproxy > 0);
  /** modelgate's throughput as a share of HAProxy's: the median of the paired rounds' ratios. */
  const pairedRatio = (): number => median(hapRounds.map((r) => r.modelgate / r.haproxy!));
  /** What a proxy added in a round: non-streamed time to last byte, or streamed time to first byte. */
  const addedBy = (r: Round, who: 'modelgate' | 'node', kind: 'plain' | 'stream', q: 'p50' | 'p99'): number =>
    kind === 'plain' ? r[who].plain.ttlb[q] - r.direct.plain.ttlb[q] : r[who].stream.ttfb[q] - r.direct.stream.ttfb[q];
  const pairedMedian = (kind: 'plain' | 'stream', q: 'p50' | 'p99', who: 'modelgate' | 'node' = 'modelgate'): number => median(rounds.map((r) => addedBy(r, who, kind, q)));
  if (rounds.length) {
    const roundTable = (kind: 'plain' | 'stream'): string => {
      const figure = kind === 'plain' ? 'ttlb' : 'ttfb';
      const cell = (l: Latencies): string => `${ms(l[kind][figure].p50)} / ${ms(l[kind][figure].p99)}`;
      const pair = (r: Round, who: 'modelgate' | 'node'): string => `${ms(addedBy(r, who, kind, 'p50'))} / ${ms(addedBy(r, who, kind, 'p99'))}`;
      return table(
        ['round', 'direct p50 / p99 ms', 'modelgate p50 / p99 ms', 'node http proxy p50 / p99 ms', 'modelgate added p50 / p99 ms', 'node http proxy added p50 / p99 ms', 'errors'],
        [
          ...rounds.map((r, i) => [
            String(i + 1),
            cell(r.direct),
            cell(r.modelgate),
            cell(r.node),
            pair(r, 'modelgate'),
            pair(r, 'node'),
            r.direct[kind].errors + r.modelgate[kind].errors + r.node[kind].errors,
          ]),
          ['median', '', '', '', `${ms(pairedMedian(kind, 'p50'))} / ${ms(pairedMedian(kind, 'p99'))}`, `${ms(pairedMedian(kind, 'p50', 'node'))} / ${ms(pairedMedian(kind, 'p99', 'node'))}`, ''],
        ],
      );
    };
    lines.push(
      `## Latency at ${RATE} requests/s and ${STREAM_RATE} streams/s: direct, modelgate and the Node floor in turn`,
      '',
      `${rounds.length} rounds after the sweep above, with one modelgate process and one \`node http proxy\` (\`bench/lib/node-proxy.ts\`:`,
      'the least a router on Node’s HTTP stack does — read and parse the JSON body, forward it on a keep-alive agent, relay the',
      'answer, parse a JSON answer — with no authentication, validation, scheduling, retries, timeouts, metrics or logs), both',
      `warmed up by closed-loop requests and streams first. Each round: a ${WINDOW_MS / 1000} s window of each target non-streamed, then`,
      'streamed, back to back, each target first, second and last in turn. The latency targets take the median round; the',
      'sweep above measured each target once. What the Node floor adds is what any router on Node pays on this machine.',
      '',
      'Non-streamed, time to last byte:',
      '',
      roundTable('plain'),
      '',
      'Streamed, time to first byte:',
      '',
      roundTable('stream'),
      '',
      `CPU used by other processes on the machine in each round, in cores of ${os.cpus().length}: ${rounds.map((r) => r.othersCores.toFixed(2)).join(', ')}.`,
      '',
    );
  }
  if (throughputRounds.length) {
    const rate = (v: number | undefined): string => (v === undefined ? 'n/a' : v.toFixed(0));
    lines.push(
      `## Throughput: modelgate, the Node floor and HAProxy in turn`,
      '',
      `${throughputRounds.length} rounds after the latency rounds, with the same warm processes and one HAProxy: a ${THROUGHPUT_WINDOW_MS / 1000} s closed-loop window`,
      `(${CONCURRENCY} requests in flight, non-streamed) through each, back to back, each first, second and last in turn. The throughput`,
      'target takes the median of the rounds’ ratios: the sweep above measured each target once, minutes apart, and this',
      'machine’s speed moves by more than the difference in between.',
      '',
      table(
        ['round', 'modelgate req/s', 'node http proxy req/s', 'haproxy leastconn req/s', 'modelgate ÷ HAProxy', 'node http proxy ÷ HAProxy', 'other processes (cores)'],
        [
          ...throughputRounds.map((r, i) => [
            String(i + 1),
            rate(r.modelgate),
            rate(r.node),
            rate(r.haproxy),
            r.haproxy ? ratio(r.modelgate, r.haproxy) : 'n/a',
            r.haproxy ? ratio(r.node, r.haproxy) : 'n/a',
            r.othersCores.toFixed(2),
          ]),
          [
            'median',
            rate(median(throughputRounds.map((r) => r.modelgate))),
            rate(median(throughputRounds.map((r) => r.node))),
            rate(hapRounds.length ? median(hapRounds.map((r) => r.haproxy!)) : undefined),
            hapRounds.length ? `${pairedRatio().toFixed(2)}×` : 'n/a',
            hapRounds.length ? `${median(hapRounds.map((r) => r.node / r.haproxy!)).toFixed(2)}×` : 'n/a',
            '',
          ],
        ],
      ),
      '',
    );
  }
  const mg = by('modelgate');
  const hap = by('haproxy leastconn');
  const pk = by('portkey');
  if (mg) {
    const latencyFigures = (r: Row): number[] => [r.latency.ttlb.p50, r.latency.ttlb.p99, r.streamLatency.ttfb.p50, r.streamLatency.ttfb.p99, r.streamLatency.ttlb.p50, r.streamLatency.ttlb.p99];
    const check = (ok: boolean | undefined): string => (ok === undefined ? 'not measured' : ok ? 'met' : '**missed**');
    // median of the alternated rounds, the rounds and the sweep's single window alongside
    const sweep = (kind: 'plain' | 'stream', q: 'p50' | 'p99'): number => (kind === 'plain' ? added(mg, (x) => x.latency.ttlb[q]) : added(mg, (x) => x.streamLatency.ttfb[q]));
    const pairedCell = (kind: 'plain' | 'stream', q: 'p50' | 'p99'): string =>
      rounds.length
        ? `${ms(pairedMedian(kind, q))} ms (median of ${rounds.map((r) => ms(addedBy(r, 'modelgate', kind, q))).join(' / ')}; sweep ${ms(sweep(kind, q))})`
        : `${ms(sweep(kind, q))} ms (sweep)`;
    const verdict = (kind: 'plain' | 'stream', q: 'p50' | 'p99', limit: number): string => check((rounds.length ? pairedMedian(kind, q) : sweep(kind, q)) <= limit);
    lines.push(
      '## Targets',
      '',
      table(
        ['target', 'measured', 'verdict'],
        [
          [`added latency p50 ≤ 0.3 ms at ${RATE} req/s (issue 18; milestone 1: ≤ 1 ms)`, pairedCell('plain', 'p50'), verdict('plain', 'p50', 0.3)],
          [`added latency p99 ≤ 2 ms at ${RATE} req/s (milestone 1: ≤ 3 ms)`, pairedCell('plain', 'p99'), verdict('plain', 'p99', 2)],
          [`added stream TTFB p50 ≤ 1 ms at ${STREAM_RATE} streams/s`, pairedCell('stream', 'p50'), verdict('stream', 'p50', 1)],
          [`added p99 TTFB ≤ 2 ms at ${STREAM_RATE} streams/s (milestone 1: ≤ 3 ms)`, pairedCell('stream', 'p99'), verdict('stream', 'p99', 2)],
          [
            'added over the Node floor (median rounds; reported): p50 / p99 at 500 req/s; TTFB p50 / p99',
            rounds.length
              ? `${ms(pairedMedian('plain', 'p50') - pairedMedian('plain', 'p50', 'node'))} / ${ms(pairedMedian('plain', 'p99') - pairedMedian('plain', 'p99', 'node'))} ms; ${ms(pairedMedian('stream', 'p50') - pairedMedian('stream', 'p50', 'node'))} / ${ms(pairedMedian('stream', 'p99') - pairedMedian('stream', 'p99', 'node'))} ms`
              : 'n/a',
            'reported',
          ],
          [
            'lower than Portkey on every latency figure',
            pk
              ? latencyFigures(mg)
                  .map((v, i) => `${ms(v)} vs ${ms(latencyFigures(pk)[i]!)}`)
                  .join('; ')
              : 'n/a',
            check(pk && latencyFigures(mg).every((v, i) => v < latencyFigures(pk)[i]!)),
          ],
          [
            'throughput ≥ 50% of HAProxy (milestone 1: 40%)',
            hapRounds.length
              ? `${pairedRatio().toFixed(2)}× (median of ${hapRounds.map((r) => ratio(r.modelgate, r.haproxy!)).join(' / ')}; sweep ${hap ? ratio(mg.throughput.rps, hap.throughput.rps) : 'n/a'})`
              : `${hap ? ratio(mg.throughput.rps, hap.throughput.rps) : 'n/a'} (sweep)`,
            check(hapRounds.length ? pairedRatio() >= 0.5 : hap && mg.throughput.rps >= 0.5 * hap.throughput.rps),
          ],
          ['throughput ≥ 2× Portkey', pk ? ratio(mg.throughput.rps, pk.throughput.rps) : 'n/a', check(pk && mg.throughput.rps >= 2 * pk.throughput.rps)],
          [
            'stream throughput vs HAProxy / Portkey',
            `${hap ? ratio(mg.streamThroughput.rps, hap.streamThroughput.rps) : 'n/a'} / ${pk ? ratio(mg.streamThroughput.rps, pk.streamThroughput.rps) : 'n/a'}`,
            'reported',
          ],
        ],
      ),
      '',
    );
  }
  lines.push(
    `Largest send lag of the load generator in any phase: ${ms(Math.max(...rows.map((r) => r.maxSendLagMs)))} ms.`,
    `CPU used by other processes on the machine (not this benchmark) while each target was measured, in cores of ${os.cpus().length}:`,
    `${rows.map((r) => `${r.name} ${r.othersCores.toFixed(2)}`).join(', ')}.`,
    '',
    '## Warm-up',
    '',
    `Requests answered in each second of every target's first ${STEADY_MS / 1000} s of closed-loop requests (${CONCURRENCY} in flight), from its first`,
    'request; the throughput column above is measured after this and the streams that follow it.',
    '',
    table(
      ['target', ...Array.from({ length: Math.max(0, ...rows.map((r) => r.warmUp.length)) }, (_, i) => `s${i + 1}`)],
      rows.map((r) => [r.name, ...r.warmUp]),
    ),
    '',
  );

  const svg = stack([
    barChart(
      'Added latency over direct (ms, lower is better)',
      'ms',
      [
        { label: 'p50 @500/s', pick: (r: Row) => added(r, (x) => x.latency.ttlb.p50) },
        { label: 'p99 @500/s', pick: (r: Row) => added(r, (x) => x.latency.ttlb.p99) },
        { label: `TTFB p50 @${STREAM_RATE}/s`, pick: (r: Row) => added(r, (x) => x.streamLatency.ttfb.p50) },
        { label: `TTFB p99 @${STREAM_RATE}/s`, pick: (r: Row) => added(r, (x) => x.streamLatency.ttfb.p99) },
      ].map((g) => ({ label: g.label, values: rows.filter((r) => r !== direct).map((r) => ({ name: r.name, value: Math.max(0, g.pick(r)) })) })),
    ),
    barChart('Max throughput (requests/s, higher is better)', 'req/s', [
      { label: 'non-streamed', values: rows.map((r) => ({ name: r.name, value: r.throughput.rps })) },
      { label: 'streamed', values: rows.map((r) => ({ name: r.name, value: r.streamThroughput.rps })) },
    ]),
  ]);
  const out = write('overhead', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`overhead: wrote ${out.md} and ${out.svg}`);
}

await main();
