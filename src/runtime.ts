/**
 * What the router needs from the Node runtime, checked by the executable before it loads anything
 * else (cli.ts). Kept free of imports so it can run on any Node.
 */

/** The oldest Node the router runs on (package.json `engines`); dependencies need zstd in node:zlib. */
export const MIN_NODE = '22.19.0';

/**
 * V8 flags the router's latency depends on. A 4 MiB semi-space keeps each young-generation GC short:
 * with the default (sized from the heap limit) a scavenge paused the router 10–20 ms at a time and
 * set its p99 (bench/results/overhead.md).
 */
export const ROUTER_V8_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

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

/**
 * The router flags `command` should run with that neither the command line nor NODE_OPTIONS sets
 * (a flag the user set, with any value, is left as they set it).
 */
export function routerNodeFlags(command: string | undefined, execArgv: readonly string[], nodeOptions: string | undefined): string[] {
  if (command === undefined || !ROUTER_COMMANDS.has(command)) return [];
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].map((arg) => arg.split('=')[0]?.replace(/_/g, '-'));
  return ROUTER_V8_FLAGS.filter((flag) => !given.includes(flag.split('=')[0]));
}
