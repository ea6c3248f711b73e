/**
 * KV events vs the estimate: the prefix benchmark's shared-prefix workload (multi-turn chats over a
 * few long system prompts, each replica's KV cache holding half of them) through modelgate's default
 * profile, its `prefix` scorer fed either by the router's estimate (what it sent where, sized to the
 * engines' caches) or by the engines' KV-cache events (`routing.kvEvents`, the simulator's tokenizer:
 * exact). Two setups: one router, and two routers sharing the fleet (requests alternate between
 * them), where each router's estimate sees only its own half of the traffic and the events see all.
 * Reports, per cell, the hit rate the routers predicted for their picks next to the engines' real
 * one, and TTFT. Fresh simulators for every cell. Writes bench/results/kv-events.{md,svg}.
 *
 * Each simulator listens on its own loopback address (127.0.N.i) so that all publish on one port, as
 * pods do; the routers' `kvEvents.endpoint` is `tcp://{host}:PORT`.
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import { join } from 'node:path';
import { load } from './lib/loadgen.js';
import { engineCounters, hitRate, scrape, sum, type EngineCounters } from './lib/metrics.js';
import { BENCH_KEY, freePorts, startModelgate, type ModelgateProc, type Proc } from './lib/procs.js';
import { sharedChats, systemPrompts } from './lib/chat-workload.js';
import { barChart, machine, SMOKE, source, summarize, table, write, type Summary } from './lib/report.js';

const MODEL = 'bench-model';
const WARMUP_MS = SMOKE ? 300 : Number(process.env.BENCH_KV_WARMUP_MS ?? 5_000);
const WINDOW_MS = SMOKE ? 1_000 : Number(process.env.BENCH_KV_WINDOW_MS ?? 20_000);
const BODIES = SMOKE ? 400 : 3_000;
const CLIENTS = 32;
const REPLICAS = 4;
const MAX_NUM_SEQS = 8;
const BLOCK_TOKENS = 16;
const SYSTEM_PROMPTS = 8;
const CONVERSATIONS = 64;
const KV_SHARE = 1 / 2;
const LATENCY = ['--ttft-ms', '10', '--prefill-ms-per-token', '0.1', '--itl-ms', '5'];
const ROOT = new URL('../../', import.meta.url).pathname.replace('/.bench/', '/');
const CLI = join(ROOT, 'dist/cli.js');
const NET = `127.0.${100 + Math.floor(Math.random() * 100)}`;

/** The prefix benchmark's workload A (bench/prefix.ts): interleaved multi-turn chats over shared system prompts. */
function workload(): { bodies: string[]; sharedTokens: number } {
  const shared = systemPrompts(SYSTEM_PROMPTS);
  return { bodies: sharedChats(shared, { model: MODEL, count: BODIES, conversations: CONVERSATIONS }).bodies, sharedTokens: shared.tokens.reduce((a, b) => a + b, 0) };
}

async function waitForPort(host: string, port: number, exited: () => boolean): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited()) throw new Error(`the simulator on ${host}:${port} exited`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, host, () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`the simulator did not listen on ${host}:${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `modelgate sim` on its own loopback address, publishing KV events on `kv.port` (and replaying them on `kv.replayPort`). */
async function startSim(i: number, httpPort: number, kv: { port: number; replayPort: number }, args: string[]): Promise<Proc> {
  const host = `${NET}.${i + 1}`;
  const name = `replica-${i}`;
  const child = spawn(
    process.execPath,
    [CLI, 'sim', '--host', host, '--port', String(httpPort), '--name', name, '--kv-events-port', String(kv.port), '--kv-events-replay-port', String(kv.replayPort), ...args],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  let exited = false;
  child.once('exit', () => (exited = true));
  await waitForPort(host, httpPort, () => exited);
  return {
    name,
    url: `http://${host}:${httpPort}`,
    pid: child.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        if (exited) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

interface Cell {
  setup: string;
  source: 'estimate' | 'events';
  summary: Summary;
  engineHitRate: number;
  routerHitRate: number;
  /** Share of the routers' picks whose prediction came from complete events. */
  eventsShare: number;
}

async function routerCounters(routers: readonly ModelgateProc[]): Promise<{ hit: number; miss: number; events: number; all: number }> {
  let hit = 0;
  let miss = 0;
  let events = 0;
  let all = 0;
  for (const r of routers) {
    const t = await scrape(r.adminUrl);
    hit += sum(t, 'modelgate_prefix_predicted_blocks_total', { result: 'hit' });
    miss += sum(t, 'modelgate_prefix_predicted_blocks_total', { result: 'miss' });
    events += sum(t, 'modelgate_prefix_predicted_blocks_total', { source: 'events' });
    all += sum(t, 'modelgate_prefix_predicted_blocks_total');
  }
  return { hit, miss, events, all };
}

async function runCell(bodies: string[], setup: string, routerCount: number, useEvents: boolean, simArgs: string[]): Promise<Cell> {
  // every port from one call: two calls can hand out the same port, and the replay port (it was the
  // events port + 1, never checked) was sometimes a replica's HTTP port ("Address already in use")
  const [kvPort, replayPort, ...httpPorts] = (await freePorts(REPLICAS + 2)) as [number, number, ...number[]];
  const sims = await Promise.all(httpPorts.map((p, i) => startSim(i, p, { port: kvPort, replayPort }, simArgs)));
  const routing = useEvents ? { kvEvents: { enabled: true, endpoint: `tcp://{host}:${kvPort}`, replayEndpoint: `tcp://{host}:${replayPort}`, tokenizer: 'simulator' } } : {};
  const routers: ModelgateProc[] = [];
  try {
    for (let i = 0; i < routerCount; i++)
      routers.push(
        await startModelgate(
          sims.map((s) => s.url),
          MODEL,
          { routing },
        ),
      );
    let before: EngineCounters[] = [];
    let routerBefore = { hit: 0, miss: 0, events: 0, all: 0 };
    const mark = setTimeout(() => {
      void Promise.all([Promise.all(sims.map((s) => engineCounters(s.url))), routerCounters(routers)]).then(([c, r]) => {
        before = c;
        routerBefore = r;
      });
    }, WARMUP_MS);
    const result = await load({
      url: routers.map((r) => `${r.url}/v1/chat/completions`),
      headers: { authorization: `Bearer ${BENCH_KEY}` },
      bodies,
      mode: 'closed',
      concurrency: CLIENTS,
      warmupMs: WARMUP_MS,
      durationMs: WINDOW_MS,
    });
    clearTimeout(mark);
    const after = await Promise.all(sims.map((s) => engineCounters(s.url)));
    const routerAfter = await routerCounters(routers);
    const hits = routerAfter.hit - routerBefore.hit;
    const misses = routerAfter.miss - routerBefore.miss;
    return {
      setup,
      source: useEvents ? 'events' : 'estimate',
      summary: summarize(result.samples, result.windowMs),
      engineHitRate: before.length ? hitRate(before, after) : NaN,
      routerHitRate: hits / (hits + misses),
      eventsShare: (routerAfter.events - routerBefore.events) / Math.max(1, routerAfter.all - routerBefore.all),
    };
  } finally {
    await Promise.all(routers.map((r) => r.stop()));
    await Promise.all(sims.map((s) => s.stop()));
  }
}

const pct = (x: number): string => (Number.isNaN(x) ? '–' : `${(x * 100).toFixed(0)}%`);

async function main(): Promise<void> {
  const { bodies, sharedTokens } = workload();
  const kvBlocks = Math.round((sharedTokens / BLOCK_TOKENS) * KV_SHARE);
  const simArgs = ['--model', MODEL, '--max-num-seqs', String(MAX_NUM_SEQS), '--max-waiting', '100000', '--block-size', String(BLOCK_TOKENS), '--kv-cache-blocks', String(kvBlocks), ...LATENCY];
  const cells: Cell[] = [];
  for (const [setup, count] of [
    ['one router', 1],
    ['two routers', 2],
  ] as const) {
    for (const useEvents of [false, true]) {
      const cell = await runCell(bodies, setup, count, useEvents, simArgs);
      cells.push(cell);
      console.error(
        `kv-events: ${setup} / ${cell.source}: TTFT p50 ${cell.summary.ttfb.p50.toFixed(0)} ms p99 ${cell.summary.ttfb.p99.toFixed(0)} ms, ${cell.summary.rps.toFixed(1)} req/s, predicted ${pct(cell.routerHitRate)} vs engines ${pct(cell.engineHitRate)}`,
      );
    }
  }
  const rows = cells.map((c) => [
    c.setup,
    c.source,
    c.summary.ttfb.p50.toFixed(0),
    c.summary.ttfb.p99.toFixed(0),
    c.summary.rps.toFixed(1),
    pct(c.routerHitRate),
    pct(c.engineHitRate),
    `${((c.routerHitRate - c.engineHitRate) * 100).toFixed(0)} pts`,
    pct(c.eventsShare),
    String(c.summary.errors),
  ]);
  const md = [
    '# KV-cache events vs the prefix estimate',
    '',
    `Generated by \`bench/kv-events.ts\`${SMOKE ? ' (smoke run: numbers mean nothing)' : ''}. ${REPLICAS} simulator replicas (\`${simArgs.join(' ')}\`), each KV cache ${kvBlocks} blocks: half of the ${SYSTEM_PROMPTS} shared system prompts (${sharedTokens} tokens).`,
    `The prefix benchmark's shared-prefix workload (${CONVERSATIONS} interleaved multi-turn chats), closed loop at ${CLIENTS} clients, streamed, \`ignore_eos\`; ${WARMUP_MS / 1000} s warm-up, ${WINDOW_MS / 1000} s measured; fresh simulators per cell.`,
    "modelgate's default profile; *estimate*: the `prefix` scorer fed by what the router sent where (today's behaviour); *events*: fed by the engines' KV-cache events (`routing.kvEvents` with `tokenizer: simulator`, exact).",
    "*Two routers*: requests alternate between two modelgate processes in front of the same fleet, so each router's estimate hears of half the traffic; the events carry all of it.",
    '',
    table(['setup', 'prefix source', 'TTFT p50 ms', 'TTFT p99 ms', 'req/s', 'predicted hit rate', "engines' hit rate", 'predicted − real', 'predicted from events', 'errors'], rows),
    '',
    "Predicted hit rate: `modelgate_prefix_predicted_blocks_total` hit / all over the window, summed over the routers: the blocks each pick's chosen replica was predicted to hold. Engines' hit rate: `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` over the fleet (tokens). *Predicted from events*: the share of those blocks whose prediction came from a complete event index (the rest: from the estimate, before a replica's first event). One run per cell: the p99s move by a few hundred ms from run to run.",
    '',
    '## Machine',
    '',
    ...machine(),
    '',
    source(),
    '',
  ].join('\n');
  const svg = barChart('TTFT p50 (ms): estimate vs KV events', 'ms', [
    ...['one router', 'two routers'].map((setup) => ({
      label: setup,
      values: cells.filter((c) => c.setup === setup).map((c) => ({ name: c.source, value: c.summary.ttfb.p50 })),
    })),
  ]);
  const out = write('kv-events', md, svg);
  console.error(`kv-events: wrote ${out.md}`);
}

await main();
