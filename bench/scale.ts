/**
 * Scale: (1) the cost of one pick with the default scheduling profile (breakers, health,
 * per-replica limit, the default scorers, admission) and the memory the router holds per endpoint, at 10, 100 and 1,000 endpoints, in
 * process with the router's own classes, and of authenticating a key on a new connection at 10 to 10,000 keys; (2) one static-mode router process started as users start
 * it: its RSS idle (after a few requests), then with thousands of concurrent open streams its RSS,
 * event-loop lag (prom-client's `nodejs_eventloop_lag_p99_seconds`, scraped during the hold) and how
 * long /metrics takes to answer, against issue 18's targets. Writes bench/results/scale.{md,svg}.
 * Run with --expose-gc for the memory figures.
 */
import { timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { KeyStore, sha256 } from '../src/auth/key-store.js';
import { type KeyEntry } from '../src/config/keys-file.js';
import { InFlight } from '../src/balancer/in-flight.js';
import { PrefixIndex } from '../src/balancer/prefix-index.js';
import { systemScheduler } from '../src/core/clock.js';
import { type Endpoint, type PoolSpec } from '../src/core/types.js';
import { EngineMetricsScraper } from '../src/engine-metrics/scraper.js';
import { AdmissionQueues } from '../src/resilience/admission.js';
import { BreakerRegistry } from '../src/resilience/breaker.js';
import { HealthChecker } from '../src/resilience/health-checker.js';
import { EndpointPicker } from '../src/resilience/picker.js';
import { RESILIENCE_DEFAULTS } from '../src/resilience/settings.js';
import { ROUTING_DEFAULTS } from '../src/balancer/settings.js';
import { load } from './lib/loadgen.js';
import { BENCH_KEY, startModelgate, startSim, usage } from './lib/procs.js';
import { mulberry32 } from './lib/random.js';
import { barChart, machine, percentile, SMOKE, stack, table, write } from './lib/report.js';

const SIZES = [10, 100, 1000];
/** Keys in the keys file, for the cost of authenticating a key on a fresh connection. */
const KEY_COUNTS = [10, 1000, 10_000];
const STREAMS = SMOKE ? 200 : 5000;
const RAMP_RATE = SMOKE ? 400 : 500; // new streams per second
const TOKEN_INTERVAL_MS = 1000; // each stream emits one token a second
const HOLD_MS = SMOKE ? 1500 : 30_000;
/** Requests the router answers (half of them streamed) before its idle RSS is read. */
const IDLE_REQUESTS = 10;
/** Issue 18's targets for one router process. */
const TARGET = { idleRssMiB: 90, holdRssMiB: 400, lagP99Ms: 20 } as const;

const gc = (): void => (globalThis as { gc?: () => void }).gc?.();

interface PickRow {
  endpoints: number;
  nsPerPick: number;
  bytesPerEndpoint: number;
}

interface KeyRow {
  keys: number;
  /** `KeyStore.authenticate` of a wrong key (every key on a new connection is checked so), ns. */
  nsPerKey: number;
  /** The same by the loop earlier versions ran, every digest compared in turn with timingSafeEqual, ns: the baseline. */
  nsPerKeyLoop: number;
}

/**
 * What a key presented on a new connection costs (a wrong key's included: a flood of made-up keys) as
 * the keys file grows: the store's lookup against the loop of earlier versions, which compared the
 * presented digest with every key's (the security hunt of the nineteenth round).
 */
async function keyCost(count: number): Promise<KeyRow> {
  const entries: KeyEntry[] = Array.from({ length: count }, (_, i) => ({ name: `team-${i}`, key: `sk-team-${i}-0123456789abcdef` }));
  const store = new KeyStore('keys.yaml', {}, () => Promise.resolve(entries));
  await store.load();
  const digests = entries.map((e) => sha256(e.key as string));
  const loop = (key: string): number => {
    const digest = sha256(key);
    let found = -1;
    for (let i = 0; i < digests.length; i++) if (timingSafeEqual(digest, digests[i] as Buffer) && found < 0) found = i;
    return found;
  };
  const rounds = SMOKE ? 200 : Math.max(2_000, 2_000_000 / count);
  const time = (run: (key: string) => unknown): number => {
    for (let i = 0; i < rounds / 4; i++) run(`sk-warm-${i}`);
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < rounds; i++) run(`sk-wrong-${i}-0123456789abcdef`);
    return Number(process.hrtime.bigint() - t0) / rounds;
  };
  if (store.authenticate(`sk-team-${count - 1}-0123456789abcdef`)?.name !== `team-${count - 1}`) throw new Error('the key store lost a key');
  return { keys: count, nsPerKey: time((key) => store.authenticate(key)), nsPerKeyLoop: time(loop) };
}

async function pickCost(size: number): Promise<PickRow> {
  // chat requests as the director hands them over: 64 conversations sharing a system prompt, no session header
  const system = 'You are a helpful assistant. Answer briefly and cite your sources. '.repeat(16);
  const prompts = Array.from({ length: 64 }, (_, i) => `${system}user: question ${i} about the weather in city number ${i}, and what to wear there tomorrow?`);
  gc();
  const before = process.memoryUsage().heapUsed;
  const pool: PoolSpec = { name: 'p', engine: 'vllm', servedModelName: 'm', capabilities: ['chat'], resilience: RESILIENCE_DEFAULTS, routing: ROUTING_DEFAULTS };
  // a frozen snapshot, as discovery hands out
  const endpoints: readonly Endpoint[] = Object.freeze(
    Array.from({ length: size }, (_, i) => Object.freeze({ id: `ns/pod-${i}`, pool: 'p', url: new URL(`http://10.0.${i >> 8}.${i & 255}:8000`), weight: 1 })),
  );
  const source = { snapshot: () => endpoints };
  const inFlight = new InFlight();
  const random = mulberry32(7);
  const now = (): number => performance.now();
  // the picker's collaborators as src/main.ts builds them; nothing is started, and with no engine to scrape there are no engine samples
  const background = { endpoints: source, pools: () => [pool], scheduler: systemScheduler, now };
  const picker = new EndpointPicker({
    endpoints: source,
    inFlight,
    breakers: new BreakerRegistry(),
    health: new HealthChecker(background),
    admission: new AdmissionQueues(systemScheduler, now),
    engine: new EngineMetricsScraper({ ...background, localCount: (id) => inFlight.count(id) }),
    prefixIndex: new PrefixIndex(),
    random,
  });
  // a busy fleet: 0-15 requests already running on each endpoint
  for (const ep of endpoints) for (let i = Math.floor(random() * 16); i > 0; i--) inFlight.acquire(ep.id, 'p');
  const none = new Set<string>();
  let sent = 0;
  const once = async (): Promise<void> => {
    const prompt = prompts[sent++ % prompts.length] as string;
    const picked = await picker.pick(pool, none, undefined, { priority: 'standard', promptText: () => prompt, header: () => undefined });
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
  /** /livez answer times during the hold, sorted (ms). */
  livezMs: number[];
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

/**
 * Stalls of the router's event loop seen from outside: /livez asked every 20 ms until `stop` aborts;
 * its answer times, sorted. Unlike prom-client's lag histogram, this sees the stall a /metrics
 * scrape causes itself (the histogram is reset in the middle of it, and the interval spanning a reset
 * is never recorded).
 */
async function probeLivez(adminUrl: string, stop: AbortSignal): Promise<number[]> {
  const times: number[] = [];
  while (!stop.aborted) {
    const t0 = performance.now();
    await (await fetch(`${adminUrl}/livez`)).text();
    times.push(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 20));
  }
  return times.sort((a, b) => a - b);
}

/** Idle, as an operator sees it: started, then a few requests answered (streamed and not). */
async function answerFew(url: string): Promise<void> {
  for (let i = 0; i < IDLE_REQUESTS; i++) {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${BENCH_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content: 'Hello.' }], max_tokens: 1, stream: i % 2 === 0 }),
    });
    await res.text();
    if (res.status !== 200) throw new Error(`scale: an idle-phase request was answered ${res.status}`);
  }
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
    await answerFew(router.url);
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
    const holding = new AbortController();
    const probing = probeLivez(router.adminUrl, holding.signal);
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
    holding.abort();
    const livezMs = await probing;
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
      livezMs,
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
  const keyRows: KeyRow[] = [];
  for (const count of KEY_COUNTS) {
    keyRows.push(await keyCost(count));
    console.error(`scale: ${count} keys: ${keyRows.at(-1)!.nsPerKey.toFixed(0)} ns per wrong key (every digest in turn: ${keyRows.at(-1)!.nsPerKeyLoop.toFixed(0)})`);
  }
  console.error(`scale: ${STREAMS} streams…`);
  const streams = await manyStreams();
  const base = picks[0]!;
  const maxLag = Math.max(...streams.lagP99Ms);
  const sortedLag = [...streams.lagP99Ms].sort((a, b) => a - b);
  const medianLag = percentile(sortedLag, 0.5);
  const sortedScrape = [...streams.scrapeMs].sort((a, b) => a - b);
  const verdict = (ok: boolean): string => (ok ? 'met' : '**missed**');
  const idleMet = streams.idleRssMiB <= TARGET.idleRssMiB;
  const rssMet = Math.max(streams.holdRssMiB, streams.peakRssMiB) <= TARGET.holdRssMiB;
  const lagMet = maxLag <= TARGET.lagP99Ms;
  const lines = [
    '# Scale',
    '',
    SMOKE ? '**Smoke run: numbers are meaningless.**\n' : '',
    ...machine(),
    '',
    '## Cost of a pick as endpoints grow',
    '',
    'One pick with the default scheduling profile (`ROUTING_DEFAULTS`: outstanding, queue, kv-cache, prefix, session) = filter the',
    'pool by health and breaker, skip endpoints at their concurrency limit, score every candidate, take a breaker ticket and an',
    "in-flight slot, then settle and release them: the router's own classes in one process, the picker built as `src/main.ts`",
    'builds it (health checker, engine-metrics scraper, prefix memory), 0–15 requests already outstanding on each endpoint. Each',
    'pick is a chat request from one of 64 conversations sharing a system prompt, without a session header; there are no engines',
    'to scrape, so no engine samples (the queue and kv-cache scorers are neutral). Target: at most 50 µs at 1,000 endpoints.',
    'Memory: heap held per endpoint (snapshot entry, breaker, in-flight counter, prefix memory) after a warm-up.',
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
    '## Cost of a key on a new connection as the keys file grows',
    '',
    'A key presented on a new connection (or one the connection did not authenticate with before) is hashed and looked up among',
    "the keys' digests (`KeyStore.authenticate`); a wrong key costs the same, so this is what a flood of made-up keys costs every",
    "tenant. Baseline in the same run: the loop earlier versions ran, the digest compared with every key's in turn (`timingSafeEqual`).",
    '',
    table(
      ['keys', 'µs per key (lookup)', 'µs per key (every digest in turn)'],
      keyRows.map((k) => [k.keys, (k.nsPerKey / 1000).toFixed(2), (k.nsPerKeyLoop / 1000).toFixed(2)]),
    ),
    '',
    `## ${STREAMS} concurrent streams through one router process`,
    '',
    `One simulator upstream emitting one token per second per stream (${Math.round(1000 / TOKEN_INTERVAL_MS)} event/s each, ${STREAMS * Math.round(1000 / TOKEN_INTERVAL_MS)} events/s in all);`,
    `streams opened at ${RAMP_RATE}/s, then held for ${HOLD_MS / 1000} s while /metrics is scraped every ${SMOKE ? 0.5 : 2} s. Event-loop lag is`,
    "prom-client's `nodejs_eventloop_lag_p99_seconds` (p99 since the previous scrape, 10 ms resolution); the worst scrape is reported",
    'and judged. The router runs in static mode, started as users start it (`node dist/cli.js serve --config FILE`); its idle RSS is',
    `read before the streams open, after it answered ${IDLE_REQUESTS} chat requests (half of them streamed) and one /metrics scrape.`,
    'The lag histogram cannot see the stall a scrape causes itself (prom-client resets it in the middle of that stall), so /livez is',
    'also asked every 20 ms during the hold: its answer time is what any request waits when the loop stalls, scrapes included.',
    '',
    table(
      ['figure', 'value', 'target'],
      [
        ['streams opened / answered with errors', `${streams.opened} / ${streams.errors}`, ''],
        ['in flight at the router (max seen)', streams.inFlight, ''],
        ['router RSS idle', `${streams.idleRssMiB.toFixed(0)} MiB`, `≤ ${TARGET.idleRssMiB} MiB`],
        [
          'router RSS while holding',
          `${streams.holdRssMiB.toFixed(0)} MiB (${(streams.holdRssMiB / streams.idleRssMiB).toFixed(1)}× idle, ${(((streams.holdRssMiB - streams.idleRssMiB) * 1024) / STREAMS).toFixed(0)} KiB per stream)`,
          `≤ ${TARGET.holdRssMiB} MiB`,
        ],
        ['router peak RSS', `${streams.peakRssMiB.toFixed(0)} MiB`, `≤ ${TARGET.holdRssMiB} MiB`],
        ['event-loop lag p99 (worst scrape)', `${maxLag.toFixed(1)} ms`, `≤ ${TARGET.lagP99Ms} ms`],
        ['event-loop lag p99 (median scrape)', `${medianLag.toFixed(1)} ms`, ''],
        ['/metrics answer time p50 / max', `${percentile(sortedScrape, 0.5).toFixed(1)} / ${sortedScrape.at(-1)?.toFixed(1)} ms`, ''],
        [
          '/livez answer time p50 / p99 / max (asked every 20 ms)',
          `${percentile(streams.livezMs, 0.5).toFixed(1)} / ${percentile(streams.livezMs, 0.99).toFixed(1)} / ${streams.livezMs.at(-1)?.toFixed(1)} ms`,
          '',
        ],
        ['SSE events delivered', streams.events, ''],
      ],
    ),
    '',
    `Verdict: idle RSS ${verdict(idleMet)}, RSS with ${STREAMS} streams ${verdict(rssMet)}, event-loop lag ${verdict(lagMet)}.`,
    '',
  ];
  const svg = stack([
    barChart(
      'Cost of a pick (µs)',
      'µs',
      picks.map((p) => ({ label: `${p.endpoints} endpoints`, values: [{ name: 'pick + release', value: p.nsPerPick / 1000 }] })),
    ),
    barChart(`Router idle and with ${STREAMS} open streams`, 'MiB / ms', [
      {
        label: 'RSS idle, MiB',
        values: [
          { name: 'measured', value: streams.idleRssMiB },
          { name: 'target', value: TARGET.idleRssMiB },
        ],
      },
      {
        label: 'RSS holding, MiB',
        values: [
          { name: 'measured', value: Math.max(streams.holdRssMiB, streams.peakRssMiB) },
          { name: 'target', value: TARGET.holdRssMiB },
        ],
      },
      {
        label: 'loop lag p99, ms',
        values: [
          { name: 'measured', value: maxLag },
          { name: 'target', value: TARGET.lagP99Ms },
        ],
      },
    ]),
  ]);
  const out = write('scale', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`scale: wrote ${out.md} and ${out.svg}`);
}

await main();
