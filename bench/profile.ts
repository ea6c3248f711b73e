/**
 * Where a router's CPU goes: modelgate under the overhead benchmark's closed-loop load
 * (non-streamed, 32 in flight, zero-latency simulator) with `--cpu-prof`, summarised as the
 * functions with the most self time and the share of samples under each module (inclusive).
 * Writes bench/results/profile.{md,svg}; the raw .cpuprofile (open it in Chrome DevTools or
 * speedscope for a flame graph) is left in .bench/profile/.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { load } from './lib/loadgen.js';
import { BENCH_KEY, startModelgate, startSim, usage } from './lib/procs.js';
import { barChart, machine, SMOKE, table, write } from './lib/report.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  /** µs */
  startTime: number;
  endTime: number;
}

const DIR = new URL('../profile/', import.meta.url).pathname; // .bench/profile/
const short = (url: string): string =>
  url
    .replace(/.*node_modules\//, '')
    .replace(/.*\/dist\//, 'dist/')
    .replace(/^node:/, 'node:');
const moduleOf = (url: string): string | undefined => {
  const dep = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];
  if (dep && dep !== 'node') return dep;
  const own = /\/dist\/([^/]+)\//.exec(url)?.[1];
  return own ? `modelgate ${own}/` : undefined;
};

/**
 * The request phase a frame's code belongs to, by its file or package; undefined for code that is
 * no phase by itself (Node's internals, natives), whose time goes to the nearest caller that is.
 */
const PHASES: Array<[RegExp, string]> = [
  [/\/dist\/server\/(body|inference)\.js|\/dist\/api\/(json-depth|multipart)\.js/, 'parse (read the body, JSON)'],
  [/\/dist\/api\/|node_modules\/ajv\//, 'validate (ajv, cross-field checks)'],
  [/\/dist\/auth\//, 'authenticate (key hash, lookup)'],
  [/\/dist\/limits\//, 'limits'],
  [/\/dist\/(resilience|balancer|registry)\/|node_modules\/opossum\//, 'schedule (admission, pick, breakers)'],
  [
    /\/dist\/(director|proxy\/(forwarder|headers|body-patch))\.?|\/dist\/director\/|\/dist\/proxy\/(forwarder|headers|body-patch|upstream-errors)\.js|node_modules\/(http-proxy-middleware|httpxy)\//,
    'forward (plan, headers, request to the engine)',
  ],
  [/\/dist\/proxy\/(relay|sse-tap|usage)\.js/, 'relay (response to the client, usage)'],
  [/\/dist\/metrics\/|node_modules\/prom-client\//, 'metrics'],
  [/\/dist\/server\/access-log\.js|node_modules\/(pino|sonic-boom|pino-std-serializers|fast-redact|on-exit-leak-free|thread-stream)\//, 'log (access log line)'],
  [
    /\/dist\/server\/|node_modules\/(express|router|type-is|body-parser|finalhandler|send|debug|qs|media-typer|content-type|mime-types|on-finished|parseurl)\//,
    'serve (express, request context, errors)',
  ],
  [/\/dist\//, 'other modelgate code'],
];
const phaseOf = (url: string): string | undefined => PHASES.find(([re]) => re.test(url))?.[1];

/**
 * Samples by request phase: each sample goes to the innermost frame on its stack that belongs to a
 * phase (so a socket write under the relay is the relay's, JSON.parse under the body reader is
 * parsing); samples with no such frame are Node's HTTP machinery, GC, idle or start-up.
 */
function phases(profile: Profile): Array<[string, number]> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const out = new Map<string, number>();
  for (const sample of profile.samples) {
    const leaf = byId.get(sample)!.callFrame;
    let phase: string | undefined = leaf.functionName === '(garbage collector)' ? 'garbage collection' : leaf.functionName === '(idle)' ? 'idle' : undefined;
    for (let cur: number | undefined = sample; phase === undefined && cur !== undefined; cur = parent.get(cur)) phase = phaseOf(byId.get(cur)!.callFrame.url);
    phase ??= /^(writev|writeBuffer|writeString|writeUtf8String|writeLatin1String)$/.test(leaf.functionName)
      ? 'socket writes (kernel; both directions, flushed after the handlers)'
      : 'Node HTTP: parsing, sockets, timers (no modelgate frame on the stack)';
    out.set(phase, (out.get(phase) ?? 0) + 1);
  }
  return [...out].sort((a, b) => b[1] - a[1]);
}

function analyse(profile: Profile): { total: number; self: Array<[string, number]>; modules: Array<[string, number]> } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const hits = new Map<number, number>();
  for (const s of profile.samples) hits.set(s, (hits.get(s) ?? 0) + 1);
  const self = new Map<string, number>();
  const modules = new Map<string, number>();
  for (const [id, count] of hits) {
    const frame = byId.get(id)!.callFrame;
    const key = `${frame.functionName || '(anonymous)'} ${frame.url ? `${short(frame.url)}:${frame.lineNumber + 1}` : ''}`.trim();
    self.set(key, (self.get(key) ?? 0) + count);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const mod = moduleOf(byId.get(cur)!.callFrame.url);
      if (mod && !seen.has(mod)) {
        seen.add(mod);
        modules.set(mod, (modules.get(mod) ?? 0) + count);
      }
    }
  }
  const sorted = (m: Map<string, number>): Array<[string, number]> => [...m].sort((a, b) => b[1] - a[1]);
  return { total: profile.samples.length, self: sorted(self), modules: sorted(modules) };
}

async function main(): Promise<void> {
  rmSync(DIR, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });
  const sim = await startSim('upstream', ['--model', 'bench-model', '--ttft-ms', '0', '--itl-ms', '0', '--prefill-ms-per-token', '0', '--max-num-seqs', '1000', '--max-waiting', '100000']);
  const router = await startModelgate([sim.url], 'bench-model', {}, { cpuProfileDir: DIR });
  const windowMs = SMOKE ? 1000 : 10_000;
  // BENCH_PROFILE_STREAMS=1: a diagnostic run (with BENCH_OUT) of the stream path instead, open loop at
  // the overhead harness's 500 streams/s (fixed arrivals), after the same closed-loop warm-up.
  const streams = process.env.BENCH_PROFILE_STREAMS === '1';
  let rps: number;
  let requests: number;
  let cpuSeconds: number;
  try {
    const body = JSON.stringify({
      model: 'bench-model',
      messages: [{ role: 'user', content: 'Write a haiku about load balancers.' }],
      max_tokens: 16,
      ignore_eos: true,
      ...(streams ? { stream: true } : {}),
    });
    const target = { url: `${router.url}/v1/chat/completions`, headers: { authorization: `Bearer ${BENCH_KEY}` }, bodies: [body] };
    // every request the router served counts (the µs per request spread its whole CPU time)
    const warm = streams ? (await load({ ...target, mode: 'closed', concurrency: 32, warmupMs: 0, durationMs: SMOKE ? 200 : 4000 })).finished : 0;
    const result = streams
      ? await load({ ...target, mode: 'open', rate: 500, arrivals: 'fixed', warmupMs: SMOKE ? 200 : 2000, durationMs: windowMs })
      : await load({ ...target, mode: 'closed', concurrency: 32, warmupMs: SMOKE ? 200 : 2000, durationMs: windowMs });
    rps = (result.samples.filter((s) => s.status === 200).length * 1000) / windowMs;
    requests = warm + result.finished;
    cpuSeconds = usage(router.pid).cpuSeconds;
  } finally {
    await router.stop(); // the profile is written as the process exits
    await sim.stop();
  }
  // The executable re-executes itself with its V8 flags (src/cli.ts), and the image it replaces writes a
  // profile of its own start-up too: a second file when the two fall in different seconds. The router's
  // is the large one.
  const file = readdirSync(DIR)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => ({ f, size: statSync(join(DIR, f)).size }))
    .sort((a, b) => b.size - a.size)[0]?.f;
  if (!file) throw new Error('no .cpuprofile written');
  const profile = JSON.parse(readFileSync(join(DIR, file), 'utf8')) as Profile;
  const { total, self, modules } = analyse(profile);
  const byPhase = phases(profile);
  // the router's CPU time spread over its busy samples (a sample is wall time: on a busy machine the thread is not always running)
  const busy = profile.samples.length - (byPhase.find(([p]) => p === 'idle')?.[1] ?? 0);
  const usPerSample = (cpuSeconds * 1e6) / busy;
  const pct = (n: number): string => `${((100 * n) / total).toFixed(1)}%`;
  const lines = [
    '# Where modelgate spends its CPU',
    '',
    streams
      ? `modelgate at 500 streams/s (open loop, fixed arrivals, after 4 s of closed-loop streams; zero-latency simulator; ${Math.round(rps)} streams/s answered here), profiled`
      : `modelgate under closed-loop load (32 in flight, non-streamed, zero-latency simulator; ${Math.round(rps)} requests/s here), profiled`,
    'with `--cpu-prof` (in NODE_OPTIONS; the executable still adds its own flags) for the whole run (start-up and warm-up included). Self time by function, and the share of samples with',
    'each module on the stack (a sample counts once per module; the kernel time of socket writes shows as `writev`, idle time',
    `as \`(idle)\`). The raw profile is in \`.bench/profile/${file}\`.${SMOKE ? ' **Smoke run.**' : ''}`,
    '',
    ...machine(),
    '',
    '## Where the time goes per request (by phase)',
    '',
    'Each sample is charged to the innermost frame on its stack that belongs to a phase of the request (the socket write',
    "under the relay is the relay's, JSON.parse under the body reader is parsing); socket writes Node flushes after the",
    "handler returned have no modelgate frame left on the stack and are shown apart. µs per request: the router's CPU time",
    `(${cpuSeconds.toFixed(1)} s, GC threads included) spread over the busy samples, divided by the ${requests} requests of the run (warm-up included).`,
    '',
    table(
      ['phase', 'samples', 'µs per request'],
      byPhase.map(([p, n]) => [p, pct(n), p === 'idle' ? '' : ((n * usPerSample) / requests).toFixed(1)]),
    ),
    '',
    '## By module (inclusive)',
    '',
    table(
      ['module', 'samples'],
      modules.slice(0, 20).map(([m, n]) => [m, pct(n)]),
    ),
    '',
    '## Top functions (self)',
    '',
    table(
      ['function', 'samples'],
      self.slice(0, 25).map(([f, n]) => [`\`${f}\``, pct(n)]),
    ),
    '',
  ];
  const svg = barChart(
    'modelgate CPU by module (% of samples, inclusive)',
    '%',
    modules.slice(0, 12).map(([m, n]) => ({ label: m.replace('modelgate ', 'mg:').slice(0, 14), values: [{ name: 'share of samples', value: (100 * n) / total }] })),
  );
  const out = write('profile', lines.join('\n'), svg);
  console.log(lines.join('\n'));
  console.error(`profile: wrote ${out.md} and ${out.svg}`);
}

await main();
