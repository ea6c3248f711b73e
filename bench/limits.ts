/**
 * What per-key limits cost on the request path: one zero-latency simulator behind three modelgate
 * processes started as users start them — no limits (the baseline), limits counted locally, and limits
 * shared through a real redis-server — at a fixed open-loop rate. The key has every kind of limit
 * (requests and tokens per minute, concurrency, day and month budgets), each far above the load, so
 * every request runs every check and none is refused. The three alternate in rounds, so background
 * load hits all of them. Target: Redis limits add ≤ 0.3 ms to the p50 at 500 requests/s.
 * Writes bench/results/limits.{md,svg}.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { join } from 'node:path';
import { load } from './lib/loadgen.js';
import { BENCH_KEY, freePort, startModelgate, startSim, usage, type ModelgateProc, type Proc } from './lib/procs.js';
import { barChart, machine, othersCpu, SMOKE, source, summarize, table, write, type Summary } from './lib/report.js';

const MODEL = 'bench-model';
const RATE = SMOKE ? 50 : 500;
const WARMUP_MS = SMOKE ? 200 : 2_000;
const WINDOW_MS = SMOKE ? 500 : 8_000;
const ROUNDS = SMOKE ? 1 : 5;
const TARGET_MS = 0.3;
const PROFILE = process.env.BENCH_LIMITS_CPU_PROFILE;
const BODY = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Write a haiku about rate limits.' }], max_tokens: 16, ignore_eos: true });
const LIMITS = '{ requestsPerMinute: 10000000, tokensPerMinute: 1000000000, concurrentRequests: 100000, tokensPerDay: 100000000000, tokensPerMonth: 1000000000000 }';
const KEYS = `- name: bench\n  key: ${BENCH_KEY}\n  limits: ${LIMITS}\n`;

/** redis-server on a free port, no persistence, in a temp dir. */
async function startRedis(): Promise<Proc> {
  const port = await freePort();
  const dir = mkdtempSync(join(os.tmpdir(), 'mg-bench-redis-'));
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  // ready when it answers PING
  const pong = (): Promise<boolean> =>
    new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
      socket.once('data', (data) => {
        socket.destroy();
        resolve(data.toString().startsWith('+PONG'));
      });
      socket.once('error', () => resolve(false));
    });
  for (let i = 0; ; i++) {
    if (await pong()) break;
    if (i > 200 || child.exitCode !== null) throw new Error('redis-server did not start (is it installed? bench/setup.sh installs it)');
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    name: 'redis',
    url: `redis://127.0.0.1:${port}`,
    pid: child.pid!,
    stop: async () => {
      child.kill('SIGTERM');
      if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface Variant {
  name: string;
  proc: ModelgateProc;
}

interface Side {
  summary: Summary;
  cpuMsPerRequest: number;
  maxSendLagMs: number;
}

async function measure(variant: Variant): Promise<Side> {
  const cpu0 = usage(variant.proc.pid).cpuSeconds;
  const result = await load({
    url: `${variant.proc.url}/v1/chat/completions`,
    headers: { authorization: `Bearer ${BENCH_KEY}` },
    bodies: [BODY],
    mode: 'open',
    rate: RATE,
    arrivals: 'fixed',
    warmupMs: WARMUP_MS,
    durationMs: WINDOW_MS,
  });
  const cpu = usage(variant.proc.pid).cpuSeconds - cpu0;
  return { summary: summarize(result.samples, result.windowMs), cpuMsPerRequest: result.finished ? (cpu * 1000) / result.finished : 0, maxSendLagMs: result.maxSendLagMs };
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const ms = (v: number): string => (Number.isFinite(v) ? v.toFixed(2) : 'n/a');

async function main(): Promise<void> {
  const loadBefore = os.loadavg();
  const sim = await startSim('upstream', [
    '--model',
    MODEL,
    '--ttft-ms',
    '0',
    '--itl-ms',
    '0',
    '--prefill-ms-per-token',
    '0',
    '--output-min',
    '16',
    '--output-max',
    '16',
    '--max-num-seqs',
    '1000',
    '--max-waiting',
    '100000',
  ]);
  const redis = await startRedis();
  const variants: Variant[] = [];
  const rounds: Array<{ sides: Record<string, Side>; othersCores: number }> = [];
  /** The Redis routers' /metrics at the end of the run. */
  const scraped = { text: '', strict: '' };
  try {
    // started one by one inside the try: if one fails to start, those before it, Redis and the simulator are still stopped
    variants.push({ name: 'no limits', proc: await startModelgate([sim.url], MODEL) });
    variants.push({ name: 'local limits', proc: await startModelgate([sim.url], MODEL, {}, { keysYaml: KEYS }) });
    // BENCH_LIMITS_CPU_PROFILE=DIR: a diagnostic run with V8's CPU profile of this router written to DIR
    const profiled = PROFILE ? { cpuProfileDir: PROFILE } : {};
    variants.push({ name: 'Redis limits', proc: await startModelgate([sim.url], MODEL, {}, { keysYaml: KEYS, config: { limits: { redis: { url: redis.url } } }, ...profiled }) });
    // every request waits for Redis's answer, as one near a limit does
    variants.push({ name: 'Redis limits, strict', proc: await startModelgate([sim.url], MODEL, {}, { keysYaml: KEYS, config: { limits: { redis: { url: redis.url, strict: true } } } }) });
    for (const v of variants)
      await load({ url: `${v.proc.url}/v1/chat/completions`, headers: { authorization: `Bearer ${BENCH_KEY}` }, bodies: [BODY], mode: 'closed', concurrency: 16, warmupMs: 0, durationMs: WARMUP_MS });
    for (let i = 0; i < ROUNDS; i++) {
      const others = othersCpu();
      const round: Record<string, Side> = {};
      // rotate the order, so no variant always runs first or last
      for (let j = 0; j < variants.length; j++) {
        const v = variants[(i + j) % variants.length]!;
        round[v.name] = await measure(v);
      }
      rounds.push({ sides: round, othersCores: others() });
    }
    scraped.text = await (await fetch(`${variants[2]!.proc.adminUrl}/metrics`)).text();
    scraped.strict = await (await fetch(`${variants[3]!.proc.adminUrl}/metrics`)).text();
  } finally {
    for (const v of variants) await v.proc.stop();
    await redis.stop();
    await sim.stop();
  }

  const calls = (text: string): number => Number(/^modelgate_limits_redis_seconds_count (\d+)/m.exec(text)?.[1] ?? 0);
  const redisCalls = calls(scraped.text);
  const strictCalls = calls(scraped.strict);
  const redisErrors = [scraped.text, scraped.strict].flatMap((text) => text.split('\n').filter((l) => l.startsWith('modelgate_limits_redis_errors_total{')));
  const names = variants.map((v) => v.name);
  const med = (name: string, pick: (s: Side) => number): number => median(rounds.map((r) => pick(r.sides[name] as Side)));
  const added = (name: string, pick: (s: Side) => number): number => median(rounds.map((r) => pick(r.sides[name] as Side) - pick(r.sides['no limits'] as Side)));
  const p50 = (s: Side): number => s.summary.ttlb.p50;
  const p99 = (s: Side): number => s.summary.ttlb.p99;
  const redisAdded = added('Redis limits', p50);
  const strictAdded = added('Redis limits, strict', p50);
  const errors = rounds.reduce((n, r) => n + names.reduce((m, name) => m + (r.sides[name] as Side).summary.errors, 0), 0);
  const md = [
    '# What per-key limits cost',
    '',
    `One zero-latency simulator (\`modelgate sim --ttft-ms 0 --itl-ms 0\`, 16 output tokens) behind four modelgate processes, each`,
    'started as users start it (`node dist/cli.js serve --config …`, access log at `info`, to a file): **no limits** (the baseline),',
    '**local limits** (the key has limits; no `limits.redis`: counted in the router), **Redis limits** (`limits.redis.url` pointing at a',
    'local `redis-server`, everything else default) and **Redis limits, strict** (the same with `limits.redis.strict: true`). The key',
    'holds every kind of limit — requests and tokens per minute, concurrent requests, day and month budgets — far above the load, so',
    'every request runs every check (one Redis script call, plus the settlement and lease release batched off the request path) and',
    'none is refused. Far from its limits the default lets each request through on what Redis last reported and sends the script',
    'without waiting for it; strict waits for every answer, as every request near a limit does by default.',
    `Non-streamed chat, open loop at ${RATE} requests/s (fixed arrivals), ${WINDOW_MS / 1000} s measured after ${WARMUP_MS / 1000} s of warm-up, ${ROUNDS} rounds with the four`,
    'in rotating order; latency to the last byte from the scheduled send time. "added" is the median over rounds of each round\'s difference to the baseline.',
    '',
    ...machine(),
    `- ${source()}`,
    `- load average (1 / 5 / 15 min) before the run: ${loadBefore.map((v) => v.toFixed(2)).join(' / ')}; after: ${os
      .loadavg()
      .map((v) => v.toFixed(2))
      .join(' / ')}`,
    '',
    '## Target',
    '',
    table(
      ['target', 'measured', 'verdict'],
      [
        [`Redis limits add ≤ ${TARGET_MS} ms to the p50 at ${RATE} req/s`, `${ms(redisAdded)} ms`, SMOKE ? 'smoke run: not judged' : redisAdded <= TARGET_MS ? 'met' : 'missed'],
        [`the same with every request waiting for Redis (strict; a key near its limit)`, `${ms(strictAdded)} ms`, 'reported'],
        ['no request refused or failed', String(errors), errors === 0 ? 'met' : 'missed'],
      ],
    ),
    '',
    '## Latency (ms, median over rounds)',
    '',
    table(
      ['variant', 'p50', 'p99', 'added p50', 'added p99', 'router CPU ms/request', 'errors'],
      names.map((name) => [
        name,
        ms(med(name, p50)),
        ms(med(name, p99)),
        name === 'no limits' ? '—' : ms(added(name, p50)),
        name === 'no limits' ? '—' : ms(added(name, p99)),
        ms(med(name, (s) => s.cpuMsPerRequest)),
        String(rounds.reduce((n, r) => n + (r.sides[name] as Side).summary.errors, 0)),
      ]),
    ),
    '',
    `Redis admission calls recorded (the answers, awaited or not): ${redisCalls} by the default router, ${strictCalls} by the strict one; Redis errors: ${redisErrors.length ? redisErrors.join(', ') : 'none'}. Other processes' CPU during each round (cores): ${rounds.map((r) => r.othersCores.toFixed(2)).join(', ')}.`,
    '',
    '## Rounds (p50 / p99 ms)',
    '',
    table(
      ['round', ...names],
      rounds.map((r, i) => [String(i + 1), ...names.map((name) => `${ms(p50(r.sides[name] as Side))} / ${ms(p99(r.sides[name] as Side))}`)]),
    ),
    '',
  ].join('\n');
  const svg = barChart(`Latency at ${RATE} req/s (ms, median over rounds)`, 'ms', [
    { label: 'p50', values: names.map((name) => ({ name, value: med(name, p50) })) },
    { label: 'p99', values: names.map((name) => ({ name, value: med(name, p99) })) },
  ]);
  const out = write('limits', md, svg);
  console.log(`limits: Redis added p50 ${ms(redisAdded)} ms (target ≤ ${TARGET_MS}), strict ${ms(strictAdded)} ms; ${out.md}`);
}

await main();
