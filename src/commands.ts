/**
 * `modelgate <command>` (cli.ts checks the runtime, then calls runCli). Bad flags or config, and a
 * port that cannot be listened on, print one clear message naming the field and exit 2.
 *
 * Each command imports what it runs when it runs: `serve` never loads the simulator or the demo,
 * `sim` never loads the router (test/startup/lazy-loading.test.ts).
 */
import { parseArgs } from 'node:util';
import { describeDoubledLimitName, describeUnknownModelName, doubledLimitNames, readKeysFile, unknownModelNames } from './config/keys-file.js';
import { ConfigError, loadConfig } from './config/load.js';
import { type Config } from './config/schema.js';

const USAGE = `Usage: modelgate <command> [flags]

Commands:
  serve --config FILE      run the router (or set MODELGATE_CONFIG)
  validate --config FILE   check a config file and its keys file, then exit
  demo [--port 8080] [--admin-port 9090] [--log-level info]
                           simulated replicas + the router on 127.0.0.1, with a demo key
  sim [flags]              a simulated vLLM-compatible engine (modelgate sim --help)
  help                     this text (so does --help after a command)
`;

class UsageError extends Error {}

function flags(args: string[], options: Record<string, { type: 'string' }>): Record<string, string | undefined> {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${USAGE}`);
  }
}

/** The first SIGTERM or SIGINT stops gracefully (`stop`); a second one asks it to be quick (`hurry`). */
function onSignals(stop: () => Promise<void>, hurry?: () => void): void {
  let stopping = false;
  const handler = (): void => {
    if (stopping) return void hurry?.();
    stopping = true;
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`modelgate: shutdown failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

async function runSim(args: string[]): Promise<void> {
  const { parseSimArgs, simHelp, SimOptionsError } = await import('./sim/options.js');
  const { startSim } = await import('./sim/server.js');
  const usage = (err: unknown): unknown => (err instanceof SimOptionsError ? new UsageError(err.message) : err);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(simHelp() + '\n');
    return;
  }
  let options: ReturnType<typeof parseSimArgs>;
  try {
    options = parseSimArgs(args);
  } catch (err) {
    throw usage(err);
  }
  const starting = startSim(options).catch((err: unknown) => {
    throw usage(err);
  });
  onSignals(async () => (await starting).close());
  const sim = await starting;
  process.stdout.write(`modelgate sim listening on ${sim.url} (models: ${options.model.join(', ')})\n`);
}

/**
 * Each static pool's Hugging Face tokenizer directory, loaded as the router loads it: the config check
 * reads only that both files are there, and files that do not load (a truncated tokenizer.json, a
 * chat_template that does not parse) would otherwise leave the pool on the estimate, said only in a log.
 */
async function checkTokenizers(config: Config): Promise<void> {
  const dirs = new Map<string, string>();
  config.pools.forEach((pool, i) => {
    const own = pool.routing?.kvEvents;
    const kv = { ...config.routing.kvEvents, ...own };
    if (kv.enabled && kv.tokenizer === 'huggingface' && kv.tokenizerDir && !dirs.has(kv.tokenizerDir)) {
      dirs.set(kv.tokenizerDir, `${own ? `pools[${i}].routing` : 'routing'}.kvEvents.tokenizerDir`);
    }
  });
  if (dirs.size === 0) return;
  const { loadHfModel } = await import('./kv-events/hf-tokenizer.js');
  for (const [dir, field] of dirs) {
    try {
      await loadHfModel(dir);
    } catch (err) {
      throw new ConfigError((err as Error).message, field);
    }
  }
}

async function runServe(args: string[]): Promise<void> {
  const { config: file } = flags(args, { config: { type: 'string' } });
  const config = loadConfig(file, process.env);
  await checkTokenizers(config);
  const starting = import('./main.js').then(({ startRouter }) => startRouter(config));
  // Signals are handled from the start: one that arrives while starting drains once started.
  onSignals(
    async () => {
      await (await starting).shutdown();
    },
    () =>
      void starting.then(
        (router) => router.hurry(),
        () => undefined,
      ),
  );
  await starting;
}

/** `modelgate validate`: the config and its keys file, checked without starting anything. */
export async function validateCommand(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { config: file } = flags(args, { config: { type: 'string' } });
  const config = loadConfig(file, env);
  await checkTokenizers(config);
  const unserved: string[] = [];
  if (config.discovery.mode !== 'kubernetes') {
    // what `serve` checks of each pool as it starts (its overrides merged, scale from zero's health checks)
    const [{ poolResolver }, { staticPools }, { unservedCapabilities }] = await Promise.all([import('./config/pool-settings.js'), import('./wiring/static-discovery.js'), import('./core/types.js')]);
    for (const pool of staticPools(config, poolResolver({ resilience: config.resilience, routing: config.routing }))) unserved.push(...unservedCapabilities(pool));
  } else {
    // the kubeconfig file the config names, as `serve` reads it
    (await import('./wiring/kubernetes-discovery.js')).checkKubeconfig(config, env);
  }
  const keys = await readKeysFile(config.auth.keysFile);
  const endpoints = config.pools.reduce((n, p) => n + p.endpoints.length, 0);
  const count = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;
  // in static mode every deployment is known: a key naming none of them is said (not refused)
  const unknown = config.discovery.mode === 'kubernetes' ? [] : unknownModelNames(keys, config.deployments);
  const doubled = config.discovery.mode === 'kubernetes' ? [] : doubledLimitNames(keys, config.deployments);
  const warnings = [...unknown.map((u) => describeUnknownModelName(u)), ...doubled.map((d) => describeDoubledLimitName(d)), ...unserved].map((w) => `warning: ${w}\n`).join('');
  return `config OK: ${count(config.pools.length, 'pool')}, ${count(endpoints, 'endpoint')}, ${count(config.deployments.length, 'deployment')}, ${count(keys.length, 'key')}\n${warnings}`;
}

async function demoCommand(args: string[]): Promise<void> {
  const { DemoUsageError, runDemo } = await import('./demo.js');
  const starting = runDemo(args).catch((err: unknown) => {
    throw err instanceof DemoUsageError ? new UsageError(err.message) : err;
  });
  onSignals(async () => (await starting).close());
  await starting;
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  // `modelgate help`, or --help after a command (sim prints its own flags)
  if (command === 'help' || (command !== 'sim' && rest.some((a) => a === '--help' || a === '-h'))) {
    process.stdout.write(USAGE);
    return;
  }
  switch (command) {
    case 'serve':
      return runServe(rest);
    case 'validate':
      process.stdout.write(await validateCommand(rest, process.env));
      return;
    case 'demo':
      return demoCommand(rest);
    case 'sim':
      return runSim(rest);
    case undefined:
    case '--help':
    case '-h':
      process.stdout.write(USAGE);
      if (command === undefined) process.exitCode = 2;
      return;
    default:
      throw new UsageError(`unknown command "${command}"\n\n${USAGE}`);
  }
}

/** The exit code and one-line message for an error that ends the CLI. */
export function exitFor(err: unknown): { code: number; message: string } {
  if (err instanceof UsageError || err instanceof ConfigError) return { code: 2, message: `modelgate: ${err.message}` };
  return { code: 1, message: `modelgate: ${err instanceof Error ? err.message : String(err)}` };
}

/** Runs one command line; an error ends the process with its exit code and one line on stderr. */
export async function runCli(argv: string[]): Promise<void> {
  try {
    await main(argv);
  } catch (err) {
    const { code, message } = exitFor(err);
    process.stderr.write(message + '\n');
    process.exit(code);
  }
}
