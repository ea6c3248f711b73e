/**
 * What the router needs from the Node runtime, checked by the executable before it loads anything
 * else (cli.ts). Kept free of imports so it can run on any Node.
 */

/** The oldest Node the router runs on (package.json `engines`); dependencies need zstd in node:zlib. */
export const MIN_NODE = '22.19.0';

/**
 * V8 flags the router's latency depends on (bench/results/overhead.md, README Performance):
 *
 * - `--max-semi-space-size=4`: a 4 MiB semi-space keeps each young-generation GC short. With the
 *   default (sized from the heap limit) a scavenge paused the router 10–20 ms at a time and set its p99.
 * - `--no-parallel-scavenge`: a scavenge on the router's own thread only. The router is one thread
 *   and gets about one core; helper threads for a scavenge wait for a core the router's neighbours
 *   (or its own thread) hold. At 500 streams/s on the 2-core bench machine scavenges paused 0.53 ms
 *   on average against 0.88 (p90 0.8 against 1.5 ms), with no more CPU a stream.
 * - `--no-allocation-site-pretenuring`: V8 allocates straight into the old generation from a site
 *   whose objects mostly survived a scavenge, and keeps doing so. Under a burst (32 requests in flight)
 *   a request's objects outlive scavenges, so sites of the request path were pretenured; afterwards,
 *   at 500 streams/s, each request left its objects in the old generation: 30–40% of its growth
 *   (205–241 → 143 KB/s), so full collections, 5–9 ms pauses, came that much more often.
 * - `--liftoff-only`: WebAssembly runs as V8's baseline (Liftoff) code, never recompiled by TurboFan.
 *   The router's only WebAssembly is the engine client's HTTP response parser (undici's llhttp,
 *   src/proxy/engine-agent.ts). Its optimising recompile, a few requests in, ran on a V8 helper thread
 *   whose allocator kept the 9.4 MiB it used: idle RSS after 10 requests was 98–100 MiB with it and
 *   89–90 without, and closed-loop CPU a request was no higher without it (139–173 against 148–174 µs,
 *   four alternated rounds).
 */
export const ROUTER_V8_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--no-parallel-scavenge', '--no-allocation-site-pretenuring', '--liftoff-only'];

/** Commands that run a router and so get {@link ROUTER_V8_FLAGS}. */
const ROUTER_COMMANDS = new Set(['serve', 'demo']);

function parts(version: string): number[] {
  return version
    .replace(/^v/, '')
    .split('.')
    .map((p) => Number.parseInt(p, 10) || 0);
}

/** Why `version` cannot run the router, or undefined when it can. */
export function unsupportedNode(version: string): string | undefined {
  const have = parts(version);
  const need = parts(MIN_NODE);
  for (let i = 0; i < need.length; i++) {
    const a = have[i] ?? 0;
    const b = need[i] ?? 0;
    if (a > b) return undefined;
    if (a < b) return `needs Node.js ${MIN_NODE} or later (this is ${version.replace(/^v?/, 'v')}); inside the checkout, npm scripts and \`npx modelgate\` use the pinned Node 24`;
  }
  return undefined;
}

/** A flag's name as V8 compares it: dashes for underscores, no value, no `no-` (so `--x` and `--no-x` are one flag). */
function flagName(arg: string): string {
  return (arg.split('=')[0] ?? '').replace(/_/g, '-').replace(/^--no-/, '--');
}

/**
 * The router flags `command` should run with that neither the command line nor NODE_OPTIONS sets
 * (a flag the user set, with any value, or negated, is left as they set it).
 */
export function routerNodeFlags(command: string | undefined, execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  if (command === undefined || !ROUTER_COMMANDS.has(command)) return [];
  const given = new Set([...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map(flagName));
  return ROUTER_V8_FLAGS.filter((flag) => !given.has(flagName(flag)));
}
